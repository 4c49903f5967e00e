"""SQL for grants. Changes are logged to `policy_log` by triggers (sql/migrations/0003)."""

from __future__ import annotations

import asyncpg

from catalog.governance.securables import Securable

Grant = tuple[str, list[str] | None]  # a privilege and its scope patterns (None: every scope)


async def list_grants(
    conn: asyncpg.Connection | asyncpg.Pool, securable_id: str, principal: str | None
) -> dict[str, list[Grant]]:
    rows = await conn.fetch(
        "SELECT principal, privilege, scopes FROM grants "
        "WHERE securable_id = $1 AND ($2::text IS NULL OR principal = $2) ORDER BY principal, privilege",
        securable_id,
        principal,
    )
    assignments: dict[str, list[Grant]] = {}
    for row in rows:
        assignments.setdefault(row["principal"], []).append((row["privilege"], row["scopes"]))
    return assignments


async def grants_for_update(
    conn: asyncpg.Connection, securable_id: str, principals: list[str]
) -> dict[tuple[str, str], list[str] | None]:
    """The grants of these principals on the securable, locked until the transaction ends:
    (principal, privilege) → scope patterns (None: every scope)."""
    rows = await conn.fetch(
        "SELECT principal, privilege, scopes FROM grants WHERE securable_id = $1 AND principal = ANY($2) "
        "FOR UPDATE",
        securable_id,
        principals,
    )
    return {(row["principal"], row["privilege"]): row["scopes"] for row in rows}


async def change_grants(
    conn: asyncpg.Connection,
    securable: Securable,
    *,
    put: list[tuple[str, str, list[str] | None]],
    delete: list[tuple[str, str]],
    granted_by: str,
) -> None:
    """Make each (principal, privilege) grant in `put` exist with its scope patterns (None: every
    scope), and remove those in `delete`, in the caller's transaction."""
    node = securable.node
    if delete:
        await conn.executemany(
            "DELETE FROM grants WHERE securable_id = $1 AND principal = $2 AND privilege = $3",
            [(node.id, principal, privilege) for principal, privilege in delete],
        )
    if put:
        await conn.executemany(
            "INSERT INTO grants (securable_type, securable_id, principal, privilege, granted_by, scopes) "
            "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (securable_id, principal, privilege) DO UPDATE "
            "SET scopes = EXCLUDED.scopes, granted_by = EXCLUDED.granted_by, granted_at = now() "
            "WHERE grants.scopes IS DISTINCT FROM EXCLUDED.scopes",
            [
                (securable.type.value, node.id, principal, privilege, granted_by, scopes)
                for principal, privilege, scopes in put
            ],
        )
