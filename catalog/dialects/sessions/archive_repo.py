"""What a store's archive (`catalog.backup`) holds of its agent sessions: the sessions and their
items as they are (positions, times), read in archive order inside the export's snapshot, and
written back as they were by an import (in its transaction)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg

from catalog.dialects.sessions.repo import Conn

BATCH = 500  # rows fetched per round trip of the export's cursor, and written per statement

# each statement takes the store's id as $1 and the scope (an actor id) an export is limited to
# (or NULL) as $2
_EXPORT: dict[str, str] = {
    "session": "SELECT session_id, actor_id, parent_session_id, root_session_id, metadata, "
    "next_position, created_at, updated_at, last_activity_at FROM agent_sessions "
    "WHERE store_id = $1 AND ($2::text IS NULL OR actor_id = $2) ORDER BY created_at, session_id",
    "session_item": "SELECT s.session_id, i.position, i.item_id::text AS item_id, i.data, i.created_at "
    "FROM session_items i JOIN agent_sessions s ON s.store_id = i.store_id AND s.id = i.session "
    "WHERE i.store_id = $1 AND ($2::text IS NULL OR s.actor_id = $2) ORDER BY s.created_at, s.session_id, "
    "i.position",
}
KINDS = tuple(_EXPORT)


async def rows(conn: asyncpg.Connection, kind: str, store_id: str, scope: str | None) -> AsyncIterator[Any]:
    """The store's rows of one kind, in archive order (in the export's snapshot)."""
    async for row in conn.cursor(_EXPORT[kind], store_id, scope, prefetch=BATCH):
        yield row


async def held(conn: Conn, store_id: str) -> dict[str, int]:
    """How many sessions the store holds (nothing when none)."""
    count = int(await conn.fetchval("SELECT count(*) FROM agent_sessions WHERE store_id = $1", store_id))
    return {"sessions": count} if count else {}


async def restore(
    conn: asyncpg.Connection, store_id: str, rows_: Sequence[tuple[Any, ...]]
) -> dict[str, str]:
    """(session id, actor, parent, root, metadata, next_position, created_at, updated_at,
    last_activity_at); the row id of each session id."""
    ids: dict[str, str] = {}
    for row in rows_:
        ids[row[0]] = str(
            await conn.fetchval(
                "INSERT INTO agent_sessions (store_id, session_id, actor_id, parent_session_id, "
                "root_session_id, metadata, next_position, created_at, updated_at, last_activity_at) "
                "VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10) RETURNING id",
                store_id,
                *row,
            )
        )
    return ids


async def restore_items(conn: asyncpg.Connection, store_id: str, rows_: Sequence[tuple[Any, ...]]) -> None:
    """(session row id, position, item id, data JSON text, created_at), one statement per batch."""
    for start in range(0, len(rows_), BATCH):
        batch = rows_[start : start + BATCH]
        await conn.execute(
            "INSERT INTO session_items (store_id, session, position, item_id, data, created_at) "
            "SELECT $1, s, p, i, d::jsonb, a FROM unnest($2::uuid[], $3::bigint[], $4::uuid[], $5::text[], "
            "$6::timestamptz[]) AS u (s, p, i, d, a)",
            store_id,
            *[[row[k] for row in batch] for k in range(5)],
        )
