"""SQL for entry provenance edges (entry to entry, and transcript to entry) and their transitive
walk. Transcript edges are checked against `memory_stores`, and shown deleted or not by reading
`conversations` and `agent_sessions`: by SQL only, lineage imports neither slice.

An edge belongs to the store of its target entry (`target_store_id`: the tables' distribution
column, catalog/db/sharding.py): it is written with that entry, and an entry or thread at either
end is looked up by its store and id. Walks and a store's downstream edges cross stores by nature
(an entry may be derived from entries of any store): they are governance reads, not the hot path."""

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


class TranscriptRef(msgspec.Struct, frozen=True, kw_only=True):
    """A conversation or a session (and some of its items) at the source end of an edge."""

    kind: str  # conversation | session
    store_id: str  # the conversation's memory store, the session store
    store_name: str  # its full name as the change gave it: checked against the id, not kept
    scope: str  # the conversation's scope, the session's actor
    thread_id: str  # the conversation id, the session id
    item_ids: tuple[str, ...]  # () for the whole thread


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


async def add_origin(conn: Conn, target: EntryRef, source: TranscriptRef, by: str) -> None:
    """One edge per entry and thread: a later change from the thread adds its items to the edge's
    (new ones last); an empty list stands for the whole thread and absorbs any other."""
    await conn.execute(
        "INSERT INTO transcript_lineage AS l (target_entry_id, target_store_id, target_scope, "
        "target_session_id, target_path, source_kind, source_store_id, source_scope, source_thread_id, "
        "source_item_ids, created_by, updated_by) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::text[], $11, $11) "
        "ON CONFLICT (target_store_id, target_entry_id, source_kind, source_store_id, source_thread_id) "
        "DO UPDATE SET "
        "source_item_ids = CASE "
        "WHEN cardinality(l.source_item_ids) = 0 OR cardinality(EXCLUDED.source_item_ids) = 0 "
        "THEN '{}'::text[] "
        "ELSE l.source_item_ids || ARRAY(SELECT i FROM unnest(EXCLUDED.source_item_ids) "
        "WITH ORDINALITY AS u (i, n) WHERE i <> ALL (l.source_item_ids) ORDER BY n) END, "
        "updated_at = now(), updated_by = EXCLUDED.updated_by",
        target.id,
        target.store_id,
        target.scope,
        target.session_id,
        target.path,
        source.kind,
        source.store_id,
        source.scope,
        source.thread_id,
        list(source.item_ids),
        by,
    )


async def store_kind(conn: Conn, store_id: str) -> tuple[str, str] | None:
    """The kind (`memory`, `session`) and full name of the store with this id, if it exists."""
    row = await conn.fetchrow(
        f"SELECT kind, {_STORE_NAME.format(col='$1::uuid')} AS name FROM memory_stores WHERE id = $1::uuid",
        store_id,
    )
    return (row["kind"], row["name"]) if row is not None else None


_ORIGIN_COLUMNS = f"""
    l.*,
    {_STORE_NAME.format(col="l.source_store_id")} AS source_store,
    {_STORE_NAME.format(col="l.target_store_id")} AS target_store,
    CASE l.source_kind
        WHEN 'conversation' THEN EXISTS (
            SELECT 1 FROM conversations c WHERE c.id = l.source_thread_id AND c.store_id = l.source_store_id)
        ELSE EXISTS (
            SELECT 1 FROM agent_sessions a
            WHERE a.store_id = l.source_store_id AND a.session_id = l.source_thread_id)
    END AS source_exists,
    EXISTS (
        SELECT 1 FROM entries e WHERE e.store_id = l.target_store_id AND e.id = l.target_entry_id
    ) AS target_exists
"""


async def origins_of(conn: Conn, entry_ids: Sequence[str]) -> list[asyncpg.Record]:
    """The transcript edges into these entries, with store names and whether each end exists."""
    return await conn.fetch(
        f"SELECT {_ORIGIN_COLUMNS} FROM transcript_lineage l WHERE l.target_entry_id = ANY($1::uuid[])",
        list(entry_ids),
    )


async def origins_from_store(conn: Conn, store_id: str) -> list[asyncpg.Record]:
    """The transcript edges out of the conversations (or sessions) of a store."""
    return await conn.fetch(
        f"SELECT {_ORIGIN_COLUMNS} FROM transcript_lineage l WHERE l.source_store_id = $1", store_id
    )


async def erase_scope(conn: Conn, store_id: str | None, scope: str, *, subject: bool = False) -> int:
    """Delete the edges with the scope at either end, in one store (None: in every store): a
    scope's erasure leaves no key of it in lineage, except at an end in a store under legal hold
    (whose entries erasure keeps, with where they came from). How many edges went."""
    count = 0
    for table in ("entry_lineage", "transcript_lineage"):
        status = await conn.execute(
            f"DELETE FROM {table} WHERE "
            "((target_scope = $2 OR ($3 AND starts_with(target_scope, $2 || ':'))) "
            " AND ($1::uuid IS NULL OR target_store_id = $1::uuid) "
            " AND target_store_id NOT IN (SELECT id FROM memory_stores WHERE legal_hold)) "
            "OR ((source_scope = $2 OR ($3 AND starts_with(source_scope, $2 || ':'))) "
            " AND ($1::uuid IS NULL OR source_store_id = $1::uuid) "
            " AND source_store_id NOT IN (SELECT id FROM memory_stores WHERE legal_hold))",
            store_id,
            scope,
            subject,
        )
        count += int(status.split()[-1])
    return count


async def entry_edges(
    conn: Conn, entry_ids: Sequence[str], upstream: bool, depth: int
) -> list[asyncpg.Record]:
    """Edges reachable from the entries, up to `depth` hops, with store names and whether each
    end still exists."""
    start, follow = ("target", "source") if upstream else ("source", "target")
    return await conn.fetch(
        f"""
        WITH RECURSIVE walk AS (
            SELECT l.*, 1 AS depth FROM entry_lineage l WHERE l.{start}_entry_id = ANY($1::uuid[])
            UNION
            SELECT l.*, w.depth + 1 FROM entry_lineage l
            JOIN walk w
                ON l.{start}_store_id = w.{follow}_store_id AND l.{start}_entry_id = w.{follow}_entry_id
            WHERE w.depth < $2
        )
        SELECT DISTINCT ON (target_entry_id, source_entry_id) *,
               {_STORE_NAME.format(col="source_store_id")} AS source_store,
               {_STORE_NAME.format(col="target_store_id")} AS target_store,
               EXISTS (SELECT 1 FROM entries e
                       WHERE e.store_id = walk.source_store_id AND e.id = walk.source_entry_id)
                   AS source_exists,
               EXISTS (SELECT 1 FROM entries e
                       WHERE e.store_id = walk.target_store_id AND e.id = walk.target_entry_id)
                   AS target_exists
        FROM walk ORDER BY target_entry_id, source_entry_id, depth
        """,
        list(entry_ids),
        depth,
    )


async def store_entry_ids(conn: Conn, store_id: str, upstream: bool) -> list[str]:
    """Entries of a store that have lineage edges in the direction asked (live or deleted):
    upstream, an edge from another entry or from a transcript; downstream, an edge to an entry."""
    column, store_column = (
        ("target_entry_id", "target_store_id") if upstream else ("source_entry_id", "source_store_id")
    )
    origins = (
        " UNION SELECT target_entry_id FROM transcript_lineage WHERE target_store_id = $1" if upstream else ""
    )
    rows = await conn.fetch(
        f"SELECT DISTINCT {column} FROM entry_lineage WHERE {store_column} = $1{origins}", store_id
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
