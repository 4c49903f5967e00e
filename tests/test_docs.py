"""The documentation stays true to the code: the site builds without a warning, the reference pages
are what docs/generate.py makes of the code now, everything the code declares (settings, actions,
routes, commands) is documented, no page fetches anything from another site, every diagram is
readable at the docs' width, and every snippet of the README and of the pages a newcomer follows
runs as pasted against a live server (tests/doc_snippets.py says how).

The generated pages are docs/configuration.md and docs/reference/ (see docs/generate.py); after a
change to what they are made of, run `.venv/bin/python docs/generate.py` and commit the pages.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import doc_snippets as snippets
import pytest

from catalog.access.actions import ACTIONS
from catalog.cli import build_parser
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


# What makes a browser fetch something: a script, a stylesheet, a font, an image, a frame (a link
# to another site, <a href>, fetches nothing until followed)
_FETCHED = re.compile(r"<(?:link|script|img|iframe|source|embed)\b[^>]*?\b(?:src|href)=\"([^\"]+)\"", re.I)
_CSS_URL = re.compile(
    r"@import\s+(?:url\()?[\"']?((?:https?:)?//[^\"')]+)|url\(\s*[\"']?((?:https?:)?//[^\"')]+)", re.I
)


def test_the_site_builds_strictly_and_fetches_nothing_from_elsewhere(tmp_path):
    """Every page is in the navigation, every link and anchor resolves (mkdocs.yml: strict), and
    no page makes a browser fetch anything from another site: the diagrams' script (Mermaid) and
    the theme's files are the site's own, and the theme uses the system's fonts (not Google's)."""
    site = tmp_path / "site"
    result = subprocess.run(
        # not --quiet: it silences the warnings, and strict mode then has none to fail on
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    remote: list[str] = []
    for path in [*site.rglob("*.html"), *site.rglob("*.css")]:
        text = path.read_text(errors="replace")
        found = (
            _FETCHED.findall(text) if path.suffix == ".html" else [a or b for a, b in _CSS_URL.findall(text)]
        )
        remote += [
            f"{path.relative_to(site)}: {url}" for url in found if re.match(r"^(?:https?:)?//", url, re.I)
        ]
    assert remote == []
    assert _FETCHED.findall(
        '<link rel="preconnect" href="https://fonts.gstatic.com"><a href="https://x">'
    ) == ["https://fonts.gstatic.com"]


# the width of the docs' content column (Material's, between the navigation and the table of
# contents), and the smallest size a diagram's 16 px text may be scaled down to and still be read
CONTENT_WIDTH = 688
SMALLEST_TEXT = 11


def test_every_diagram_is_readable_at_the_docs_width(tmp_path):
    """Each Mermaid diagram of the docs, rendered by the site's own Mermaid in Chromium, is
    narrow enough that the content column, which scales a wider one down, shows its labels at
    11 px or more (a diagram twice as wide has 8 px labels; the audit log's was once 5 px)."""
    chromium, driver = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
    if not (chromium.exists() and driver.exists()):
        pytest.skip("no browser (install chromium and chromium-driver) to render the diagrams")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    diagrams = [
        (str(page.relative_to(REPO)), match[1])
        for page in sorted(DOCS.rglob("*.md"))
        for match in re.finditer(r"^```mermaid\n(.*?)^```", page.read_text(), re.M | re.S)
    ]
    assert len(diagrams) >= 4
    html = tmp_path / "diagrams.html"
    script = DOCS / "assets" / "javascripts" / "mermaid.min.js"
    html.write_text(f'<!doctype html><html><body><script src="{script.as_uri()}"></script></body></html>')
    options = webdriver.ChromeOptions()
    options.binary_location = str(chromium)
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(argument)
    options.add_argument(f"--user-data-dir={tmp_path / 'profile'}")
    browser = webdriver.Chrome(service=Service(str(driver)), options=options)
    try:
        browser.set_script_timeout(120)
        browser.get(html.as_uri())
        widths = browser.execute_async_script(
            """
            const [texts, done] = arguments;
            mermaid.initialize({startOnLoad: false});
            (async () => {
              const widths = [];
              for (let i = 0; i < texts.length; i++) {
                const {svg} = await mermaid.render("diagram" + i, texts[i]);
                widths.push(parseFloat(svg.match(/viewBox="([^"]+)"/)[1].split(/[ ,]+/)[2]));
              }
              done(widths);
            })().catch((error) => done(String(error)));
            """,
            [text for _, text in diagrams],
        )
    finally:
        browser.quit()
    assert isinstance(widths, list), widths
    widest = CONTENT_WIDTH * 16 / SMALLEST_TEXT
    too_wide = [
        f"{page}: {width:.0f} px" for (page, _), width in zip(diagrams, widths, strict=True) if width > widest
    ]
    assert too_wide == [], f"wider than {widest:.0f} px: its text is scaled below {SMALLEST_TEXT} px"


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


# --- the snippets, run ----------------------------------------------------------------------------

# What a newcomer follows, in the order of the site's navigation (README.md runs on a server of its
# own: the README and Getting started both begin by creating the same store).
NEWCOMER_PAGES = [
    "docs/getting-started.md",
    "docs/agents/index.md",
    "docs/agents/mcp.md",
    "docs/agents/memory-tools.md",
    "docs/agents/openai.md",
    "docs/agents/agentkit.md",
    "docs/agents/langgraph.md",
    "docs/agents/adk.md",
    "docs/entries/index.md",
    "docs/entries/search.md",
    "docs/governance/index.md",
    "docs/governance/groups.md",
    "docs/governance/scopes.md",
    "docs/governance/trust.md",
    "docs/tools/client.md",
    "docs/tools/cli.md",
    "docs/tools/console.md",
    "docs/operations/backup.md",
]


@contextmanager
def checkout(live_server: Any, tmp_path: Path) -> Iterator[tuple[Any, Path]]:
    """A fresh `make run` and a terminal's working directory beside it: `.venv` (whichever virtual
    environment runs the tests) and `.data` (the server's data dir: `catalog token` signs with its
    key) are where the pages say."""
    work = tmp_path / "checkout"
    work.mkdir()
    data = Path(tempfile.mkdtemp(prefix="qs"))  # short: PostgreSQL's socket lives in the data dir
    server = live_server(data / "d")
    try:
        (work / ".venv").symlink_to(Path(sys.prefix), target_is_directory=True)
        (work / ".data").symlink_to(server.data_dir, target_is_directory=True)
        yield server, work
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


def _terminal(server: Any, work: Path, tmp_path: Path, name: str) -> snippets.Terminal:
    scratch = tmp_path / "scratch" / name.replace("/", "_")
    scratch.mkdir(parents=True)
    return snippets.Terminal(work, server.port, snippets.base_env(server.url), scratch)


def test_the_readme_runs_as_pasted_and_again(live_server, tmp_path):
    """Every block of the README, on a fresh server, as a newcomer pastes it: each search answers
    an entry written; its Python blocks run a second time without a failure."""
    text = README.read_text()
    paths = written_paths(text)
    assert paths, "the README writes no entry"
    with checkout(live_server, tmp_path) as (server, work):
        terminal = _terminal(server, work, tmp_path, "readme")
        assert snippets.run_page(terminal, "README.md", text, server.problems) >= 2
        searches = [(b, out) for b, out in terminal.printed if "search" in b.body]
        assert searches, "the README never searches for what it wrote"
        for block, printed in searches:
            # curl's answers are JSON: the search's is the one with `results` (an MCP tool's: its
            # JSON-RPC `result`); the write's own answer names the path too, so the whole output
            # would prove nothing
            answers = [
                v
                for v in snippets.json_values(printed)
                if isinstance(v, dict) and {"results", "result"} & set(v)
            ]
            found = json.dumps(answers) if block.kind == "sh" else printed
            assert any(p in found for p in paths), f"{block.where} found none of {sorted(paths)}: {printed}"
        for block in snippets.blocks(text, "README.md"):
            if block.kind == "python" and block.not_run is None:
                again = terminal.python(block.body)
                assert again.returncode == 0, f"{block.where}, run again:\n{again.stderr[-3000:]}"


def test_the_pages_a_newcomer_follows_run_as_pasted(live_server, tmp_path):
    """Every ```sh, ```bash, ```python and ```console block of those pages, page after page, on one
    fresh server (each page in a fresh terminal: it defines what it uses), as
    tests/doc_snippets.py says: it exits 0 (or fails as the output shown says), is answered no
    error the page does not show, and prints what the page shows as its output."""
    ran = 0
    with checkout(live_server, tmp_path) as (server, work):
        for page in NEWCOMER_PAGES:
            terminal = _terminal(server, work, tmp_path, page)
            ran += snippets.run_page(terminal, page, (REPO / page).read_text(), server.problems)
    assert ran >= 60


@pytest.mark.parametrize("page", ["README.md", *NEWCOMER_PAGES])
def test_each_block_runs_or_says_why_not(page):
    """A newcomer's page has no block the runner would pass over silently: each is code that
    runs, code that says why it cannot (`<!-- not run: ... -->`), or what one shown prints."""
    known = {*snippets.RUN, *snippets.OUTPUT, "mermaid"}
    for block in snippets.blocks((REPO / page).read_text(), page):
        assert block.lang in known, f"{block.where}: a ```{block.lang} block: use one of {sorted(known)}"
        if block.not_run is not None:
            assert block.kind is not None, f"{block.where}: `not run` on a block that is not code"
            assert len(block.not_run.split()) >= 3, f"{block.where}: say why it cannot run"


def test_the_snippet_runner_reads_pages_as_it_says():
    page = (
        "# x\n\n```sh\necho a\n```\n\n```\nA  B\n```\n\ntext\n\n<!-- not run: needs a model key -->\n"
        "```python\nprint(1)\n```\n\n- item\n\n    ```bash\n    echo b \\\n      c\n    ```\n\n"
        "```console\n$ catalog x \\\n    --y\nerror: NOT_FOUND: no\n$ echo z\nz\n```\n"
    )
    found = snippets.blocks(page, "p.md")
    assert [(b.lang, b.line, b.not_run) for b in found] == [
        ("sh", 3, None),
        ("", 7, None),
        ("python", 14, "needs a model key"),
        ("bash", 20, None),
        ("console", 25, None),
    ]
    assert found[0].output is found[1] and found[2].output is None
    assert found[3].body == "echo b \\\n  c\n"
    commands = snippets.console_commands(found[4].body)
    assert [(c.text, c.shown) for c in commands] == [
        ("catalog x \\\n    --y", "error: NOT_FOUND: no\n"),
        ("echo z", "z\n"),
    ]


def test_the_snippet_checks_see_what_they_look_for():
    check = snippets.problems
    assert check("sh", None, 0, "", "") == []
    assert check("sh", None, 22, "", "") == ["it exited 22"]
    assert check("sh", "error: NOT_FOUND: x", 1, "", "error: NOT_FOUND: x\n") == []
    assert check("sh", "error: NOT_FOUND: x", 0, "", "") != []
    assert check("sh", None, 0, '{"error_code":"PERMISSION_DENIED"}', "") != []
    assert (
        check("sh", '{"error_code":"PERMISSION_DENIED"}', 0, '{"error_code":"PERMISSION_DENIED"}', "") == []
    )
    assert check("sh", "SCORE  PATH  DESCRIPTION\n0.1  /a  b", 0, "SCORE  PATH    DESCRIPTION\n", "") == []
    assert check("sh", "SCORE  PATH\n", 0, "PATH\n", "") != []
    assert check("python", "0.81 /a.md: x\n['/a.md']", 0, "0.7 /a.md: x\n['/a.md']\nmore\n", "") == []
    assert check("python", "0.81 /a.md: x", 0, "0.7 /b.md: x\n", "") != []
    assert snippets.json_values('{"a": 1}{"results": []}\nok\n[2]') == [{"a": 1}, {"results": []}, [2]]
    assert written_paths('-d \'{"path":"/m/a.md"}\'\nstore.write("u", "/m/b.md", "x")') == {
        "/m/a.md",
        "/m/b.md",
    }


def written_paths(text: str) -> set[str]:
    """The entry paths the blocks write: `"path":"/..."` in a body, `.write(scope, "/...")`."""
    pairs = re.findall(r'"path"\s*:\s*"(/[^"]+)"|\.write\([^,]+,\s*"(/[^"]+)"', text)
    return {p for pair in pairs for p in pair if p}


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
