"""SQL for grants. Changes are logged to `policy_log` by triggers (sql/migrations/0003)."""

from __future__ import annotations

import asyncpg

from catalog.db import atomic
from catalog.governance.securables import Securable


async def list_grants(
    conn: asyncpg.Connection | asyncpg.Pool, securable_id: str, principal: str | None
) -> dict[str, list[str]]:
    rows = await conn.fetch(
        "SELECT principal, privilege FROM grants "
        "WHERE securable_id = $1 AND ($2::text IS NULL OR principal = $2) ORDER BY principal, privilege",
        securable_id,
        principal,
    )
    assignments: dict[str, list[str]] = {}
    for row in rows:
        assignments.setdefault(row["principal"], []).append(row["privilege"])
    return assignments


async def change_grants(
    conn: asyncpg.Connection,
    securable: Securable,
    *,
    add: list[tuple[str, str]],
    remove: list[tuple[str, str]],
    granted_by: str,
) -> None:
    """Apply every (principal, privilege) addition and removal in one transaction."""
    node = securable.node
    async with atomic(conn):
        if remove:
            await conn.executemany(
                "DELETE FROM grants WHERE securable_id = $1 AND principal = $2 AND privilege = $3",
                [(node.id, principal, privilege) for principal, privilege in remove],
            )
        if add:
            await conn.executemany(
                "INSERT INTO grants (securable_type, securable_id, principal, privilege, granted_by) "
                "VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                [
                    (securable.type.value, node.id, principal, privilege, granted_by)
                    for principal, privilege in add
                ],
            )
