"""Where a server's CPU goes: py-spy samples of its processes, sorted into the stages of a request.

`Recording(pid)` runs `py-spy record` (the `bench` extra installs it) on a process and its
children, from `start()` to `stop()`, in py-spy's raw format (one line per distinct stack, with
its sample count; idle threads are not sampled). `stages(path)` gives each stage's share of the
samples: a sample belongs to the stage of its innermost frame that a rule of `STAGES` names
(socket reads and writes first: the kernel's loopback work is charged to the process that
sends). A share is of the server's busy CPU, not of a request's latency.

`PerfRecording(pid)` does the same with Linux `perf` (`perf record -e cpu-clock`), which sees
what py-spy cannot: native code and the kernel. `libraries(path)` sorts its samples by the
library they ran in (the model's ONNX Runtime, the Python interpreter, the kernel, the C library,
Tantivy, uvloop, asyncpg, NumPy), with the kernel's share spent waking and switching threads
(futex: the interpreter's lock and thread hand-offs) apart. Where `perf` is missing or may not
sample (a container without perf events), it says so.

Used by bench/request_floor.py (`--cpu --profile`, `--cpu --perf`).
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

# (stage, a substring of a frame's text): the innermost frame that matches one names the stage
STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("the model (ONNX Runtime, tokenizer)", ("catalog/search/embedder.py", "onnxruntime", "tokenizers")),
    ("full-text search (Tantivy)", ("catalog/search/fulltext.py", "tantivy")),
    ("ranking and fusion", ("catalog/search/",)),
    ("audit", ("catalog/recorder/", "catalog/audit/", "catalog/lineage/")),
    ("authorization (Casbin, grants)", ("catalog/access/", "catalog/governance/", "casbin/")),
    ("token (JWT)", ("catalog/auth", "jwt/", "cryptography/")),
    ("entries service and repository", ("catalog/entries/",)),
    ("database protocol (asyncpg)", ("asyncpg/",)),
    ("JSON", ("msgspec", "json/")),
    ("Litestar (routing, DI, responses)", ("litestar/",)),
    ("HTTP (uvicorn, httptools)", ("httptools/", "h11/", "uvicorn/", "catalog/web/serving.py")),
    ("request middleware and telemetry", ("catalog/web/", "catalog/telemetry/", "opentelemetry/")),
    ("other server code", ("catalog/",)),
    ("event loop (asyncio)", ("asyncio/", "selectors.py", "concurrent/futures/")),
]
SOCKETS = ("_SelectorSocketTransport.write", "_read_ready", "sock_sendall", "sock_recv")
# a pool thread blocked in `work_queue.get()` (the model's lanes between runs), which py-spy does
# not see as idle: a sample whose innermost frame is the pool's loop itself is not CPU
IDLE = "idle"
WAITING = ("_worker (concurrent/futures/thread.py",)


def available() -> bool:
    return (
        shutil.which("py-spy") is not None or Path(__file__).parents[1].joinpath(".venv/bin/py-spy").exists()
    )


class Recording:
    def __init__(self, pid: int, rate: int = 200) -> None:
        self.pid = pid
        self.rate = rate
        self.path = Path(tempfile.mkstemp(prefix="catalog-spy-", suffix=".txt")[1])
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        exe = shutil.which("py-spy") or str(Path(__file__).parents[1] / ".venv/bin/py-spy")
        self.process = subprocess.Popen(
            [exe, "record", "--pid", str(self.pid), "--subprocesses", "--format", "raw", "--rate",
             str(self.rate), "--nonblocking", "-o", str(self.path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def stop(self) -> dict[str, float]:
        if self.process is not None:
            self.process.send_signal(signal.SIGINT)  # py-spy writes what it sampled, then exits
            self.process.wait(timeout=60)
        try:
            return stages(self.path)
        finally:
            self.path.unlink(missing_ok=True)


def stage_of(frames: list[str]) -> str:
    if frames and frames[-1].startswith(WAITING):
        return IDLE
    if frames and any(s in frames[-1] for s in SOCKETS):
        return "socket reads and writes (kernel)"
    for frame in reversed(frames):
        for stage, marks in STAGES:
            if any(mark in frame for mark in marks):
                return stage
    return "other"


def stages(path: Path) -> dict[str, float]:
    """Each stage's share of the samples in a raw py-spy recording, largest first."""
    counts: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = stack.split(";")[1:]  # the first is the process
        stage = stage_of(frames)
        if stage != IDLE:
            counts[stage] += int(n)
    total = sum(counts.values()) or 1
    return {stage: n / total for stage, n in counts.most_common()}


