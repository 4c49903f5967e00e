"""Numbered passes of a background worker, so a request can wait for "a pass that started after
I asked" (everything committed before the request has then been processed)."""

from __future__ import annotations

import asyncio


class Passes:
    def __init__(self) -> None:
        self.started = 0
        self.done = 0
        self.wake = asyncio.Event()
        self._finished = asyncio.Condition()

    def begin(self) -> int:
        self.started += 1
        return self.started

    async def end(self, number: int) -> None:
        async with self._finished:
            self.done = max(self.done, number)
            self._finished.notify_all()

    async def wait_next(self, timeout: float) -> None:  # noqa: ASYNC109
        """Wake the worker and return when a pass that starts after this call has ended."""
        async with self._finished:
            target = self.started + 1
            self.wake.set()
            await asyncio.wait_for(self._finished.wait_for(lambda: self.done >= target), timeout)
