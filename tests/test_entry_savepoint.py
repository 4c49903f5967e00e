"""Each entry's write of a batch runs in a savepoint (`catalog.entries.repo.savepoint`): a failure
undoes that entry's write only and the transaction goes on; a PostgreSQL error comes out as a
catalog error (400 "the entry could not be written"), except one that says the database is
unavailable, which fails the whole transaction as it is."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from catalog.db import create_pool
from catalog.entries import repo
from catalog.errors import AlreadyExists, InvalidParameter, is_unavailable

FIELDS = repo.Fields(contents="text", description=None, source_type=None)


@pytest.fixture
async def pool(fresh_database_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(fresh_database_url, min_size=1, max_size=4)
    try:
        yield p
    finally:
        await p.close()


@pytest.fixture
async def store(pool: asyncpg.Pool) -> str:
    return str(
        await pool.fetchval(
            "INSERT INTO memory_stores (schema_id, name, owner, created_by, updated_by) "
            "SELECT id, 'savepoints', 'admin', 'admin', 'admin' FROM schemas LIMIT 1 RETURNING id"
        )
    )


def key(store: str, path: str) -> repo.Key:
    return repo.Key(store_id=store, scope="u", session_id="", path=path)


async def paths(pool: asyncpg.Pool, store: str) -> list[str]:
    rows = await pool.fetch("SELECT path FROM entries WHERE store_id = $1 ORDER BY path", store)
    return [row["path"] for row in rows]


async def test_a_postgres_error_undoes_only_its_entry_and_is_a_catalog_error(pool, store):
    async with pool.acquire() as conn, conn.transaction():
        await repo.upsert_overwrite(conn, key(store, "/before.md"), FIELDS, "admin")
        with pytest.raises(InvalidParameter, match="the entry could not be written") as failed:
            async with repo.savepoint(conn):
                await repo.upsert_overwrite(conn, key(store, "/undone.md"), FIELDS, "admin")
                await conn.execute("SELECT 1 / 0")
        assert failed.value.error_code == "INVALID_PARAMETER_VALUE"
        assert isinstance(failed.value.__cause__, asyncpg.DivisionByZeroError)
        async with repo.savepoint(conn):  # the transaction goes on
            await repo.upsert_overwrite(conn, key(store, "/after.md"), FIELDS, "admin")
    assert await paths(pool, store) == ["/after.md", "/before.md"]


async def test_a_catalog_error_undoes_its_entry_and_comes_out_as_it_is(pool, store):
    async with pool.acquire() as conn, conn.transaction():
        with pytest.raises(AlreadyExists, match="taken"):
            async with repo.savepoint(conn):
                await repo.upsert_overwrite(conn, key(store, "/undone.md"), FIELDS, "admin")
                raise AlreadyExists("taken")
        async with repo.savepoint(conn):
            await repo.upsert_overwrite(conn, key(store, "/after.md"), FIELDS, "admin")
    assert await paths(pool, store) == ["/after.md"]


async def test_an_unavailable_database_fails_the_whole_transaction(pool, store):
    """A PostgreSQL error that says the database cannot do the work (here: out of resources, as a
    full disk says) is not one entry's failure: it comes out as it is (503), and nothing of the
    transaction is kept."""
    with pytest.raises(asyncpg.InsufficientResourcesError) as failed:
        async with pool.acquire() as conn, conn.transaction():
            await repo.upsert_overwrite(conn, key(store, "/before.md"), FIELDS, "admin")
            async with repo.savepoint(conn):
                await conn.execute(
                    "DO $$ BEGIN RAISE EXCEPTION 'no space left' "
                    "USING ERRCODE = 'insufficient_resources'; END $$"
                )
    assert is_unavailable(failed.value)
    assert await paths(pool, store) == []
