"""Whether PostgreSQL answers, whether a request may go on, and bringing the embedded one back
when it dies.

Rules:
- the verdict (`up`) is a claim that the database is away, so it needs evidence that tells an
  outage from a busy machine. A probe (a fresh connection and `SELECT 1`, `PROBE_TIMEOUT` each)
  that is answered "no" (refused, reset, closed, the socket gone, the server starting or shutting
  down, a login refused) is such evidence: the verdict is down at once. A probe that gets no
  answer in time (a timeout) is not: a starved process (or a starved database host) misses a
  deadline of a few seconds while PostgreSQL is fine. Only silence that lasts, `SILENT_PROBES`
  probes in a row spanning at least `SILENCE_SECONDS`, makes the verdict down (a database whose
  network went quiet). Any answer ends the silence; a failure of a probe that began before the
  last answer says nothing and is ignored;
- requests are refused before they touch the database (503 `TEMPORARILY_UNAVAILABLE`,
  catalog.web.middleware; `/healthz` says why) only when the verdict is down AND a quick attempt of the
  request's own also fails: a connection of the requests' pool answering `SELECT 1` within
  `ATTEMPT_TIMEOUT` (`admit()`; concurrent requests share one attempt). The verdict spares
  requests the wait for a database that is away (a refused attempt fails at once, a silent one
  costs `ATTEMPT_TIMEOUT`); the attempt keeps a wrong verdict from turning away a request that
  could run: one that finds a healthy connection is served, whatever the probes said, and its
  success is an answer (the verdict is up again). While the verdict is up nothing is attempted:
  a request that meets an unreachable database fails by itself (503, catalog.web.errors) and calls
  `suspect()`, which probes at once;
- the monitor probes on its own every `interval_up` seconds while up, and every `interval_down`
  while down or while its last probe went unanswered;
- embedded PostgreSQL: while its postmaster is gone, the monitor starts it again (pg_ctl on the same
  data dir; crash recovery replays the WAL), retrying with backoff (1, 2, 4, … 10 s);
- when the database answers again, the pools drop every connection opened before the outage
  (asyncpg opens new ones on demand), and the workers that failed meanwhile resume on their own;
- one log line when the database goes away (with the reason), one when it is back (with how long
  it was away), one when probes start going unanswered while it is up; nothing per probe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg

from catalog.db.embedded import EmbeddedPostgres

log = logging.getLogger("catalog.db")

PROBE_TIMEOUT = 3.0  # how long one probe waits for each step: a missed deadline is silence, not a refusal
SILENT_PROBES = 3  # unanswered probes in a row, and
SILENCE_SECONDS = 30.0  # how long they must span, before silence is taken for an outage
ATTEMPT_TIMEOUT = 1.0  # a request's own attempt while the verdict is down
MAX_BACKOFF = 10.0


def describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


@dataclass(frozen=True)
class Failure:
    """A probe that failed: why, and whether it was only silence (no answer in time)."""

    reason: str
    silent: bool


class DatabaseMonitor:
    """`pools[0]` is the pool requests use: their own attempts (`admit`) are made on it."""

    def __init__(
        self,
        url: str,
        pools: Sequence[asyncpg.Pool],
        embedded: EmbeddedPostgres | None = None,
        *,
        interval_up: float = 5.0,
        interval_down: float = 0.5,
    ) -> None:
        self.url = url
        self.pools = list(pools)
        self.embedded = embedded
        self.interval_up = interval_up
        self.interval_down = interval_down
        self.silent_probes_needed = SILENT_PROBES
        self.silence_seconds = SILENCE_SECONDS
        self.up = True
        self.reason: str | None = None
        self.down_since: float | None = None
        self.outages = 0
        self.restarts = 0
        self.silent_probes = 0  # unanswered probes in a row while up
        self.silent_since: float | None = None
        self._answered_at = time.monotonic()  # the last time the database answered (probe or request)
        self._attempt: asyncio.Task[bool] | None = None  # the requests' shared attempt while down
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._next_revive = 0.0
        self._backoff = 1.0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="database-monitor")

    async def close(self) -> None:
        for task in (self._task, self._attempt):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def suspect(self) -> None:
        """A request met an unreachable database: probe now."""
        self._wake.set()

    @property
    def retry_after(self) -> float:
        return 2.0

    def status(self) -> dict[str, object]:
        if self.up:
            return {"database": "ok"}
        assert self.down_since is not None
        return {
            "database": "unavailable",
            "reason": self.reason,
            "down_for_seconds": round(time.monotonic() - self.down_since, 1),
        }

    async def admit(self) -> bool:
        """Whether a request may go on: while the verdict is up, at once; while it is down, when a
        quick attempt on the requests' pool succeeds (shared by the requests that arrive while it
        is made; one request giving up does not cancel it for the others)."""
        if self.up:
            return True
        if self._attempt is None or self._attempt.done():
            self._attempt = asyncio.create_task(self._try_request_pool(), name="database-attempt")
        return await asyncio.shield(self._attempt)

    async def _try_request_pool(self) -> bool:
        began = time.monotonic()
        try:
            async with asyncio.timeout(ATTEMPT_TIMEOUT), self.pools[0].acquire() as conn:
                await conn.fetchval("SELECT 1")
        except Exception:  # refused, reset or silent: the request is refused; the monitor keeps probing
            return False
        await self._answered(began)
        return True

    async def probe(self) -> Failure | None:
        """None when the database answers, else what went wrong."""
        try:
            conn = await asyncpg.connect(self.url, timeout=PROBE_TIMEOUT)
        except asyncpg.TooManyConnectionsError:
            return None  # it answers; it is busy (the pools' connections still work)
        except Exception as exc:  # every way of not answering is an answer here
            return Failure(describe(exc), silent=isinstance(exc, TimeoutError))
        try:
            await asyncio.wait_for(conn.fetchval("SELECT 1"), PROBE_TIMEOUT)
        except Exception as exc:
            return Failure(describe(exc), silent=isinstance(exc, TimeoutError))
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), PROBE_TIMEOUT)
        return None

    async def check(self) -> None:
        """One probe; move between up and down; revive the embedded server when due."""
        began = time.monotonic()
        problem = await self.probe()
        if problem is None:
            await self._answered(began)
            return
        if began < self._answered_at:
            return  # the database answered (a request's attempt) while this probe waited
        if self.up and problem.silent:
            now = time.monotonic()
            if self.silent_since is None:
                self.silent_since = now
                log.warning(
                    "database health probe unanswered; not taken for an outage unless it lasts",
                    extra={"reason": problem.reason, "silence_seconds": self.silence_seconds},
                )
            self.silent_probes += 1
            silent_for = now - self.silent_since
            if self.silent_probes < self.silent_probes_needed or silent_for < self.silence_seconds:
                return  # a busy machine misses deadlines: not an outage (yet)
            problem = Failure(f"{problem.reason} (no answer for {silent_for:.0f} s)", silent=True)
        if self.up:
            self.up, self.reason, self.down_since = False, problem.reason, time.monotonic()
            self.outages += 1
            log.error(
                "database unreachable; answering 503 until it is back", extra={"reason": problem.reason}
            )
        else:
            self.reason = problem.reason
        await self._revive_if_due()

    async def _answered(self, began: float) -> None:
        """The database answered something that began at `began` (a probe, a request's attempt)."""
        self._answered_at = max(self._answered_at, began)
        self.silent_probes, self.silent_since = 0, None
        if self.up:
            return
        assert self.down_since is not None
        log.warning(
            "database is back",
            extra={"down_for_seconds": round(time.monotonic() - self.down_since, 1)},
        )
        self.up, self.reason, self.down_since = True, None, None
        self._backoff = 1.0
        for pool in self.pools:
            await pool.expire_connections()

    async def _revive_if_due(self) -> None:
        if self.embedded is None or time.monotonic() < self._next_revive:
            return
        if await asyncio.to_thread(self.embedded.alive):
            return  # running (perhaps still recovering): wait for it
        try:
            await asyncio.to_thread(self.embedded.revive)
            self.restarts += 1
            self._backoff = 1.0
        except Exception as exc:  # not yet (old backends still exiting, recovery, ...): back off
            log.warning(
                "embedded postgres did not start; retrying",
                extra={"reason": describe(exc), "retry_in_seconds": self._backoff},
            )
            self._next_revive = time.monotonic() + self._backoff
            self._backoff = min(MAX_BACKOFF, self._backoff * 2)

    async def _run(self) -> None:
        while True:
            # silence is looked at again soon: one answer ends it
            interval = self.interval_up if self.up and not self.silent_probes else self.interval_down
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), interval)
            self._wake.clear()
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:  # the monitor itself must never stop
                log.exception("database monitor failed")
