"""Where a kind of blocking call of the search runs: on the event loop while its recent runs were
short, on a worker thread once they are not (`Placement`).

A run is timed in the CPU time of the thread that ran it, not by the wall clock: on a thread, a
call also waits for the interpreter's lock while the event loop holds it, and under load that
wait is longer than the call. Timed by the wall clock, a call sent to a thread once looked slow
for as long as the server stayed busy and stayed there, paying two thread wake-ups each time for
a call that costs a fraction of them. Waits for the disk do not count either: a search's CPU grows
with its index, and a call whose index is small enough to stay on the loop reads little from it."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# a full-text call whose recent runs used less CPU than this runs on the event loop: handing it to
# a thread and back costs some 0.3 ms of CPU in wake-ups and turns at the interpreter's lock
# (`bench/request_floor.py --cpu --perf`: futex), and on a thread the call's own CPU reads higher by
# about as much; below this, the loop is the cheaper place (a small index's whole search)
INLINE_BELOW = 0.001


class Placement:
    """Where a kind of blocking call runs: on the event loop while its recent runs were short
    (a small index: the hand-off to a thread would cost more than the call), on a worker thread
    once they are not (a large index: the loop must not wait for it). The estimate follows each
    run, so a growing index moves its calls to threads by itself."""

    def __init__(self, below: float = INLINE_BELOW) -> None:
        self.below = below
        self.estimate = math.inf  # CPU seconds a run takes; unknown: the first run goes to a thread

    def _timed(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        started = time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            took = time.thread_time() - started
            self.estimate = took if math.isinf(self.estimate) else 0.8 * self.estimate + 0.2 * took

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self.estimate < self.below:
            return self._timed(fn, *args, **kwargs)
        return await asyncio.to_thread(self._timed, fn, *args, **kwargs)
