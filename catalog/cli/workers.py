"""`catalog serve --workers N`: one port served by N worker processes on one data dir, and the
supervisor that starts them, replaces a dead one and stops them all.

One process runs one event loop and, in it, everything a request does in Python; a machine with
more cores than that serves more with more processes. Each worker is a whole `catalog serve`
(its event loop, its pool, its model and lanes, its background work), except that:
- the supervisor binds the listening socket once and every worker inherits it, so the kernel
  hands each new connection to a worker that is accepting (a busy one accepts less); a worker
  started again inherits the same socket, so no connection is refused while one is away;
- the workers share one full-text index slot, the first one no process holds when the supervisor
  starts: the worker holding its writer lock indexes, the others read what it commits and ask it
  for a pass when a search must hold every earlier write (`catalog.search.sharing`); when the
  writer dies, another worker takes its lock within a second;
- the model's lanes are shared out among the workers (`catalog.search.embedder.default_lanes`);
- whether a balancer has asked `/healthz` is shared (`catalog.web.serving.Drain`), so they drain
  alike; each answer names its worker (`X-Catalog-Worker`).

The supervisor:
- starts (or joins) the embedded PostgreSQL, with its database, before the workers and leaves it
  after them, so the workers join the running one and it outlives any worker's restart; it
  raises the server's `max_connections` to what the workers may hold (12 each, and 20 for
  tools) when it is lower, and warns when an external database allows fewer;
- prints `listening on URL` once every worker accepts connections; a worker that fails before
  then stops them all (exit 1: a configuration error, a port in use);
- starts a worker that exits while the server is not stopping again, at once the first time and
  after 1 s doubling up to 30 s while it keeps dying within a minute of its start;
- passes SIGTERM and SIGINT on to every worker (each drains as one process does: `catalog
  serve`'s docstring), waits for them all, closes the socket, leaves the embedded PostgreSQL and
  exits 0 (1 if a worker did not stop cleanly). The workers run in their own process group, so a
  Ctrl-C reaches them once, through the supervisor; a worker whose supervisor dies gets SIGTERM.
"""

from __future__ import annotations

import contextlib
import json
import logging
import mmap
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from catalog.settings import Settings

log = logging.getLogger("catalog.serve")

BACKLOG = 2048  # connections the kernel queues for the workers to accept
QUICK_EXIT = 60.0  # a worker that dies sooner after its start is started again more slowly
MAX_RESTART_DELAY = 30.0
READY_PATIENCE = 300.0  # seconds every worker has to accept connections at the start


@dataclass
class _Worker:
    number: int
    process: subprocess.Popen[str] | None = None
    started: float = 0.0
    ready: threading.Event = field(default_factory=threading.Event)
    quick_exits: int = 0  # exits within QUICK_EXIT of the start, in a row
    restart_at: float | None = None


def shared_slot(index_dir: Path) -> int:
    """The first index slot number free (no writer) under every corpus's index root."""
    from catalog.search.corpus import ENTRIES, TRANSCRIPTS
    from catalog.search.indexer import free_slot

    return free_slot([index_dir / corpus.directory for corpus in (ENTRIES, TRANSCRIPTS)])


