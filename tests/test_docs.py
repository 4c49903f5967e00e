"""The documentation stays true to the code: the site builds without a warning, the reference pages
are what docs/generate.py makes of the code now, everything the code declares (settings, actions,
routes, commands) is documented, and the README's Quickstart runs against a live server.

The generated pages are docs/configuration.md and docs/reference/ (see docs/generate.py); after a
change to what they are made of, run `.venv/bin/python docs/generate.py` and commit the pages.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from catalog.cli import build_parser
from catalog.governance.actions import ACTIONS
from catalog.settings import Settings

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README = REPO / "README.md"
REGENERATE = "run .venv/bin/python docs/generate.py and commit the pages it writes"


def _load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


generate = _load_generator()


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return generate.pages()


# --- the site -------------------------------------------------------------------------------------


def test_the_site_builds_strictly(tmp_path):
    """Every page is in the navigation, every link and anchor resolves (mkdocs.yml: strict)."""
    result = subprocess.run(
        # not --quiet: it silences the warnings, and strict mode then has none to fail on
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]


# --- the generated reference ----------------------------------------------------------------------


def test_the_generated_pages_are_up_to_date(generated):
    stale = generate.stale_pages(generated)
    assert stale == [], f"out of date: {', '.join('docs/' + s for s in stale)}; {REGENERATE}"


def test_the_generator_is_deterministic(generated):
    assert generate.pages() == generated


def _page(name: str) -> str:
    path = DOCS / name
    assert path.exists(), f"docs/{name} is missing; {REGENERATE}"
    return path.read_text()


def _api_pages() -> str:
    return "\n".join(p.read_text() for p in sorted((DOCS / "reference" / "api").glob("*.md")))


VARIABLES = sorted(f.metadata["env"] for f in dataclasses.fields(Settings) if f.metadata["env"])


@pytest.mark.parametrize("variable", VARIABLES)
def test_every_variable_is_documented(variable):
    assert re.search(rf"^\| `{variable}` \|", _page("configuration.md"), re.M), (
        f"{variable} is not in docs/configuration.md's table; {REGENERATE}"
    )


@pytest.mark.parametrize("name", sorted(ACTIONS))
def test_every_action_is_documented(name):
    page = _page("reference/actions.md")
    assert f"### `{name}`" in page, f"action {name} is not in docs/reference/actions.md; {REGENERATE}"


def _openapi_routes() -> list[str]:
    document: dict[str, Any] = generate.build_app().openapi_schema.to_schema()
    return [f"{o.method} {o.path}" for o in generate.operations(document)]


@pytest.mark.parametrize("route", _openapi_routes())
def test_every_route_is_documented(route):
    assert f"## `{route}`" in _api_pages(), f"{route} is not in docs/reference/api/; {REGENERATE}"


def _subcommands() -> list[str]:
    return [" ".join(("catalog", *path)) for path, _, _ in generate._commands(build_parser(), ())]


@pytest.mark.parametrize("command", _subcommands())
def test_every_cli_command_is_documented(command):
    page = _page("reference/cli.md")
    assert f"`{command}" in page, f"{command} is not in docs/reference/cli.md; {REGENERATE}"


def test_every_error_code_is_documented():
    page = _page("reference/errors.md")
    for code, status in generate.error_codes():
        assert re.search(rf"^\| `{code}` \| {status} \|", page, re.M), (code, status, REGENERATE)


# --- the README -----------------------------------------------------------------------------------


def test_the_readme_is_short_and_shows_how_to_run_and_test():
    text = README.read_text()
    assert len(text.splitlines()) <= 150, (
        "the README is a front page: at most 150 lines (the rest is in docs/)"
    )
    assert "make run" in text and "make test" in text


# [text](target), ![alt](target "title"), reference definitions `[label]: target`, and HTML's
# src="..." and href="..."
_LINK = re.compile(
    r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)"
    r"|^\s*\[[^\]]+\]:\s*<?([^\s>]+)>?"
    r"|\b(?:src|href)=\"([^\"]+)\"",
    re.M,
)


def _relative_links(text: str) -> list[str]:
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # not inside code blocks
    text = re.sub(r"`[^`\n]*`", "", text)
    found = ["".join(groups) for groups in _LINK.findall(text)]
    return [t for t in found if not re.match(r"^[a-z][a-z0-9+.-]*:|^#", t, re.I)]


def test_the_readmes_relative_links_point_at_files_that_exist():
    links = _relative_links(README.read_text())
    missing = [t for t in links if not (REPO / t.split("#", 1)[0]).exists()]
    assert missing == []


def test_the_link_check_sees_links():
    """The check above would pass on a README whose links it could not find."""
    sample = (
        'See [docs](docs/index.md), ![shot](docs/a.png "x"), [web](https://x.org), [top](#a), '
        '`[not](a/link.md)`.\n<img src="docs/c.png">\n[ref]: docs/b.md\n\n```\n[code](x.md)\n```\n'
    )
    assert _relative_links(sample) == ["docs/index.md", "docs/a.png", "docs/c.png", "docs/b.md"]


# --- the README's Quickstart, run -----------------------------------------------------------------


def quickstart_blocks(text: str) -> list[tuple[str, str]]:
    """The ```sh and ```python blocks of the README's `## Quickstart`, in order."""
    start = text.index("\n## Quickstart")
    end = text.find("\n## ", start + 1)
    section = text[start : end if end >= 0 else len(text)]
    return [(lang, body) for lang, body in re.findall(r"^```(sh|python)\n(.*?)^```", section, re.M | re.S)]


