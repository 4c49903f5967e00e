"""The code blocks of the documentation, run as a newcomer runs them (tests/test_docs.py).

A page's fenced blocks are read in order. These run:

- ```sh and ```bash: the block in one `bash -e` (what it assigns, the next block of the page sees:
  every assignment is exported, as in one terminal);
- ```python: the block saved as a file and run with `.venv/bin/python`, in the page's environment;
- ```console: each `$ command` (with its continuation lines), its output being the lines below it.

The rest are what a command prints or a file holds (untagged, ```text, ```json, ```mermaid). A
block that cannot run says so, and why, in an HTML comment on the line before it (blank lines may
come between), which no reader sees:

    <!-- not run: needs a model (an OpenAI API key) -->

What a block must do:

- exit 0; unless the output shown right after it (the next block, with nothing but blank lines
  between) starts `error: CODE`: then it fails, saying `error: CODE`;
- print no JSON error (`"error_code"`: `curl -s` exits 0 on a 4xx) unless the output shown names
  that error code;
- print the header row of a table shown as its output (`SCORE  PATH ...`);
- (python) print each line of the output shown, numbers aside (scores, times and counts vary).

A page whose Python examples build on one another says so with `<!-- python: one session -->`
(and in words, for the reader: paste them into one `.venv/bin/python`, in order): its Python blocks
then run one after another in one interpreter, as pasted into it.

Each page starts from a fresh environment: a terminal in the checkout (`.venv`, and `.data` of the
server, are there), without the venv on PATH, so a page defines what it uses. The server stands in
for `make run`: the pages' port 8080 is replaced by its port, and `CATALOG_URL` names it (the
default the client and the command fall back to).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RUN = {"sh": "sh", "bash": "sh", "python": "python", "console": "console"}
ONE_SESSION = "<!-- python: one session -->"
OUTPUT = {"", "text", "json"}
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<why>.*?)\s*-->\s*$", re.S)
_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S
)
_TABLE_HEADER = re.compile(r"^[A-Z][A-Z_]*(?: {2,}[A-Z][A-Z_ ]*)+$")
_ERROR_LINE = re.compile(r"^error: (?P<code>[A-Z_]+):", re.M)
_JSON_ERROR = re.compile(r'"error_code"\s*:\s*"(?P<code>[A-Z_]+)"')
_NUMBER = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|\d+(?:\.\d+)?")


@dataclass
class Block:
    page: str
    line: int  # where the fence opens, 1-based
    lang: str
    body: str
    not_run: str | None = None  # why, when it says it cannot run
    output: Block | None = None  # the output shown right after it

    @property
    def kind(self) -> str | None:
        return RUN.get(self.lang)

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(text: str, page: str = "") -> list[Block]:
    """The fenced blocks of a Markdown page in order, each with its `not run` reason and the
    output shown right after it."""
    found: list[Block] = []
    previous_end = 0
    for match in _FENCE.finditer(text):
        indent = match["indent"]
        body = "".join(
            line[len(indent) :] if line.startswith(indent) else line.lstrip()
            for line in match["body"].splitlines(keepends=True)
        )
        before = text[previous_end : match.start()]
        marker = NOT_RUN.search(before.rstrip())
        block = Block(
            page,
            text.count("\n", 0, match.start()) + 1,
            match["lang"],
            body,
            not_run=marker["why"] if marker else None,
        )
        if found and before.strip() == "" and found[-1].kind is not None and block.lang in OUTPUT:
            found[-1].output = block
        found.append(block)
        previous_end = match.end()
    return found


@dataclass
class Command:
    """One command of a ```console block, with the output shown below it."""

    text: str
    shown: str


def console_commands(body: str) -> list[Command]:
    commands: list[Command] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            commands.append(Command(line[2:], ""))
        elif commands and commands[-1].text.endswith("\\"):
            commands[-1].text += "\n" + line
        elif commands:
            commands[-1].shown += line + "\n"
    return commands


# --- what a block printed, against what the page shows ------------------------------------------------


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


def _masked(line: str) -> str:
    return " ".join(_NUMBER.sub("#", line).split())


def problems(lang: str, shown: str | None, returncode: int, stdout: str, stderr: str) -> list[str]:
    """What is wrong with a run of a block whose page shows `shown` as its output."""
    shown = shown or ""
    found: list[str] = []
    expected_error = _ERROR_LINE.match(shown.lstrip())
    if expected_error:
        if returncode == 0:
            found.append(f"it should fail with error: {expected_error['code']}, and exited 0")
        elif f"error: {expected_error['code']}:" not in stderr:
            found.append(f"it should fail with error: {expected_error['code']}")
    elif returncode != 0:
        found.append(f"it exited {returncode}")
    allowed = set(_JSON_ERROR.findall(shown))
    answered = set(_JSON_ERROR.findall(stdout))
    if answered - allowed:
        found.append(f"it was answered {', '.join(sorted(answered - allowed))}, which the page does not show")
    if allowed - answered:
        found.append(f"the page shows {', '.join(sorted(allowed - answered))}, which it was not answered")
    first = shown.strip().splitlines()[0] if shown.strip() else ""
    if _TABLE_HEADER.match(first) and _masked(first) not in {_masked(line) for line in stdout.splitlines()}:
        found.append(f"it printed no table headed {first!r}")
    if lang == "python" and shown.strip() and not expected_error:
        printed = {_masked(line) for line in stdout.splitlines()}
        missing = [line for line in shown.strip().splitlines() if _masked(line) not in printed]
        if missing:
            found.append(f"it did not print {missing}")
    return found


# --- running a page ----------------------------------------------------------------------------------


@dataclass
class Terminal:
    """A terminal in a checkout (`work`, holding `.venv` and the server's `.data`) for one page."""

    work: Path
    port: int
    env: dict[str, str]
    scratch: Path
    printed: list[tuple[Block, str]] = field(default_factory=list)  # what each block run printed
    count: int = 0

    def _script(self, body: str) -> str:
        return body.replace("8080", str(self.port))

    def shell(self, body: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        self.count += 1
        dump = self.scratch / f"env-{self.count}"
        script = f'set -a\n{self._script(body)}\nenv -0 > "{dump}"\n'
        result = subprocess.run(
            ["bash", "-e", "-c", script],
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if dump.exists():  # what the block assigned, the next one sees
            self.env = dict(item.split("=", 1) for item in dump.read_text().split("\0") if "=" in item)
        return result

    def python(self, body: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        self.count += 1
        script = self.scratch / f"block_{self.count}.py"
        script.write_text(self._script(body))
        return subprocess.run(
            [str(self.work / ".venv" / "bin" / "python"), str(script)],
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )


# The interpreter of a page whose Python blocks are one session: each block, sent as a JSON line,
# runs in the same globals; what it printed (and its traceback) comes back as a JSON line.
_SESSION = r"""
import contextlib, io, json, sys, traceback
scope = {"__name__": "__main__"}
for line in sys.stdin:
    out, err, ok = io.StringIO(), io.StringIO(), True
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            exec(compile(json.loads(line), "<block>", "exec"), scope)
        except BaseException:
            traceback.print_exc()
            ok = False
    sys.__stdout__.write(json.dumps({"ok": ok, "stdout": out.getvalue(), "stderr": err.getvalue()}) + "\n")
    sys.__stdout__.flush()
"""


class PythonSession:
    """One `.venv/bin/python` that the page's Python blocks are pasted into, in order."""

    def __init__(self, terminal: Terminal) -> None:
        self.process = subprocess.Popen(
            [str(terminal.work / ".venv" / "bin" / "python"), "-u", "-c", _SESSION],
            cwd=terminal.work,
            env=terminal.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def run(self, code: str) -> subprocess.CompletedProcess[str]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(code) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            return subprocess.CompletedProcess([], 1, "", "the interpreter ended")
        answer = json.loads(line)
        return subprocess.CompletedProcess([], 0 if answer["ok"] else 1, answer["stdout"], answer["stderr"])

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def base_env(url: str) -> dict[str, str]:
    """A newcomer's terminal: no CATALOG_ setting but the server's URL (the default the client
    and the command fall back to, on the port the test's server has), no virtual environment."""
    venv = os.environ.get("VIRTUAL_ENV")
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if not (venv and p.startswith(venv))]
    path = [p for p in path if not p.endswith("/.venv/bin")]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CATALOG_", "VIRTUAL_ENV", "PYTHON", "OTEL_")) and k != "PATH"
    }
    env.update({"PATH": os.pathsep.join(path), "CATALOG_URL": url, "NO_COLOR": "1"})
    return env


def run_page(terminal: Terminal, page: str, text: str, server_problems: Any) -> int:
    """Run the page's blocks in order; fails the test at the first block that does not do what
    the page says. Answers how many blocks ran."""
    ran = 0
    session: PythonSession | None = None
    try:
        for block in blocks(text, page):
            if block.kind is None or block.not_run is not None:
                continue
            ran += 1
            shown = block.output.body if block.output else None
            if block.kind == "console":
                for command in console_commands(block.body):
                    result = terminal.shell(command.text)
                    _check(block, command.text, "sh", command.shown, result, server_problems)
                    terminal.printed.append((block, result.stdout))
                continue
            if block.kind == "sh":
                result = terminal.shell(block.body)
            elif ONE_SESSION in text:
                session = session or PythonSession(terminal)
                result = session.run(terminal._script(block.body))
            else:
                result = terminal.python(block.body)
            _check(block, block.body, block.kind, shown, result, server_problems)
            terminal.printed.append((block, result.stdout))
    finally:
        if session is not None:
            session.close()
    return ran


def _check(
    block: Block,
    code: str,
    lang: str,
    shown: str | None,
    result: subprocess.CompletedProcess[str],
    server: Any,
) -> None:
    found = problems(lang, shown, result.returncode, result.stdout, result.stderr)
    assert not found, (
        f"{block.where} ({block.lang}) does not run as the page says: {'; '.join(found)}"
        f"\n--- the block\n{code}\n--- shown after it\n{shown}"
        f"\n--- stdout\n{result.stdout[-3000:]}\n--- stderr\n{result.stderr[-3000:]}"
        f"\n--- the server's warnings\n{server()}"
    )