class Supervisor:
    def __init__(self, settings: Settings, count: int) -> None:
        self.settings = settings
        self.workers = [_Worker(n) for n in range(count)]
        self.sock = socket.create_server((settings.host, settings.port), backlog=BACKLOG)
        self.sock.set_inheritable(True)
        self.port = int(self.sock.getsockname()[1])
        # one byte every worker maps: whether a balancer asked /healthz (catalog.web.serving.Drain)
        self.watched = os.memfd_create("catalog-drain", 0)
        os.ftruncate(self.watched, 1)
        self.slot = shared_slot(settings.index_dir)
        self.stopping = False
        self.signals: list[int] = []
        self.failed = False  # a worker failed before every worker was ready: stop them all
        self.announced = False  # `listening on` printed: every worker was ready once
        self.codes: dict[int, int] = {}  # each worker's exit status once stopping
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)

    # --- the workers ---------------------------------------------------------------------------

    def _command(self, worker: _Worker) -> list[str]:
        spec = {
            "number": worker.number,
            "workers": len(self.workers),
            "fd": self.sock.fileno(),
            "drain_fd": self.watched,
            "index_slot": self.slot,
        }
        return [
            sys.executable,
            "-m",
            "catalog",
            "serve",
            "--data-dir",
            str(self.settings.data_dir),
            "--host",
            self.settings.host,
            "--port",
            str(self.port),
            "--worker",
            json.dumps(spec),
        ]

    def _start(self, worker: _Worker) -> None:
        worker.ready.clear()
        worker.restart_at = None
        worker.started = time.monotonic()
        worker.process = subprocess.Popen(
            self._command(worker),
            pass_fds=(self.sock.fileno(), self.watched),
            stdout=subprocess.PIPE,
            text=True,
            process_group=0,  # a Ctrl-C reaches the workers through the supervisor only
        )
        threading.Thread(target=self._read, args=(worker, worker.process), daemon=True).start()

    def _read(self, worker: _Worker, process: subprocess.Popen[str]) -> None:
        """A worker's standard output: `listening on` once it accepts connections."""
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("listening on"):
                worker.ready.set()
                self._wake()
            else:
                print(line, end="", file=sys.stderr, flush=True)

    def _exited(self, worker: _Worker, code: int) -> None:
        """A worker exited while the server runs: start it again, sooner or later."""
        assert worker.process is not None
        pid, ran = worker.process.pid, time.monotonic() - worker.started
        worker.process = None
        if not self.announced:
            log.error("worker %d exited with %s before the server was ready; stopping", worker.number, code)
            self.failed = True
            return
        worker.quick_exits = worker.quick_exits + 1 if ran < QUICK_EXIT else 0
        delay = 0.0 if worker.quick_exits <= 1 else min(MAX_RESTART_DELAY, 2.0 ** (worker.quick_exits - 2))
        worker.restart_at = time.monotonic() + delay
        log.warning(
            "worker %d (pid %d) exited with %s after %.0f s; starting another in %.0f s",
            worker.number,
            pid,
            code,
            ran,
            delay,
            extra={"worker": worker.number, "pid": pid, "exit_code": code, "restart_in_s": delay},
        )

    # --- signals ---------------------------------------------------------------------------------

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"x")

    def _signalled(self, sig: int, frame: FrameType | None) -> None:
        self.signals.append(sig)
        self._wake()

    def _forward(self, sig: int) -> None:
        if not self.stopping:
            self.stopping = True
            log.info(
                "stopping: every worker drains, then stops",
                extra={"workers": len(self.workers), "signal": signal.Signals(sig).name},
            )
        for worker in self.workers:
            if worker.process is not None and worker.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.send_signal(sig)

    # --- the loop ----------------------------------------------------------------------------------

    def run(self) -> int:
        previous = {sig: signal.signal(sig, self._signalled) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            for worker in self.workers:
                self._start(worker)
            began = time.monotonic()
            while True:
                while self.signals:
                    self._forward(self.signals.pop(0))
                for worker in self.workers:
                    if worker.process is not None and (code := worker.process.poll()) is not None:
                        if self.stopping:
                            worker.restart_at = None
                            self.codes[worker.number] = code
                            worker.process = None
                        else:
                            self._exited(worker, code)
                if self.failed and not self.stopping:
                    self._forward(signal.SIGTERM)
                if not self.announced and all(w.ready.is_set() for w in self.workers):
                    self.announced = True
                    log.info(
                        "serving",
                        extra={"workers": len(self.workers), "index_slot": self.slot, "port": self.port},
                    )
                    print(f"listening on http://{self.settings.host}:{self.port}", flush=True)
                if not self.announced and time.monotonic() - began > READY_PATIENCE and not self.stopping:
                    log.error("the workers did not all start within %.0f s; stopping", READY_PATIENCE)
                    self.failed = True
                    self._forward(signal.SIGTERM)
                if self.stopping and all(w.process is None for w in self.workers):
                    break
                now = time.monotonic()
                for worker in self.workers:
                    if worker.restart_at is not None and now >= worker.restart_at and not self.stopping:
                        self._start(worker)
                waits = [w.restart_at - now for w in self.workers if w.restart_at is not None]
                timeout = max(0.0, min([0.1, *waits]))
                ready, _, _ = select.select([self._wake_r], [], [], timeout)
                if ready:
                    with contextlib.suppress(OSError):
                        os.read(self._wake_r, 4096)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.sock.close()
        if self.failed:
            return 1
        return 0 if all(code == 0 for code in self.codes.values()) else 1


CONNECTIONS_PER_WORKER = 12  # a pool of up to 10, the audit writer's, the database monitor's probe
CONNECTIONS_SPARE = 20  # `catalog reindex`, `catalog audit verify`, tools, another node starting


def connections_needed(workers: int) -> int:
    """The database connections `catalog serve --workers N` may hold at once, and room for tools."""
    return CONNECTIONS_PER_WORKER * workers + CONNECTIONS_SPARE


async def _max_connections(url: str) -> int:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval("SELECT current_setting('max_connections')::int"))
    finally:
        await conn.close()