def test_the_quickstart_runs_against_a_live_server(live_server, tmp_path):
    """What a newcomer pastes, with `make run` going in another terminal: a server on a free port
    with an empty data dir (embedded PostgreSQL) stands in for it. The sh blocks run with
    `bash -e` (what one exports, the next block sees), the python blocks with the virtual
    environment's python; each must exit 0, and each search must answer an entry written."""
    blocks = quickstart_blocks(README.read_text())
    assert [lang for lang, _ in blocks].count("sh") >= 1, "the Quickstart shows no ```sh block"
    paths = written_paths("".join(body for _, body in blocks))
    assert paths, "the Quickstart writes no entry"
    # `.venv/bin/catalog` as the README writes it, whichever virtual environment runs the tests
    work = tmp_path / "work"
    work.mkdir()
    (work / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
    data = Path(tempfile.mkdtemp(prefix="qs"))  # short: PostgreSQL's socket lives in the data dir
    server = live_server(data / "d")
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
        env["CATALOG_DATA_DIR"] = str(server.data_dir)
        searched = 0
        for i, (lang, body) in enumerate(blocks):
            script = body.replace("8080", str(server.port))
            if lang == "sh":
                dump = tmp_path / f"env-{i}"
                command = ["bash", "-e", "-c", f'{script}\nenv -0 > "{dump}"\n']
                result = subprocess.run(
                    command, cwd=work, env=env, capture_output=True, text=True, timeout=180
                )
            else:
                result = subprocess.run(
                    [sys.executable, "-c", script],
                    cwd=work,
                    env={**env, "CATALOG_URL": server.url},
                    capture_output=True,
                    text=True,
                    timeout=180,
                )
            assert result.returncode == 0, (
                f"block {i + 1} ({lang}) failed:\n{body}\n--- stdout\n{result.stdout[-3000:]}\n"
                f"--- stderr\n{result.stderr[-3000:]}\n--- server\n{server.problems()}"
            )
            if lang == "sh":  # what the block exported is there for the next one
                env = dict(item.split("=", 1) for item in dump.read_text().split("\0") if "=" in item)
            if "search" in body:
                searched += 1
                # curl's answers are JSON: the search's is the one with `results` (the write's own
                # answer names the path too, so the whole output would prove nothing)
                answers = [
                    json.dumps(v)
                    for v in json_values(result.stdout)
                    if isinstance(v, dict) and "results" in v
                ]
                found = answers if lang == "sh" else [result.stdout]
                assert any(p in text for text in found for p in paths), (
                    f"block {i + 1} searched but answered none of {sorted(paths)}:\n{result.stdout[-3000:]}"
                )
        assert searched, "the Quickstart never searches for what it wrote"
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


def written_paths(text: str) -> set[str]:
    """The entry paths the blocks write: `"path":"/..."` in a body, `.write(scope, "/...")`."""
    pairs = re.findall(r'"path"\s*:\s*"(/[^"]+)"|\.write\([^,]+,\s*"(/[^"]+)"', text)
    return {p for pair in pairs for p in pair if p}


def json_values(text: str) -> list[Any]:
    """The JSON values printed one after another (curl adds no newline between answers)."""
    decoder = json.JSONDecoder()
    values, i = [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        try:
            value, i = decoder.raw_decode(text, i)
        except ValueError:
            i = text.find("\n", i) + 1 or len(text)  # a line that is not JSON
            continue
        values.append(value)
    return values


def test_the_quickstart_checks_see_what_they_look_for():
    assert json_values('{"a": 1}{"results": []}\nok\n[2]') == [{"a": 1}, {"results": []}, [2]]
    assert written_paths('-d \'{"path":"/m/a.md"}\'\nstore.write("u", "/m/b.md", "x")') == {
        "/m/a.md",
        "/m/b.md",
    }


def test_quickstart_blocks_are_found_in_order():
    text = (
        "# x\n\n## Quickstart\n\n```sh\necho a\n```\n\n```\nnot run\n```\n\n"
        "```python\nprint(1)\n```\n\n## Next\n\n```sh\nno\n```\n"
    )
    assert quickstart_blocks(text) == [("sh", "echo a\n"), ("python", "print(1)\n")]


def test_the_architecture_page_shows_the_layers_that_are_enforced():
    """docs/architecture.md lists the import layers, as text and as a Mermaid graph: both are
    pyproject.toml's import-linter layers, in order (a layer added there must be shown)."""
    import tomllib

    contract = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    enforced = [
        " | ".join(m.strip().removeprefix("catalog.") for m in layer.split("|"))
        for layer in contract["layers"]
    ]
    page = (DOCS / "architecture.md").read_text()
    section = page[page.index("## The layers") :]
    listed = section[section.index("```\n") + 4 : section.index("\n```", section.index("```\n"))]
    assert listed.splitlines() == enforced
    boxes = re.findall(r'^\s+L\d+\["(.*)"\]$', section, re.MULTILINE)
    assert [box.replace(" · ", " | ") for box in boxes] == enforced
