"""The health of a background worker that keeps derived state (the full-text index, the
embeddings) in step with PostgreSQL.

Rules:
- a failed attempt is retried with exponential backoff (`first_delay` doubling up to
  `max_delay`); the worker itself never moves past what it has not applied;
- the log gets one line when a run of failures starts (with its reason) and one when it is over;
  expected failures (the operating system's: a full or read-only disk, an unreachable database)
  carry no trace, unexpected ones a trace at most once per `trace_every` seconds;
- the state (healthy or not, the reason of the last failure, since when, how many failures) is
  what `/healthz` and `/metrics` report;
- an unreachable database is not the worker's failure to report: the database monitor logs the
  outage once (catalog.db.health), so the worker stays quiet and retries every `outage_delay`
  seconds, and requests that wait for its next pass (read-your-writes) keep waiting for it, as
  it resumes as soon as the database answers.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass

import asyncpg

from catalog.errors import is_unavailable

# Tantivy raises ValueError for an I/O failure, with the OS error somewhere in the message
# ("(os error 28)", "Os { code: 28, ...}"), or names a writer that an I/O failure stopped.
_OS_ERROR = re.compile(r"os error (\d+)|Os \{ code: (\d+)")
_IO_MESSAGES = ("io error", "ioerror", "index writer was killed")
# Tantivy's word for a writer an earlier I/O error stopped: it names no cause of its own
_CONSEQUENCES = ("index writer was killed",)
MAX_REASON = 300
# a disk with less than this free is full: a writer killed there was killed by it
FULL_BELOW = 1024 * 1024


def describe(exc: BaseException) -> tuple[str, bool]:
    """(a one-line reason, whether the failure is an expected one that needs no trace)."""
    if isinstance(exc, OSError):
        # ENOSPC, EDQUOT, EROFS, EIO...: the strerror says it all
        where = f" ({exc.filename})" if exc.filename else ""
        return (f"{exc.strerror}{where}" if exc.strerror else f"{type(exc).__name__}: {exc}"), True
    if isinstance(exc, (asyncpg.PostgresConnectionError, asyncpg.InterfaceError, ConnectionError)):
        return f"database unreachable: {exc}", True
    text = " ".join(str(exc).split())
    if len(text) > MAX_REASON:
        text = text[: MAX_REASON - 1] + "…"
    if isinstance(exc, ValueError):
        if match := _OS_ERROR.search(str(exc)):
            code = int(match.group(1) or match.group(2))
            return f"{os.strerror(code)} ({text})", True
        if any(m in text.lower() for m in _IO_MESSAGES):
            return text, True
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__, False


def _full(where: str | None) -> str | None:
    """What says the disk of `where` is full (its free bytes), or None when it is not."""
    if where is None:
        return None
    try:
        free = shutil.disk_usage(where).free
    except OSError:
        return None
    return f"{where}: {free} bytes free" if free < FULL_BELOW else None


@dataclass(frozen=True)
class WorkerStatus:
    name: str
    healthy: bool
    lag: int  # index: change rows not yet applied; embeddings: entries whose vector is stale
    reason: str | None  # the last failure, while failing
    failing_since: float | None  # wall-clock time of the first failure of the current run
    failures_total: int


class Health:
    def __init__(
        self,
        name: str,
        log: logging.Logger,
        *,
        first_delay: float = 0.5,
        max_delay: float = 10.0,
        trace_every: float = 60.0,
        outage_delay: float = 1.0,
        where: str | None = None,
    ) -> None:
        self.name = name
        self.where = where  # e.g. the index directory: logged with each line (`extra["where"]`)
        self.log = log
        self.first_delay = first_delay
        self.max_delay = max_delay
        self.trace_every = trace_every
        self.outage_delay = outage_delay
        self.outage = False  # the current run of failures is a database outage (see rules)
        self.reason: str | None = None
        self.failing_since: float | None = None
        self.failures_total = 0
        self._consecutive = 0
        self._last_trace: float | None = None

    @property
    def healthy(self) -> bool:
        return self.failing_since is None

    def failed(self, exc: BaseException, doing: str) -> float:
        """Record a failed attempt at `doing`; returns how long to wait before the next one."""
        if is_unavailable(exc) and (self.failing_since is None or self.outage):
            self.outage = True
            if self.failing_since is None:
                self.failing_since = time.time()
            self.reason = f"{doing}: the database is unreachable"
            self.failures_total += 1
            self._consecutive += 1
            return self.outage_delay
        self.outage = False
        reason, expected = describe(exc)
        consequence = any(m in reason.lower() for m in _CONSEQUENCES)
        if consequence and self.reason is None and (full := _full(self.where)):
            # the cause died in the writer's thread: the disk says what it was
            reason = f"{os.strerror(errno.ENOSPC)} ({full}; {reason})"
        if not (consequence and self.failing_since is not None and self.reason is not None):
            self.reason = f"{doing}: {reason}"  # else the cause seen before says more than this
        self.failures_total += 1
        self._consecutive += 1
        now = time.monotonic()
        trace = not expected and (self._last_trace is None or now - self._last_trace >= self.trace_every)
        if trace:
            self._last_trace = now
        if self.failing_since is None:
            self.failing_since = time.time()
            self.log.error(
                f"{self.name}: failing ({self.reason}); retrying until it succeeds",
                extra={"worker": self.name, "where": self.where, "reason": self.reason},
                exc_info=exc if trace else None,
            )
        elif trace:
            self.log.error(
                f"{self.name}: still failing ({self.reason})",
                extra={
                    "worker": self.name,
                    "where": self.where,
                    "reason": self.reason,
                    "failures": self._consecutive,
                },
                exc_info=exc,
            )
        return float(min(self.max_delay, self.first_delay * 2 ** min(self._consecutive - 1, 30)))

    def succeeded(self) -> None:
        if self.failing_since is not None and not self.outage:
            self.log.info(
                f"{self.name}: recovered after {self._consecutive} failed attempt(s) "
                f"in {time.time() - self.failing_since:.0f} s",
                extra={"worker": self.name, "where": self.where, "failures": self._consecutive},
            )
        self.reason = None
        self.failing_since = None
        self.outage = False
        self._consecutive = 0

    def status(self, lag: int) -> WorkerStatus:
        outage = self.outage  # the database monitor's to report, and over when the database is back
        return WorkerStatus(
            name=self.name,
            healthy=self.healthy or outage,
            lag=lag,
            reason=None if outage else self.reason,
            failing_since=None if outage else self.failing_since,
            failures_total=self.failures_total,
        )
