"""Where the search's blocking calls run (`catalog.search.placement.Placement`): on the event loop
while a call costs less CPU than a hand-off to a thread, on a thread once it costs more, judged
by the CPU the call used, not by how long it waited."""

from __future__ import annotations

import threading
import time

from catalog.search.placement import Placement


def _waits(seconds: float) -> int:
    """A call that takes `seconds` of wall time and almost no CPU (as a call on a thread does
    while it waits for the interpreter's lock); the thread it ran on."""
    time.sleep(seconds)
    return threading.get_ident()


def _works(seconds: float) -> int:
    """A call that uses `seconds` of its thread's CPU; the thread it ran on."""
    started = time.thread_time()
    while time.thread_time() - started < seconds:
        sum(range(1000))
    return threading.get_ident()


async def test_a_call_that_only_waited_comes_back_to_the_event_loop() -> None:
    placement = Placement(below=0.0005)
    loop_thread = threading.get_ident()
    first = await placement.run(_waits, 0.01)  # unknown yet: a thread
    assert first != loop_thread
    # ten milliseconds on the wall clock, next to nothing of CPU: cheaper here than a hand-off
    assert placement.estimate < 0.0005
    assert await placement.run(_waits, 0.0) == loop_thread


async def test_a_call_that_uses_the_cpu_stays_on_a_thread() -> None:
    placement = Placement(below=0.0005)
    loop_thread = threading.get_ident()
    for _ in range(3):
        assert await placement.run(_works, 0.003) != loop_thread
    assert placement.estimate >= 0.0005


async def test_a_call_that_became_cheap_moves_back_to_the_loop() -> None:
    placement = Placement(below=0.0005)
    loop_thread = threading.get_ident()
    await placement.run(_works, 0.003)
    ran_on = [await placement.run(_works, 0.0) for _ in range(30)]
    # the estimate follows each run: some runs later the call is on the loop and stays there
    assert ran_on[-1] == loop_thread
    assert ran_on[0] != loop_thread
