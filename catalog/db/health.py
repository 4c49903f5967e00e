"""Whether PostgreSQL answers, and bringing the embedded one back when it dies.

Rules:
- the database is `up` until a probe (a fresh connection and `SELECT 1`) fails. A request that
  meets an unreachable database calls `suspect()`, which probes at once; the monitor also probes
  on its own, every `interval_up` seconds while up and every `interval_down` while down;
- while down, requests are answered 503 `TEMPORARILY_UNAVAILABLE` without touching the database
  (catalog.http), and `/healthz` says why;
- embedded PostgreSQL: while its postmaster is gone, the monitor starts it again (pg_ctl on the same
  data dir; crash recovery replays the WAL), retrying with backoff (1, 2, 4, … 10 s);
- when a probe succeeds again, the pools drop every connection opened before the outage (asyncpg
  opens new ones on demand), and the workers that failed meanwhile resume on their own;
- one log line when the database goes away (with the reason), one when it is back (with how long
  it was away), nothing per probe.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence

import asyncpg

from catalog.db.embedded import EmbeddedPostgres

log = logging.getLogger("catalog.db")

PROBE_TIMEOUT = 3.0
MAX_BACKOFF = 10.0


def describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class DatabaseMonitor:
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
        self.up = True
        self.reason: str | None = None
        self.down_since: float | None = None
        self.outages = 0
        self.restarts = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._next_revive = 0.0
        self._backoff = 1.0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="database-monitor")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

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

    async def probe(self) -> str | None:
        """None when the database answers, else what went wrong."""
        try:
            conn = await asyncpg.connect(self.url, timeout=PROBE_TIMEOUT)
        except asyncpg.TooManyConnectionsError:
            return None  # it answers; it is busy (the pools' connections still work)
        except Exception as exc:  # every way of not answering is an answer here
            return describe(exc)
        try:
            await asyncio.wait_for(conn.fetchval("SELECT 1"), PROBE_TIMEOUT)
        except Exception as exc:
            return describe(exc)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), PROBE_TIMEOUT)
        return None

    async def check(self) -> None:
        """One probe; move between up and down; revive the embedded server when due."""
        problem = await self.probe()
        if problem is None:
            if not self.up:
                assert self.down_since is not None
                log.warning(
                    "database is back",
                    extra={"down_for_seconds": round(time.monotonic() - self.down_since, 1)},
                )
                for pool in self.pools:
                    await pool.expire_connections()
                self.up, self.reason, self.down_since = True, None, None
                self._backoff = 1.0
            return
        if self.up:
            self.up, self.reason, self.down_since = False, problem, time.monotonic()
            self.outages += 1
            log.error("database unreachable; answering 503 until it is back", extra={"reason": problem})
        else:
            self.reason = problem
        await self._revive_if_due()

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
            interval = self.interval_up if self.up else self.interval_down
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), interval)
            self._wake.clear()
            try:
                await self.check()
            except asyncio.CancelledError:
                raise
            except Exception:  # the monitor itself must never stop
                log.exception("database monitor failed")
