"""What a store's archive (`catalog.backup`) holds of its conversations: the conversations and
their items as they are (ids, positions, times, authors), read in archive order inside the
export's snapshot, and written back as they were by an import (in its transaction; the
transcript trigger derives the searchable text of each message again)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg

from catalog.dialects.conversations.repo import Conn

BATCH = 500  # rows fetched per round trip of the export's cursor, and written per statement

# each statement takes the store's id as $1 and the scope an export is limited to (or NULL) as $2
_EXPORT: dict[str, str] = {
    "conversation": "SELECT id, scope, scope_kind, metadata, last_position, created_at, created_by, "
    "updated_at FROM conversations WHERE store_id = $1 AND ($2::text IS NULL OR scope = $2) ORDER BY id",
    "conversation_item": "SELECT i.conversation_id, i.position, i.id, i.type, i.item, i.text, "
    "i.created_at, i.created_by FROM conversation_items i "
    "JOIN conversations c ON c.store_id = i.store_id AND c.id = i.conversation_id "
    "WHERE i.store_id = $1 AND ($2::text IS NULL OR c.scope = $2) ORDER BY i.conversation_id, i.position",
}
KINDS = tuple(_EXPORT)


async def rows(conn: asyncpg.Connection, kind: str, store_id: str, scope: str | None) -> AsyncIterator[Any]:
    """The store's rows of one kind, in archive order (in the export's snapshot)."""
    async for row in conn.cursor(_EXPORT[kind], store_id, scope, prefetch=BATCH):
        yield row


async def held(conn: Conn, store_id: str) -> dict[str, int]:
    """How many conversations the store holds (nothing when none)."""
    count = int(await conn.fetchval("SELECT count(*) FROM conversations WHERE store_id = $1", store_id))
    return {"conversations": count} if count else {}


async def taken_ids(conn: Conn, ids: Sequence[str]) -> set[str]:
    """The conversation ids some store of this server already has (they are unique server-wide)."""
    rows_ = await conn.fetch(
        "SELECT conversation_id FROM conversation_stores WHERE conversation_id = ANY($1::text[])", list(ids)
    )
    return {row[0] for row in rows_}


async def restore(conn: asyncpg.Connection, store_id: str, rows_: Sequence[tuple[Any, ...]]) -> None:
    """(id, scope, scope_kind, metadata, last_position, created_at, created_by, updated_at), with
    each id's store (`conversation_stores`)."""
    await conn.executemany(
        "INSERT INTO conversations (id, store_id, scope, scope_kind, metadata, last_position, created_at, "
        "created_by, updated_at) VALUES ($1, $9, $2, $3, $4::jsonb, $5, $6, $7, $8)",
        [(*row, store_id) for row in rows_],
    )
    await conn.executemany(
        "INSERT INTO conversation_stores (conversation_id, store_id) VALUES ($1, $2)",
        [(row[0], store_id) for row in rows_],
    )


async def restore_items(conn: asyncpg.Connection, store_id: str, rows_: Sequence[tuple[Any, ...]]) -> None:
    """(conversation id, position, id, type, item JSON text, text, created_at, created_by), one
    statement per batch."""
    for start in range(0, len(rows_), BATCH):
        batch = rows_[start : start + BATCH]
        await conn.execute(
            "INSERT INTO conversation_items (store_id, conversation_id, position, id, type, item, text, "
            "created_at, created_by) "
            "SELECT $1, c, p, i, t, d::jsonb, x, a, b FROM unnest($2::text[], $3::bigint[], "
            "$4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[], $9::text[]) "
            "AS u (c, p, i, t, d, x, a, b)",
            store_id,
            *[[row[k] for row in batch] for k in range(8)],
        )
