"""SQL for entry provenance edges and their transitive walk."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TypeAlias

import asyncpg
import msgspec

Conn: TypeAlias = asyncpg.Connection | asyncpg.Pool

_STORE_NAME = (
    "(SELECT c.name || '.' || s.name || '.' || m.name FROM memory_stores m "
    "JOIN schemas s ON s.id = m.schema_id JOIN catalogs c ON c.id = s.catalog_id WHERE m.id = {col})"
)


class EntryRef(msgspec.Struct, frozen=True, kw_only=True):
    """An entry at one end of an edge: its id and key, kept in the edge in case it is deleted."""

    id: str
    store_id: str
    scope: str
    session_id: str  # '' for none
    path: str


async def add_edges(conn: Conn, target: EntryRef, sources: Sequence[EntryRef], by: str) -> None:
    await conn.executemany(
        "INSERT INTO entry_lineage (target_entry_id, target_store_id, target_scope, target_session_id, "
        "target_path, source_entry_id, source_store_id, source_scope, source_session_id, source_path, "
        "created_by) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) ON CONFLICT DO NOTHING",
        [
            (
                target.id,
                target.store_id,
                target.scope,
                target.session_id,
                target.path,
                s.id,
                s.store_id,
                s.scope,
                s.session_id,
                s.path,
                by,
            )
            for s in sources
        ],
    )


async def entry_edges(
    conn: Conn, entry_ids: Sequence[str], upstream: bool, depth: int
) -> list[asyncpg.Record]:
    """Edges reachable from the entries, up to `depth` hops, with store names and whether each
    end still exists."""
    start, follow = (
        ("target_entry_id", "source_entry_id") if upstream else ("source_entry_id", "target_entry_id")
    )
    return await conn.fetch(
        f"""
        WITH RECURSIVE walk AS (
            SELECT l.*, 1 AS depth FROM entry_lineage l WHERE l.{start} = ANY($1::uuid[])
            UNION
            SELECT l.*, w.depth + 1 FROM entry_lineage l JOIN walk w ON l.{start} = w.{follow}
            WHERE w.depth < $2
        )
        SELECT DISTINCT ON (target_entry_id, source_entry_id) *,
               {_STORE_NAME.format(col="source_store_id")} AS source_store,
               {_STORE_NAME.format(col="target_store_id")} AS target_store,
               EXISTS (SELECT 1 FROM entries e WHERE e.id = walk.source_entry_id) AS source_exists,
               EXISTS (SELECT 1 FROM entries e WHERE e.id = walk.target_entry_id) AS target_exists
        FROM walk ORDER BY target_entry_id, source_entry_id, depth
        """,
        list(entry_ids),
        depth,
    )


async def store_entry_ids(conn: Conn, store_id: str, upstream: bool) -> list[str]:
    """Entries of a store that have lineage edges in the direction asked (live or deleted)."""
    column, store_column = (
        ("target_entry_id", "target_store_id") if upstream else ("source_entry_id", "source_store_id")
    )
    rows = await conn.fetch(
        f"SELECT DISTINCT {column} FROM entry_lineage WHERE {store_column} = $1", store_id
    )
    return [str(r[0]) for r in rows]


async def entry_id(conn: Conn, store_id: str, scope: str, session_id: str, path: str) -> str | None:
    """The id of the entry at a key now (edges are walked by id)."""
    value = await conn.fetchval(
        "SELECT id FROM entries WHERE store_id = $1 AND scope = $2 AND session_id = $3 AND path = $4",
        store_id,
        scope,
        session_id,
        path,
    )
    return str(value) if value is not None else None


async def request_lineage(
    pool: asyncpg.Pool, *, start: datetime | None, end: datetime | None, limit: int
) -> list[asyncpg.Record]:
    """Answered entry requests and the store each read or wrote (as `system.lineage`), oldest first."""
    return await pool.fetch(
        "SELECT seq, event_id, event_time, request_id, principal, on_behalf_of, action_name, "
        "securable_full_name AS memory_store, result_count AS entry_count, "
        "CASE WHEN privilege = 'WRITE_MEMORY_STORE' THEN 'write' ELSE 'read' END AS direction "
        "FROM audit_events WHERE securable_type = 'MEMORY_STORE' AND action_name LIKE 'entries.%' "
        "AND decision = 'allow' AND status_code = 200 "
        "AND ($1::timestamptz IS NULL OR event_time >= $1) AND ($2::timestamptz IS NULL OR event_time < $2) "
        "ORDER BY seq LIMIT $3",
        start,
        end,
        limit,
    )
