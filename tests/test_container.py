"""The container image (Dockerfile, compose.yaml), checked where Docker is absent: the image's
build stage copies exactly the files the wheel is made of (tests/test_wheel.py builds, installs
and serves from that wheel), the runtime stage installs it on a slim Python and runs
`catalog serve` as an unprivileged user with a health check on /healthz, and compose runs the
image against PostgreSQL with the data directory on a volume."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from test_wheel import SOURCES

REPO = Path(__file__).resolve().parents[1]


def instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions, continuation lines joined, comments left out."""
    text = re.sub(r"\\\n\s*", " ", (REPO / "Dockerfile").read_text())
    found = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def stages() -> list[list[tuple[str, str]]]:
    split: list[list[tuple[str, str]]] = []
    for keyword, rest in instructions():
        if keyword == "FROM":
            split.append([])
        split[-1].append((keyword, rest))
    return split


def test_the_build_stage_copies_what_the_wheel_is_made_of_and_builds_it():
    build, _ = stages()
    assert build[0] == ("FROM", "python:3.11-slim AS build")
    copied = {path for keyword, rest in build if keyword == "COPY" for path in shlex.split(rest)[:-1]}
    assert copied == {*SOURCES, "pyproject.toml", "README.md"}
    (run,) = [rest for keyword, rest in build if keyword == "RUN"]
    assert run.startswith("pip wheel") and "--no-deps" in run
    # nothing the build stage copies is left out of the build context
    ignored = {
        line.strip() for line in (REPO / ".dockerignore").read_text().splitlines() if line and line[0] != "#"
    }
    assert not copied & ignored


def test_the_runtime_stage_runs_the_wheel_as_an_unprivileged_user_with_a_health_check():
    _, runtime = stages()
    assert runtime[0] == ("FROM", "python:3.11-slim")
    by = dict(runtime)  # the last of each keyword
    assert "/wheels/*.whl" in by["RUN"] and "rm -rf /wheels" in by["RUN"]
    # installed within the versions the tests passed on, a file the build context holds
    assert "-c /wheels/constraints.txt" in by["RUN"]
    assert ("COPY", "constraints.txt /wheels/") in runtime
    ignored = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()}
    assert "constraints.txt" not in ignored and (REPO / "constraints.txt").is_file()
    users = [rest for keyword, rest in runtime if keyword == "USER"]
    assert users and users[-1] not in ("root", "0")
    assert any(keyword == "RUN" and "useradd" in rest and users[-1] in rest for keyword, rest in runtime)
    assert "CATALOG_DATA_DIR=/data" in by["ENV"] and by["WORKDIR"] == "/data"
    assert json.loads(by["VOLUME"]) == ["/data"] and by["EXPOSE"] == "8080"
    health = by["HEALTHCHECK"]
    assert "http://127.0.0.1:8080/healthz" in health and "--interval=" in health
    probe = json.loads(health[health.index("CMD") + 3 :])
    assert probe[:2] == ["python", "-c"]
    compile(probe[2], "healthcheck", "exec")  # the probe is valid Python
    assert by["STOPSIGNAL"] == "SIGTERM"
    assert json.loads(by["ENTRYPOINT"]) == ["catalog"]
    assert json.loads(by["CMD"]) == ["serve", "--host", "0.0.0.0", "--port", "8080"]


def test_compose_runs_the_image_against_postgresql_with_data_on_a_volume():
    compose = (REPO / "compose.yaml").read_text()
    service = compose[compose.index("\n  catalog:") : compose.index("\nvolumes:")]
    assert "\n    build: .\n" in service
    assert "CATALOG_DATABASE_URL: postgresql://catalog:catalog@postgres:5432/catalog" in service
    assert "- catalogdata:/data" in service
    assert "condition: service_healthy" in service
    # the grace period outlasts the drain (CATALOG_DRAIN_SECONDS, 5 s by default)
    grace = re.search(r"stop_grace_period: (\d+)s", service)
    assert grace is not None and int(grace.group(1)) > 5
    assert "pip install" not in service  # the image is built once, not installed at each start


def test_compose_and_the_docs_name_the_embedded_servers_major_version():
    from catalog.db.embedded import bundled_major

    compose = (REPO / "compose.yaml").read_text()
    images = re.findall(r"image: pgvector/pgvector:pg(\d+)", compose)
    assert images == [str(bundled_major())], images
    assert "- pgdata:/var/lib/postgresql\n" in compose  # where images from 18 on keep their data
    page = (REPO / "docs" / "operations" / "index.md").read_text()
    assert f"`pgvector/pgvector:pg{bundled_major()}`" in page
    assert f"starts (or joins) PostgreSQL {bundled_major()}." in page
