"""The database pool (`catalog.db.pool`): the common acquire and release done at once
(`LeanPool`), every other case left to asyncpg, and the pool behaving as asyncpg's own does in
each of them."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from catalog.db.pool import LEAN_RELEASES, LeanPool, create_pool


@pytest.fixture
def stock_calls(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """How often asyncpg's own acquire and release ran (the lean pool's slow paths)."""
    calls: Counter[str] = Counter()
    acquire, release = asyncpg.Pool._acquire, asyncpg.Pool.release  # type: ignore[attr-defined]

    async def counted_acquire(self: asyncpg.Pool, timeout: float | None) -> Any:  # noqa: ASYNC109
        calls["acquire"] += 1
        return await acquire(self, timeout)

    async def counted_release(self: asyncpg.Pool, connection: Any, *, timeout: float | None = None) -> None:  # noqa: ASYNC109
        calls["release"] += 1
        await release(self, connection, timeout=timeout)

    monkeypatch.setattr(asyncpg.Pool, "_acquire", counted_acquire)
    monkeypatch.setattr(asyncpg.Pool, "release", counted_release)
    return calls


def _with_pool(url: str, scenario: Callable[[asyncpg.Pool], Awaitable[Any]], **sizes: int) -> Any:
    async def run() -> Any:
        pool = await create_pool(url, **sizes)
        try:
            return await scenario(pool)
        finally:
            await pool.close()

    return asyncio.run(run())


def test_the_installed_asyncpg_gets_the_lean_pool(database_url):
    assert asyncpg.__version__.startswith(LEAN_RELEASES)  # else the lean pool is never used here

    async def kind(pool: asyncpg.Pool) -> str:
        return type(pool).__name__

    assert _with_pool(database_url, kind, min_size=1, max_size=2) == LeanPool.__name__


def test_statements_on_free_connections_take_neither_of_asyncpgs_paths(database_url, stock_calls):
    async def scenario(pool: asyncpg.Pool) -> tuple[list[int], int, int]:
        values = [await pool.fetchval("SELECT $1::int + 1", i) for i in range(20)]
        async with pool.acquire() as conn:
            values.append(await conn.fetchval("SELECT 100"))
        return values, pool.get_size(), pool.get_idle_size()

    values, size, idle = _with_pool(database_url, scenario, min_size=2, max_size=4)
    assert values == [i + 1 for i in range(20)] + [100]
    assert size == 2 and idle == 2  # no connection added, every one back in the pool
    assert stock_calls == Counter()


def test_a_connection_given_back_inside_a_transaction_is_rolled_back_by_asyncpg(database_url, stock_calls):
    async def scenario(pool: asyncpg.Pool) -> tuple[bool, object]:
        await pool.execute("CREATE TEMP TABLE IF NOT EXISTS t (n int)")  # the session's own table
        conn = await pool.acquire()
        await conn.execute("BEGIN; INSERT INTO t VALUES (1)")  # left open: not a managed transaction
        await pool.release(conn)
        async with pool.acquire() as again:  # the one connection, as it was given back
            return again.is_in_transaction(), await again.fetchval("SELECT count(*) FROM t")

    in_transaction, rows = _with_pool(database_url, scenario, min_size=1, max_size=1)
    assert not in_transaction and rows == 0  # asyncpg's reset rolled the insert back
    assert stock_calls["release"] == 1  # that release, and only it, was asyncpg's


def test_requests_beyond_the_pools_size_wait_for_a_connection(database_url, stock_calls):
    async def scenario(pool: asyncpg.Pool) -> tuple[list[int], int, int]:
        async def one(i: int) -> int:
            return int(await pool.fetchval("SELECT $1::int FROM pg_sleep(0.02)", i))

        values = await asyncio.gather(*(one(i) for i in range(12)))
        return list(values), pool.get_size(), pool.get_idle_size()

    values, size, idle = _with_pool(database_url, scenario, min_size=1, max_size=2)
    assert values == list(range(12))
    assert size == 2 and idle == 2  # grown to its most, never past it, all given back
    assert stock_calls["acquire"] >= 10  # those that found no free connection waited in asyncpg's


def test_a_cancelled_statement_gives_its_connection_back_through_asyncpg(database_url, stock_calls):
    async def scenario(pool: asyncpg.Pool) -> tuple[bool, int, int]:
        slow = asyncio.ensure_future(pool.fetchval("SELECT pg_sleep(30)"))
        await asyncio.sleep(0.3)
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        value = await asyncio.wait_for(pool.fetchval("SELECT 7"), 10)
        return slow.cancelled(), value, pool.get_idle_size()

    cancelled, value, idle = _with_pool(database_url, scenario, min_size=1, max_size=1)
    assert cancelled and value == 7 and idle == 1  # the only connection served again, not lost
    assert stock_calls["release"] >= 1


def test_expired_connections_are_replaced_and_a_closed_pool_refuses(database_url):
    async def scenario(pool: asyncpg.Pool) -> tuple[int, int, str]:
        before = await pool.fetchval("SELECT pg_backend_pid()")
        await pool.expire_connections()
        after = await pool.fetchval("SELECT pg_backend_pid()")
        await pool.close()
        try:
            await pool.fetchval("SELECT 1")
        except asyncpg.InterfaceError as exc:
            refused = str(exc)
        return before, after, refused

    before, after, refused = _with_pool(database_url, scenario, min_size=1, max_size=1)
    assert before != after  # a new connection, as asyncpg's acquire makes for an expired one
    assert "clos" in refused
