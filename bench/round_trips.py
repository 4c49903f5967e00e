"""What a round trip to PostgreSQL costs the server's side of the connection (asyncpg on uvloop):
client CPU and wall time per call, on an embedded PostgreSQL in a temporary directory.

- a statement through the pool (`pool.fetchrow`: acquire, the statement, release), through
  asyncpg's own pool class, and the same statement on a connection held for all of them: what
  the pool's acquire and release add, and what the lean pool (`catalog.db.pool.LeanPool`) saves;
- the HNSW search's transaction (`VectorSearch._hnsw`, the statement itself replaced by a small
  query) as it was, five trips (`BEGIN`, `SET LOCAL plan_cache_mode`, `set_config('hnsw.ef_search')`,
  the statement, `COMMIT`), and as it is, three (`BEGIN` with both settings in one message, the
  statement, `ROLLBACK`);
- what a pause costs the next step (wall p50): a bare `SELECT 1` on a held connection, and the
  model's run on a short query (one thread, as a lane runs it), each back to back, after the
  caller slept `PAUSE_MS`, and after it worked that long (a busy loop): a search's steps each
  come after others' work, not back to back.

Run: .venv/bin/python bench/round_trips.py [--calls 3000]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from catalog.cli import event_loop_factory
from catalog.db import create_pool
from catalog.db.embedded import EmbeddedPostgres
from catalog.settings import Settings

QUERY = "SELECT x::text, 0.5::float8 FROM generate_series(1, 10) AS x WHERE $1::int > 0"
PAUSE_MS = 3.0
QUERIES = ("when did Caroline go to the support group?", "what does Melanie like to paint", "hiking plans")


async def five_trips(pool: asyncpg.Pool) -> Any:
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
        await conn.execute("SELECT set_config('hnsw.ef_search', $1, true)", "400")
        return await conn.fetch(QUERY, 1)


async def three_trips(pool: asyncpg.Pool) -> Any:
    async with pool.acquire() as conn:
        await conn.execute(
            "BEGIN; SET LOCAL plan_cache_mode = force_custom_plan; SET LOCAL hnsw.ef_search = 400"
        )
        try:
            return await conn.fetch(QUERY, 1)
        finally:
            await conn.execute("ROLLBACK")


async def measure(call: Callable[[], Awaitable[Any]], calls: int) -> tuple[float, float]:
    """(client CPU µs per call, wall p50 µs), after a warm-up."""
    for _ in range(200):
        await call()
    walls = []
    cpu = time.thread_time()
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        walls.append(time.perf_counter() - started)
    return (time.thread_time() - cpu) / calls * 1e6, statistics.median(walls) * 1e6


async def run(url: str, calls: int) -> None:
    setup = await asyncpg.connect(url)
    await setup.execute("CREATE EXTENSION IF NOT EXISTS vector")  # the pool registers its codec
    await setup.close()
    pool = await create_pool(url)
    stock = await create_pool(url, lean=False)
    try:
        async with pool.acquire() as held:
            cases: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
                ("a statement on a held connection", lambda: held.fetchrow(QUERY, 1)),
                ("a statement through the pool", lambda: pool.fetchrow(QUERY, 1)),
                ("a statement through asyncpg's own pool", lambda: stock.fetchrow(QUERY, 1)),
            ]
            # each case twice, in turn, so that the machine's drift weighs on each alike
            runs = [await measure(call, calls) for _ in range(2) for _, call in cases]
            rows = [
                (label, *map(statistics.mean, zip(*runs[k :: len(cases)], strict=True)))
                for k, (label, _) in enumerate(cases)
            ]
        for label, call in [
            ("HNSW search's transaction, before: five trips", lambda: five_trips(pool)),
            ("HNSW search's transaction, now: three trips", lambda: three_trips(pool)),
        ]:
            rows.append((label, *await measure(call, calls)))
    finally:
        await stock.close()
        await pool.close()
    print("| call | client CPU per call | wall p50 |")
    print("|---|---:|---:|")
    for label, cpu, wall in rows:
        print(f"| {label} | {cpu:.0f} µs | {wall:.0f} µs |")


def _busy(ms: float) -> None:
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


Pause = Callable[[], None] | None


async def _paused(step: Callable[[int], Awaitable[Any]], pause: Pause, calls: int) -> float:
    """Wall p50 µs of `step(i)`, each after `pause` (None: back to back), after a warm-up."""
    walls = []
    for i in range(calls + 100):
        if pause is not None:
            pause()
        started = time.perf_counter()
        await step(i)
        if i >= 100:
            walls.append(time.perf_counter() - started)
    return statistics.median(walls) * 1e6


async def pauses(url: str, calls: int) -> None:
    """The pause table (see the module's docstring)."""
    from catalog.runtime import load_encoder

    encoder = load_encoder(Settings())
    conn = await asyncpg.connect(url)

    async def select(_: int) -> Any:
        return await conn.fetchval("SELECT 1")

    async def model(i: int) -> Any:
        return encoder.encode([QUERIES[i % len(QUERIES)]])

    ways: list[tuple[str, Pause]] = [
        ("back to back", None),
        (f"after {PAUSE_MS:g} ms asleep", lambda: time.sleep(PAUSE_MS / 1000)),
        (f"after {PAUSE_MS:g} ms of other work", lambda: _busy(PAUSE_MS)),
    ]
    try:
        rows = [
            (label, await _paused(select, pause, calls), await _paused(model, pause, min(calls, 1000)))
            for label, pause in ways
        ]
    finally:
        await conn.close()
    print("\n| the next step | `SELECT 1` round trip (wall p50) | the model on a query (wall p50) |")
    print("|---|---:|---:|")
    for label, trip, run in rows:
        print(f"| {label} | {trip:.0f} µs | {run:.0f} µs |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    args = parser.parse_args()
    where = Path(tempfile.mkdtemp(prefix="catalog-trips-"))
    server = EmbeddedPostgres(where / "postgres")
    try:
        url = server.start()
        with asyncio.Runner(loop_factory=event_loop_factory(Settings(data_dir=where))) as runner:
            runner.run(run(url, args.calls))
            runner.run(pauses(url, args.calls))
    finally:
        server.stop()
        shutil.rmtree(where, ignore_errors=True)


if __name__ == "__main__":
    main()