# (part, a substring of a shared object's name): the first that matches names the part
LIBRARIES: list[tuple[str, tuple[str, ...]]] = [
    ("the model (ONNX Runtime, tokenizers)", ("onnxruntime", "tokenizers")),
    ("Python interpreter", ("libpython", "python3")),
    ("kernel", ("[kernel",)),
    ("C library (malloc, memcpy)", ("libc.so", "libm.so", "libstdc++", "ld-linux")),
    ("Tantivy", ("tantivy",)),
    ("uvloop and asyncio", ("loop.cpython", "_asyncio")),
    ("asyncpg", ("protocol.cpython", "pgproto", "record.cpython")),
    ("httptools (the HTTP parser)", ("httptools", "parser.cpython", "url_parser.cpython")),
    ("NumPy", ("_multiarray", "numpy")),
]
FUTEX = "of which waking and switching threads (futex)"


def perf_available() -> bool:
    return shutil.which("perf") is not None


class PerfRecording:
    """`perf record` of a process (the threads it has when `start()` attaches: a thread made
    later, as a pool makes its first workers, is not seen, so warm the server up first) and its
    children, from `start()` to `stop()`."""

    def __init__(self, pid: int, rate: int = 999) -> None:
        self.pid = pid
        self.rate = rate
        self.path = Path(tempfile.mkstemp(prefix="catalog-perf-", suffix=".data")[1])
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        pids = ",".join(str(p) for p in [self.pid, *_children(self.pid)])  # a server's workers too
        self.process = subprocess.Popen(
            ["perf", "record", "-e", "cpu-clock", "-F", str(self.rate), "-g", "-p", pids,
             "-o", str(self.path)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip

    def stop(self) -> dict[str, float]:
        if self.process is not None:
            self.process.send_signal(signal.SIGINT)
            self.process.wait(timeout=60)
        try:
            found = libraries(self.path)
            if not found:
                print(f"perf: nothing read from {self.path.stat().st_size} bytes recorded", file=sys.stderr)
            return found
        finally:
            self.path.unlink(missing_ok=True)


def _children(pid: int) -> list[int]:
    """The process's children (Linux: /proc/PID/task/*/children)."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return out


_ROW = re.compile(r"^\s*([\d.]+)%\s+(?:[\d.]+%\s+)?(?:\[.\]\s+)?(\S.*?)\s*$")


def _report(path: Path, *args: str) -> list[tuple[float, str]]:
    out = subprocess.run(
        ["perf", "report", "-i", str(path), "--stdio", "-g", "none", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        print(f"perf report: {out.stderr.strip()[-300:]}", file=sys.stderr)
    rows = []
    for line in out.stdout.splitlines():
        if line.startswith("#"):
            continue
        match = _ROW.match(line)
        if match:
            rows.append((float(match[1]) / 100, match[2]))
    return rows


def libraries(path: Path) -> dict[str, float]:
    """Each part's share of the samples in a `perf record` file, largest first (empty when perf
    recorded nothing)."""
    shares: dict[str, float] = {}
    for share, dso in _report(path, "--no-children", "--sort", "dso"):
        part = next((name for name, marks in LIBRARIES if any(m in dso for m in marks)), "other")
        shares[part] = shares.get(part, 0.0) + share
    if shares:
        futex = [s for s, sym in _report(path, "--children", "--sort", "sym") if sym == "__x64_sys_futex"]
        shares[FUTEX] = futex[0] if futex else 0.0
    return dict(sorted(shares.items(), key=lambda kv: -kv[1]))
