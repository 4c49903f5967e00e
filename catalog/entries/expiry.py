"""The expiry sweep: deletes entries whose `expires_at` has passed, in the background.

Rules:
- reads never answer an expired entry (they filter on `expires_at`), so the sweep is only about
  storage: it runs when the next expiry is due, at the latest every `IDLE_SECONDS`, and takes
  `BATCH` entries per transaction;
- each transaction deletes the entries (their history records a deletion by `system:expiry`, the
  change log takes them out of the search indexes) and appends one `system.expire` audit event
  per store with the count, all or nothing;
- stores under legal hold are skipped: their expired entries stay (still unread) until released.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

import asyncpg

from catalog.entries import repo
from catalog.errors import is_unavailable
from catalog.recorder.writer import append_on, complete

log = logging.getLogger("catalog.expiry")

BATCH = 1000
IDLE_SECONDS = 300.0
RETRY_SECONDS = 5.0


class ExpirySweeper:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self.swept = 0  # entries this process deleted
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._stopping = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="expiry-sweeper")

    def wake(self) -> None:
        """An entry with an expiry was written: look at the next one again."""
        self._wake.set()

    async def close(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._task, 10)

    async def sweep(self) -> int:
        """Delete every entry that has expired now; how many."""
        total = 0
        while True:
            async with self.pool.acquire() as conn, conn.transaction():
                gone = await repo.sweep_expired(conn, BATCH)
                if gone:
                    request_id = f"system-{uuid.uuid4().hex}"
                    events = [
                        complete(
                            {
                                "request_id": request_id,
                                "decision": "system",
                                "action_name": "system.expire",
                                "securable_type": "MEMORY_STORE",
                                "securable_full_name": store,
                                "result_count": count,
                                "status_code": 200,
                            }
                        )
                        for store, count in gone
                    ]
                    await append_on(conn, events)
            done = sum(count for _, count in gone)
            total += done
            self.swept += done
            if done < BATCH:
                return total

    async def _loop(self) -> None:
        while not self._stopping:
            try:
                await self.sweep()
                due = await repo.next_expiry(self.pool)
                delay = IDLE_SECONDS if due is None else min(max(due, 0.05), IDLE_SECONDS)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not is_unavailable(exc):
                    log.exception("the expiry sweep failed; retrying")
                delay = RETRY_SECONDS
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            self._wake.clear()
