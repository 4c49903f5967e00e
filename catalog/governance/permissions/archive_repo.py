"""What a store's archive (`catalog.backup`) holds of its grants: read as they are (grantor and
time included) inside the export's snapshot, and written back as they were by an import."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg

KINDS = ("grant",)


async def rows(conn: asyncpg.Connection, kind: str, store_id: str, scope: str | None) -> AsyncIterator[Any]:
    """The store's grants, by principal and privilege (its definition: an export limited to a
    scope holds them all)."""
    assert kind == "grant", kind
    for row in await conn.fetch(
        "SELECT principal, privilege, granted_by, granted_at, scopes FROM grants "
        "WHERE securable_id = $1 ORDER BY principal, privilege",
        store_id,
    ):
        yield row


async def restore(
    conn: asyncpg.Connection, store_id: str, grants: Sequence[tuple[str, str, str, Any, list[str] | None]]
) -> None:
    """(principal, privilege, granted_by, granted_at, scope patterns or None); a grant the store
    has already is kept."""
    await conn.executemany(
        "INSERT INTO grants "
        "(securable_type, securable_id, principal, privilege, granted_by, granted_at, scopes) "
        "VALUES ('MEMORY_STORE', $1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        [(store_id, *grant) for grant in grants],
    )
