"""What a store's archive (`catalog.backup`) holds of the store itself: its definition as a row
(kind, binding, hold and trust policy included), read inside the export's snapshot; and the lock
an import holds on it while it fills it. An import writes the definition through the
namespace's own functions (`catalog.governance.namespace.repo`: create, update, binding, TTL,
hold, policy)."""

from __future__ import annotations

import asyncpg

from catalog.governance.namespace.repo import Conn


async def definition(conn: Conn, store_id: str) -> asyncpg.Record | None:
    """The store's row as an archive defines it (kind included); None when it is gone."""
    return await conn.fetchrow(
        "SELECT name, kind, description, properties, owner, scope_binding, shared_scopes, legal_hold, "
        "default_ttl_seconds, trust_policy, created_at, created_by, updated_at, updated_by "
        "FROM memory_stores WHERE id = $1",
        store_id,
    )


async def kind(conn: Conn, store_id: str) -> str | None:
    """The store's kind (`memory` or `session`); None when it is gone."""
    value = await conn.fetchval("SELECT kind FROM memory_stores WHERE id = $1", store_id)
    return None if value is None else str(value)


async def lock(conn: asyncpg.Connection, store_id: str) -> None:
    """Lock the store's row until the caller's transaction ends (an import fills it alone)."""
    await conn.execute("SELECT 1 FROM memory_stores WHERE id = $1 FOR UPDATE", store_id)
