"""Numbered passes of a background worker, so a request can wait for "a pass that started after
I asked" (everything committed before the request has then been processed); and the change feed
that wakes the workers when any process commits a change."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import asyncpg

log = logging.getLogger("catalog.search")


class Passes:
    def __init__(self) -> None:
        self.started = 0
        self.done = 0
        self.wake = asyncio.Event()
        # set with `wake` when the pass must not be put off: a request waits for it, or more
        # work is waiting (a worker that lets writes gather for a while, the indexer, reads it)
        self.urgent = asyncio.Event()
        self._finished = asyncio.Condition()

    def hurry(self) -> None:
        """Wake the worker for a pass that is not to be put off."""
        self.urgent.set()
        self.wake.set()

    def begin(self) -> int:
        self.started += 1
        return self.started

    async def end(self, number: int) -> None:
        async with self._finished:
            self.done = max(self.done, number)
            self._finished.notify_all()

    async def wait_next(self, timeout: float, enough: Callable[[], bool] | None = None) -> None:  # noqa: ASYNC109
        """Wake the worker and return when a pass that starts after this call has ended, or as
        soon as a pass ends with `enough()` true (the caller's condition already met: the pass
        in progress when it asked held what it waits for)."""
        async with self._finished:
            target = self.started + 1
            self.hurry()

            def ended() -> bool:
                return self.done >= target or (enough is not None and enough())

            await asyncio.wait_for(self._finished.wait_for(ended), timeout)


CHANNEL = "catalog_changes"  # notified by the change logs' triggers (migration 0019)


class ChangeFeed:
    """Wakes this process's background workers when any process commits a change: PostgreSQL
    notifies `CHANNEL` with the change log's name (`entry_changes`, `transcript_changes`) when a
    transaction that wrote to it commits.

    Rules:
    - while `listening`, the workers need not poll: every committed change reaches them as a
      notification (its rows are visible when it arrives), a local write also wakes them at once,
      and a search wakes them itself (read-your-writes);
    - one connection of the pool is held for LISTEN. When it is lost (or cannot be had),
      `listening` turns False, so that the workers poll as before, and the feed retries; once it
      listens again it wakes every worker, since notifications may have been missed meanwhile.
    """

    def __init__(self, pool: asyncpg.Pool, *, retry_delay: float = 1.0) -> None:
        self.pool = pool
        self.retry_delay = retry_delay
        self.listening = False
        self.notifications = 0
        self._subscribers: list[tuple[Callable[[], None], frozenset[str]]] = []
        self._lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def subscribe(self, wake: Callable[[], None], *changes: str) -> None:
        """Call `wake` when one of these change logs is written (and on every reconnect)."""
        self._subscribers.append((wake, frozenset(changes)))

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="change-feed")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.listening = False

    def _notified(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        self.notifications += 1
        for wake, changes in self._subscribers:
            if payload in changes:
                wake()

    def _terminated(self, _conn: object) -> None:
        self._lost.set()

    def _wake_all(self) -> None:
        for wake, _ in self._subscribers:
            wake()

    async def _run(self) -> None:
        while True:
            try:
                async with self.pool.acquire() as conn:
                    self._lost.clear()
                    conn.add_termination_listener(self._terminated)
                    await conn.add_listener(CHANNEL, self._notified)
                    self.listening = True
                    self._wake_all()  # what committed before LISTEN took effect
                    try:
                        await self._lost.wait()
                    finally:
                        self.listening = False
                        self._wake_all()  # back to polling: start now
                        conn.remove_termination_listener(self._terminated)  # the pool reuses it
                        if not conn.is_closed():
                            with contextlib.suppress(Exception):
                                await conn.remove_listener(CHANNEL, self._notified)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database monitor reports outages; poll meanwhile
                log.debug("change feed: not listening (%s); retrying", exc)
            await asyncio.sleep(self.retry_delay)
