"""The embedded PostgreSQL (pgserver) living in `<data dir>/postgres`.

Rules:
- one postmaster per data dir; a second process on the same dir reuses the running one;
- a process that started or joined the server registers its pid; the last live one to leave
  stops the server cleanly (`pg_ctl stop`), so the next start reuses the cluster as it is;
- pids of processes that died without leaving are pruned before joining, so a crash never
  keeps the server from being stopped later;
- `running_url` only reads `postmaster.pid`: it never starts anything.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger("catalog.db")

HANDLES_FILE = ".handle_pids.json"


def _prune_dead_handles(pgdata: Path) -> None:
    handles = pgdata / HANDLES_FILE
    try:
        pids = json.loads(handles.read_text())
    except (OSError, ValueError):
        return
    alive = [pid for pid in pids if isinstance(pid, int) and psutil.pid_exists(pid)]
    if alive != pids:
        handles.write_text(json.dumps(alive))


def running_url(pgdata: Path, database: str = "postgres") -> str | None:
    """URL of the postmaster already running in `pgdata`, or None."""
    from pgserver.utils import PostmasterInfo

    try:
        info = PostmasterInfo.read_from_pgdata(pgdata)
    except (OSError, AssertionError, ValueError):
        return None
    if info is None or not info.is_running() or info.status != "ready":
        return None
    return info.get_uri(database=database)


class EmbeddedPostgres:
    """Start (or join) the embedded server; `stop()` leaves it, stopping it if last."""

    def __init__(self, pgdata: Path, *, keep_running: bool = False) -> None:
        self.pgdata = pgdata
        self.keep_running = keep_running
        self._server: Any = None

    def start(self) -> str:
        import pgserver

        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        if self.pgdata.exists():
            _prune_dead_handles(self.pgdata)
        fresh = not (self.pgdata / "PG_VERSION").exists()
        self._server = pgserver.get_server(self.pgdata, cleanup_mode=None if self.keep_running else "stop")
        log.info("embedded postgres %s in %s", "initialised" if fresh else "reused", self.pgdata)
        return str(self._server.get_uri())

    @property
    def url(self) -> str:
        assert self._server is not None, "start() first"
        return str(self._server.get_uri())

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None
