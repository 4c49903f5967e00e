"""SQL for sessions and their items. The only module of this slice that talks to PostgreSQL.

Invariants:
- a session's items are ordered by `position`; an append takes the session's row lock (SELECT ...
  FOR UPDATE), reads `next_position`, inserts every item in one statement and bumps the counter,
  so concurrent appends never interleave, lose or reorder an item;
- a pop deletes the last item under the same lock, so a pop racing an append removes either the
  last item before the append or the last one after it, never one in the middle;
- item data is stored as the JSON text sent (jsonb) and answered as stored JSON, never re-built;
- every statement names the session's store: the tables are keyed (and distributed) by store
  (catalog/db/sharding.py), a session's row by (store, id) and its items by (store, session, position).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

import asyncpg

from catalog.errors import AlreadyExists

Conn: TypeAlias = asyncpg.Connection | asyncpg.Pool

_MS = "(extract(epoch FROM {col}) * 1000)::bigint"


@dataclass(frozen=True)
class SessionRow:
    id: str  # the row's uuid (items refer to it, with the store)
    store_id: str  # the session store
    session_id: str
    actor_id: str
    parent_session_id: str | None
    root_session_id: str
    metadata: dict[str, str]
    created_at: int
    updated_at: int
    last_activity_at: int
    created_us: int = 0  # the create time in epoch microseconds: the key of the sessions' list


@dataclass(frozen=True)
class ItemRow:
    item_id: str
    position: int
    data: str  # JSON text
    created_at: int


_SESSION_COLUMNS = (
    "id, store_id::text AS store_id, session_id, actor_id, parent_session_id, root_session_id, metadata, "
    f"{_MS.format(col='created_at')} AS created_at, {_MS.format(col='updated_at')} AS updated_at, "
    f"{_MS.format(col='last_activity_at')} AS last_activity_at"
)
_ITEM_COLUMNS = f"item_id, position, data::text AS data, {_MS.format(col='created_at')} AS created_at"


def _session(row: asyncpg.Record) -> SessionRow:
    return SessionRow(
        id=str(row["id"]),
        store_id=row["store_id"],
        session_id=row["session_id"],
        actor_id=row["actor_id"],
        parent_session_id=row["parent_session_id"],
        root_session_id=row["root_session_id"],
        metadata=dict(row["metadata"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        last_activity_at=row["last_activity_at"],
        created_us=row.get("created_us", 0),
    )


def _item(row: asyncpg.Record) -> ItemRow:
    return ItemRow(
        item_id=str(row["item_id"]),
        position=row["position"],
        data=row["data"],
        created_at=row["created_at"],
    )


# --- sessions ------------------------------------------------------------------------------------


async def insert_session(
    conn: Conn,
    store_id: str,
    *,
    session_id: str,
    actor_id: str,
    parent_session_id: str | None,
    root_session_id: str,
    metadata: dict[str, str],
) -> SessionRow:
    try:
        row = await conn.fetchrow(
            "INSERT INTO agent_sessions (store_id, session_id, actor_id, parent_session_id, "
            f"root_session_id, metadata) VALUES ($1, $2, $3, $4, $5, $6) RETURNING {_SESSION_COLUMNS}",
            store_id,
            session_id,
            actor_id,
            parent_session_id,
            root_session_id,
            metadata,
        )
    except asyncpg.UniqueViolationError as exc:
        raise AlreadyExists(f"session {session_id} already exists") from exc
    assert row is not None
    return _session(row)


async def get_session(conn: Conn, store_id: str, session_id: str, *, lock: bool = False) -> SessionRow | None:
    """`lock=True` (inside a transaction): the session's row lock, which every change of its items
    takes first."""
    row = await conn.fetchrow(
        f"SELECT {_SESSION_COLUMNS} FROM agent_sessions WHERE store_id = $1 AND session_id = $2"
        + (" FOR UPDATE" if lock else ""),
        store_id,
        session_id,
    )
    return _session(row) if row else None


async def list_sessions(
    conn: Conn,
    store_id: str,
    *,
    descending: bool,
    after: tuple[int, str] | None,
    limit: int,
    actor_id: str | None,
    root_session_id: str | None,
    parent_session_id: str | None,
) -> list[SessionRow]:
    """A page of sessions by (create time, session id), after the key `after` (epoch µs, id)."""
    op, order = ("<", "DESC") if descending else (">", "ASC")
    rows = await conn.fetch(
        f"SELECT {_SESSION_COLUMNS}, (extract(epoch FROM created_at) * 1000000)::bigint AS created_us "
        "FROM agent_sessions WHERE store_id = $1 "
        "AND ($2::text IS NULL OR actor_id = $2) AND ($3::text IS NULL OR root_session_id = $3) "
        "AND ($4::text IS NULL OR parent_session_id = $4) "
        f"AND ($5::bigint IS NULL OR ((extract(epoch FROM created_at) * 1000000)::bigint, session_id) {op} "
        "($5::bigint, $6::text)) "
        f"ORDER BY created_at {order}, session_id {order} LIMIT $7",
        store_id,
        actor_id,
        root_session_id,
        parent_session_id,
        after[0] if after else None,
        after[1] if after else None,
        limit,
    )
    return [_session(row) for row in rows]


async def update_metadata(conn: Conn, session: SessionRow, metadata: dict[str, str]) -> SessionRow | None:
    row = await conn.fetchrow(
        "UPDATE agent_sessions SET metadata = $3, updated_at = clock_timestamp() "
        f"WHERE store_id = $1 AND id = $2 RETURNING {_SESSION_COLUMNS}",
        session.store_id,
        session.id,
        metadata,
    )
    return _session(row) if row else None


async def delete_session(conn: Conn, session: SessionRow) -> bool:
    status: str = await conn.execute(
        "DELETE FROM agent_sessions WHERE store_id = $1 AND id = $2", session.store_id, session.id
    )
    return status.endswith(" 1")


# --- items (every change under the session's row lock: see the module's invariants) ------------


async def append(conn: asyncpg.Connection, session: SessionRow, data: list[str]) -> list[ItemRow]:
    """Append `data` (JSON texts) in order; the caller holds the session's row lock."""
    start = await conn.fetchval(
        "UPDATE agent_sessions SET next_position = next_position + $2, "
        "last_activity_at = clock_timestamp() WHERE store_id = $3 AND id = $1 RETURNING next_position - $2",
        session.id,
        len(data),
        session.store_id,
    )
    rows = await conn.fetch(
        "INSERT INTO session_items (store_id, session, position, data) "
        "SELECT $4, $1, $2 + n - 1, d::jsonb FROM unnest($3::text[]) WITH ORDINALITY AS t(d, n) "
        f"ORDER BY n RETURNING {_ITEM_COLUMNS}",
        session.id,
        start,
        data,
        session.store_id,
    )
    return sorted((_item(row) for row in rows), key=lambda item: item.position)


