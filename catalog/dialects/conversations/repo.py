"""SQL for conversations and their items.

Items are numbered per conversation (`position`); an append locks the conversation's row, reads
its `last_position`, inserts its items after it in one statement and moves `last_position` on, in
the caller's transaction: concurrent appends to one conversation run one after the other, so none
is lost and each request's items stay together and in the order sent.

A conversation is named by its id alone (the OpenAI API), and its rows are keyed by its store
(the tables are distributed by store: catalog/db/sharding.py). `conversation_stores` tells the
store of an id (`find`), written and deleted with the conversation; every other statement names
the store."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, TypeAlias

import asyncpg
import msgspec

from catalog.dialects.conversations.items import Item
from catalog.errors import AlreadyExists

Conn: TypeAlias = asyncpg.Connection | asyncpg.Pool


class ConversationRow(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    store_id: str
    store_name: str  # catalog.schema.store, as it is now
    scope: str
    scope_kind: str
    metadata: dict[str, str]
    created_at: int  # epoch seconds


_COLUMNS = (
    "v.id, v.store_id::text AS store_id, "
    "c.name || '.' || s.name || '.' || m.name AS store_name, v.scope, v.scope_kind, "
    "v.metadata::text AS metadata, extract(epoch FROM v.created_at)::bigint AS created_at"
)
_FROM = (
    "FROM conversations v JOIN memory_stores m ON m.id = v.store_id "
    "JOIN schemas s ON s.id = m.schema_id JOIN catalogs c ON c.id = s.catalog_id"
)


def _row(record: asyncpg.Record | None) -> ConversationRow | None:
    if record is None:
        return None
    values = dict(record)
    values["metadata"] = json.loads(values["metadata"])
    return ConversationRow(**values)


async def find(conn: Conn, conversation_id: str) -> ConversationRow | None:
    """The conversation with this id, in whichever store it is."""
    store_id = await conn.fetchval(
        "SELECT store_id::text FROM conversation_stores WHERE conversation_id = $1", conversation_id
    )
    return None if store_id is None else await get(conn, store_id, conversation_id)


async def get(conn: Conn, store_id: str, conversation_id: str) -> ConversationRow | None:
    return _row(
        await conn.fetchrow(
            f"SELECT {_COLUMNS} {_FROM} WHERE v.store_id = $1 AND v.id = $2", store_id, conversation_id
        )
    )


async def insert(
    conn: Conn, conversation_id: str, store_id: str, scope: str, kind: str, metadata: dict[str, str], by: str
) -> None:
    """Insert the conversation and its id's store (in the caller's transaction)."""
    await conn.execute(
        "INSERT INTO conversations (id, store_id, scope, scope_kind, metadata, created_by) "
        "VALUES ($1, $2, $3, $4, $5::jsonb, $6)",
        conversation_id,
        store_id,
        scope,
        kind,
        metadata,
        by,
    )
    await conn.execute(
        "INSERT INTO conversation_stores (conversation_id, store_id) VALUES ($1, $2)",
        conversation_id,
        store_id,
    )


async def set_metadata(conn: Conn, store_id: str, conversation_id: str, metadata: dict[str, str]) -> bool:
    status: str = await conn.execute(
        "UPDATE conversations SET metadata = $3::jsonb, updated_at = clock_timestamp() "
        "WHERE store_id = $1 AND id = $2",
        store_id,
        conversation_id,
        metadata,
    )
    return status.endswith(" 1")


async def delete(conn: Conn, store_id: str, conversation_id: str) -> bool:
    """Delete the conversation (its items go with it) and its id's store (in the caller's
    transaction)."""
    status: str = await conn.execute(
        "DELETE FROM conversations WHERE store_id = $1 AND id = $2", store_id, conversation_id
    )
    await conn.execute("DELETE FROM conversation_stores WHERE conversation_id = $1", conversation_id)
    return status.endswith(" 1")


async def append(
    conn: asyncpg.Connection, store_id: str, conversation_id: str, items: Sequence[Item], by: str
) -> bool:
    """Append `items` in order (inside the caller's transaction); False if the conversation is gone.
    An item id already in the conversation is `AlreadyExists` (the transaction is then aborted)."""
    last = await conn.fetchval(
        "SELECT last_position FROM conversations WHERE store_id = $1 AND id = $2 FOR UPDATE",
        store_id,
        conversation_id,
    )
    if last is None:
        return False
    if not items:
        return True
    try:
        await conn.execute(
            "INSERT INTO conversation_items "
            "(store_id, conversation_id, position, id, type, item, text, created_by) "
            "SELECT $8, $1, $2 + n, id, type, item::jsonb, text, $7 "
            "FROM unnest($3::text[], $4::text[], $5::text[], $6::text[]) "
            "WITH ORDINALITY AS u(id, type, item, text, n)",
            conversation_id,
            last,
            [i.id for i in items],
            [i.type for i in items],
            [msgspec.json.encode(i.item).decode() for i in items],
            [i.text for i in items],
            by,
            store_id,
        )
    except asyncpg.UniqueViolationError:
        raise AlreadyExists(
            f"an item with one of these ids is already in conversation {conversation_id}"
        ) from None
    await conn.execute(
        "UPDATE conversations SET last_position = $3, updated_at = clock_timestamp() "
        "WHERE store_id = $1 AND id = $2",
        store_id,
        conversation_id,
        last + len(items),
    )
    return True


def _item(text: str) -> dict[str, Any]:
    item: dict[str, Any] = json.loads(text)
    return item


async def get_item(conn: Conn, store_id: str, conversation_id: str, item_id: str) -> dict[str, Any] | None:
    text = await conn.fetchval(
        "SELECT item::text FROM conversation_items WHERE store_id = $1 AND conversation_id = $2 AND id = $3",
        store_id,
        conversation_id,
        item_id,
    )
    return None if text is None else _item(text)


async def position(conn: Conn, store_id: str, conversation_id: str, item_id: str) -> int | None:
    value = await conn.fetchval(
        "SELECT position FROM conversation_items WHERE store_id = $1 AND conversation_id = $2 AND id = $3",
        store_id,
        conversation_id,
        item_id,
    )
    return None if value is None else int(value)


async def list_items(
    conn: Conn, store_id: str, conversation_id: str, after: int | None, limit: int, descending: bool
) -> list[dict[str, Any]]:
    """Up to `limit` items in position order (`descending`: newest first), after position `after`."""
    compare, order = ("<", "DESC") if descending else (">", "ASC")
    rows = await conn.fetch(
        "SELECT item::text AS item FROM conversation_items WHERE store_id = $4 AND conversation_id = $1 "
        f"AND ($2::bigint IS NULL OR position {compare} $2) ORDER BY position {order} LIMIT $3",
        conversation_id,
        after,
        limit,
        store_id,
    )
    return [_item(row["item"]) for row in rows]


async def delete_item(conn: Conn, store_id: str, conversation_id: str, item_id: str) -> bool:
    status: str = await conn.execute(
        "DELETE FROM conversation_items WHERE store_id = $1 AND conversation_id = $2 AND id = $3",
        store_id,
        conversation_id,
        item_id,
    )
    return status.endswith(" 1")


async def erase_scope(
    conn: asyncpg.Connection, store_id: str | None, scope: str, *, subject: bool = False
) -> int:
    """Delete a scope's conversations (with their items) from one store, or from every store
    (`store_id` None) not under legal hold; how many. Run by `catalog.erasure`."""
    gone = await conn.fetch(
        "DELETE FROM conversations WHERE (scope = $2 OR ($3 AND starts_with(scope, $2 || ':'))) "
        "AND ($1::uuid IS NULL OR store_id = $1::uuid) "
        "AND store_id NOT IN (SELECT id FROM memory_stores WHERE legal_hold) RETURNING id",
        store_id,
        scope,
        subject,
    )
    ids = [row["id"] for row in gone]
    if ids:
        await conn.execute("DELETE FROM conversation_stores WHERE conversation_id = ANY($1::text[])", ids)
    return len(ids)