async def _raise_max_connections(url: str, value: int) -> None:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f"ALTER SYSTEM SET max_connections = {int(value)}")
    finally:
        await conn.close()


def _embedded_database(settings: Settings, count: int) -> Any:
    """Start (or join) the embedded PostgreSQL with the catalog's database, allowing the
    connections `count` workers may hold: its `max_connections` (100 as made) is raised and the
    server started again when this process is the only one using it (else at its next start)."""
    import asyncio

    from catalog.db import EmbeddedPostgres, running_url
    from catalog.runtime import EMBEDDED_DATABASE, ensure_database

    embedded = EmbeddedPostgres(settings.postgres_dir)  # the workers join it
    url = asyncio.run(ensure_database(embedded.start(), EMBEDDED_DATABASE))  # made once, not by each
    needed = connections_needed(count)
    if asyncio.run(_max_connections(url)) >= needed:
        return embedded
    asyncio.run(_raise_max_connections(url, needed))
    embedded.stop()  # stops it unless another process uses it
    if running_url(settings.postgres_dir, EMBEDDED_DATABASE) is not None:
        log.warning(
            "the embedded PostgreSQL allows fewer connections than %d workers may hold; it will allow "
            "%d from its next start (another process uses it now)",
            count,
            needed,
        )
    else:
        log.info(
            "embedded PostgreSQL: max_connections raised for the workers", extra={"max_connections": needed}
        )
    embedded = EmbeddedPostgres(settings.postgres_dir)
    embedded.start()
    return embedded


def _check_connections(settings: Settings, count: int) -> None:
    """Warn when an external database allows fewer connections than the workers may hold."""
    import asyncio

    assert settings.database_url is not None
    try:
        allowed = asyncio.run(_max_connections(settings.database_url))
    except Exception:  # the workers report an unreachable database themselves
        return
    if allowed < connections_needed(count):
        log.warning(
            "the database allows %d connections; %d workers may hold %d (%d each) and tools need more: "
            "raise max_connections, or put pgbouncer in front (docs: operations/sizing.md)",
            allowed,
            count,
            CONNECTIONS_PER_WORKER * count,
            CONNECTIONS_PER_WORKER,
        )


def supervise(settings: Settings, count: int) -> int:
    """Serve with `count` workers until SIGTERM or SIGINT; the exit status of the whole."""
    embedded = None
    if settings.database_url is None:
        embedded = _embedded_database(settings, count)
    else:
        _check_connections(settings, count)
    try:
        return Supervisor(settings, count).run()
    finally:
        if embedded is not None:
            embedded.stop()  # stops it unless another process still uses it


def _die_with_parent() -> None:
    """Ask the kernel for SIGTERM when the supervisor dies (Linux), so that no worker outlives it."""
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)


class _Named(logging.Filter):
    """Each log line of a worker names it (`worker`)."""

    def __init__(self, number: int) -> None:
        super().__init__()
        self.number = number

    def filter(self, record: logging.LogRecord) -> bool:
        if "worker" not in record.__dict__:
            record.worker = self.number
        return True


def run_worker(settings: Settings, spec_text: str) -> int:
    """One worker: serve the supervisor's socket until SIGTERM or SIGINT."""
    from catalog.app import create_app
    from catalog.cli import serve_app
    from catalog.runtime import Worker
    from catalog.web.serving import Drain

    spec = json.loads(spec_text)
    parent = os.getppid()
    _die_with_parent()
    if os.getppid() != parent:  # the supervisor died before the request took effect
        return 1
    sock = socket.socket(fileno=int(spec["fd"]))
    shared = mmap.mmap(int(spec["drain_fd"]), 1)
    worker = Worker(int(spec["number"]), int(spec["workers"]), int(spec["index_slot"]))
    for handler in logging.getLogger().handlers:
        handler.addFilter(_Named(worker.number))
    app = create_app(settings, worker=worker)
    drain = Drain(settings.drain_seconds, shared)
    number = worker.number
    served = serve_app(
        app, settings.host, settings.port, settings=settings, sockets=[sock], drain=drain, worker=number
    )
    return 0 if served else 1