async def pop(conn: asyncpg.Connection, session: SessionRow) -> ItemRow | None:
    """Remove the last item; the caller holds the session's row lock."""
    row = await conn.fetchrow(
        "DELETE FROM session_items WHERE store_id = $2 AND session = $1 AND position = "
        "(SELECT max(position) FROM session_items WHERE store_id = $2 AND session = $1) "
        f"RETURNING {_ITEM_COLUMNS}",
        session.id,
        session.store_id,
    )
    if row is not None:
        await _touch(conn, session)
    return _item(row) if row else None


async def clear(conn: asyncpg.Connection, session: SessionRow) -> int:
    status: str = await conn.execute(
        "DELETE FROM session_items WHERE store_id = $1 AND session = $2", session.store_id, session.id
    )
    await _touch(conn, session)
    return int(status.split()[-1])


async def _touch(conn: asyncpg.Connection, session: SessionRow) -> None:
    await conn.execute(
        "UPDATE agent_sessions SET last_activity_at = clock_timestamp() WHERE store_id = $1 AND id = $2",
        session.store_id,
        session.id,
    )


async def item_position(conn: Conn, session: SessionRow, item_id: str) -> int | None:
    value = await conn.fetchval(
        "SELECT position FROM session_items WHERE store_id = $1 AND session = $2 AND item_id = $3::uuid",
        session.store_id,
        session.id,
        item_id,
    )
    return None if value is None else int(value)


async def copy_items(
    conn: asyncpg.Connection, source: SessionRow, target: SessionRow, up_to: int | None
) -> int:
    """Copy the source's items (up to and including position `up_to`, or all) into the new session
    `target` (of the same store), in order, under new item ids; the caller holds the target's row
    lock."""
    assert source.store_id == target.store_id  # a fork stays in its store
    status: str = await conn.execute(
        "INSERT INTO session_items (store_id, session, position, data, created_at) "
        "SELECT store_id, $2, row_number() OVER (ORDER BY position) - 1, data, created_at FROM session_items "
        "WHERE store_id = $4 AND session = $1 AND ($3::bigint IS NULL OR position <= $3)",
        source.id,
        target.id,
        up_to,
        source.store_id,
    )
    copied = int(status.split()[-1])
    await conn.execute(
        "UPDATE agent_sessions SET next_position = $3 WHERE store_id = $1 AND id = $2",
        target.store_id,
        target.id,
        copied,
    )
    return copied


async def list_items(
    conn: Conn, session: SessionRow, *, descending: bool, after: int | None, limit: int
) -> list[ItemRow]:
    op, order = ("<", "DESC") if descending else (">", "ASC")
    rows = await conn.fetch(
        f"SELECT {_ITEM_COLUMNS} FROM session_items WHERE store_id = $4 AND session = $1 "
        f"AND ($2::bigint IS NULL OR position {op} $2) ORDER BY position {order} LIMIT $3",
        session.id,
        after,
        limit,
        session.store_id,
    )
    return [_item(row) for row in rows]


async def erase_scope(
    conn: asyncpg.Connection, store_id: str | None, scope: str, *, subject: bool = False
) -> int:
    """Delete an actor's sessions (with their items) from one store, or from every session store
    (`store_id` None) not under legal hold; how many. An actor id is a scope: this is how
    `catalog.erasure` erases a scope's sessions."""
    status: str = await conn.execute(
        "DELETE FROM agent_sessions WHERE (actor_id = $2 OR ($3 AND starts_with(actor_id, $2 || ':'))) "
        "AND ($1::uuid IS NULL OR store_id = $1::uuid) "
        "AND store_id NOT IN (SELECT id FROM memory_stores WHERE legal_hold)",
        store_id,
        scope,
        subject,
    )
    return int(status.split()[-1])
