"""SQL of large scopes' own vector indexes (`catalog.search.scope_index` decides which).

An index's name is made by the code (`scope_index.index_name`) or read from PostgreSQL's catalog;
statements that name an index, a store or a scope have PostgreSQL quote them (`format('%I')`,
`format('%L')`), since DDL takes no bound parameters. Every other value is bound.
"""

from __future__ import annotations

from typing import TypeAlias

import asyncpg

Conn: TypeAlias = asyncpg.Connection | asyncpg.Pool


async def index_ready(conn: Conn, name: str) -> bool:
    """Whether the index exists and may be used (a build still running or cut short may not)."""
    return bool(
        await conn.fetchval(
            "SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = $1 AND i.indisvalid AND i.indisready)",
            name,
        )
    )


async def try_lock(conn: asyncpg.Connection, key: int) -> bool:
    """Take the session-level advisory lock `key` if it is free."""
    return bool(await conn.fetchval("SELECT pg_try_advisory_lock($1)", key))


async def unlock(conn: asyncpg.Connection, key: int) -> None:
    await conn.execute("SELECT pg_advisory_unlock($1)", key)


async def largest_scopes(conn: Conn, at_least: int, limit: int) -> list[asyncpg.Record]:
    """(store_id, scope, n) of the `limit` largest scopes of at least `at_least` entries, largest
    first."""
    return await conn.fetch(
        "SELECT store_id::text, scope, count(*) AS n FROM entries GROUP BY store_id, scope "
        "HAVING count(*) >= $1 ORDER BY n DESC, store_id, scope LIMIT $2",
        at_least,
        limit,
    )


async def indexes_named(conn: Conn, prefix: str) -> dict[str, bool]:
    """The indexes whose name starts with `prefix`, each with whether it may be used."""
    rows = await conn.fetch(
        "SELECT c.relname, i.indisvalid AND i.indisready AS valid FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid WHERE starts_with(c.relname, $1)",
        prefix,
    )
    return {row["relname"]: row["valid"] for row in rows}


async def drop_index(conn: asyncpg.Connection, name: str) -> None:
    """Drop the index without blocking writes (outside a transaction)."""
    statement = await conn.fetchval("SELECT format('DROP INDEX CONCURRENTLY IF EXISTS %I', $1::text)", name)
    await conn.execute(statement)


async def set_build_memory(conn: asyncpg.Connection, memory: str) -> None:
    """maintenance_work_mem for this connection until `reset_build_memory`."""
    await conn.execute("SELECT set_config('maintenance_work_mem', $1, false)", memory)


async def reset_build_memory(conn: asyncpg.Connection) -> None:
    await conn.execute("RESET maintenance_work_mem")


async def build_index(conn: asyncpg.Connection, name: str, store_id: str, scope: str) -> None:
    """Build the scope's own HNSW index without blocking writes (outside a transaction)."""
    statement = await conn.fetchval(
        "SELECT format('CREATE INDEX CONCURRENTLY IF NOT EXISTS %I ON entries USING hnsw "
        "(embedding vector_ip_ops) WHERE store_id = %L::uuid AND scope = %L', $1::text, "
        "$2::text, $3::text)",
        name,
        store_id,
        scope,
    )
    await conn.execute(statement)
