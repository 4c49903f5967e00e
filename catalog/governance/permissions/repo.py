"""SQL for grants. Changes are logged to `policy_log` by triggers (sql/migrations/0003); erasing a
data subject also takes its scope patterns out of the grants' history there
(`forget_logged_patterns`)."""

from __future__ import annotations

import asyncpg

from catalog.access.securables import Securable
from catalog.db.locks import POLICY_LOG

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


# --- erasing a data subject ------------------------------------------------------------------------

# a pattern is the subject's when the subject's scopes are all it matches (`subject`,
# `subject:...`, `subject:...*`: access.scoping.subject_of_pattern); $1 is the subject
_OF_SUBJECT = "(p = $1 OR starts_with(p, $1 || ':'))"


async def grants_of_subject_for_update(
    conn: asyncpg.Connection, subject: str
) -> list[tuple[str, str, str, list[str]]]:
    """The grants limited to scopes with a pattern of the subject, on any securable, locked until
    the transaction ends: (securable id, principal, privilege, patterns)."""
    rows = await conn.fetch(
        "SELECT securable_id::text, principal, privilege, scopes FROM grants "
        f"WHERE EXISTS (SELECT 1 FROM unnest(scopes) AS t(p) WHERE {_OF_SUBJECT}) "
        "ORDER BY securable_id, principal, privilege FOR UPDATE",
        subject,
    )
    return [(row[0], row[1], row[2], list(row[3])) for row in rows]


async def limit_grants(
    conn: asyncpg.Connection,
    narrowed: list[tuple[str, str, str, list[str]]],
    revoked: list[tuple[str, str, str]],
) -> None:
    """Give each grant in `narrowed` (securable id, principal, privilege) its new patterns and
    delete those in `revoked`, in the caller's transaction (the triggers log each change to
    `policy_log`, so every process applies it)."""
    if narrowed:
        await conn.executemany(
            "UPDATE grants SET scopes = $4 "
            "WHERE securable_id = $1::uuid AND principal = $2 AND privilege = $3",
            narrowed,
        )
    if revoked:
        await conn.executemany(
            "DELETE FROM grants WHERE securable_id = $1::uuid AND principal = $2 AND privilege = $3", revoked
        )


async def forget_logged_patterns(conn: asyncpg.Connection, subject: str) -> int:
    """Take the subject's patterns out of the grants' history in `policy_log`, in the caller's
    transaction, after the grants themselves changed; how many rows changed. A `grant add` row that
    names one keeps its other patterns, or becomes a `remove` of the grant when none is left.

    Replaying the log stays correct: the last row of a grant is its state now (the triggers log
    every change), which names no pattern of the subject once the grants changed, so each row
    rewritten here has a later row of the same grant that sets where it ends; and a rewritten row
    only narrows what the grant was between the two (fewer patterns, or no grant), so a process
    deciding at a revision in between allows no more than the grant did then."""
    await conn.execute("SELECT pg_advisory_xact_lock($1)", POLICY_LOG)
    status: str = await conn.execute(
        "WITH named AS (SELECT seq, (SELECT array_agg(p ORDER BY n) "
        f"FROM json_array_elements_text(d::json) WITH ORDINALITY AS t(p, n) WHERE NOT {_OF_SUBJECT}) AS kept "
        "FROM policy_log WHERE kind = 'grant' AND op = 'add' AND d <> '' "
        f"AND EXISTS (SELECT 1 FROM json_array_elements_text(d::json) AS t(p) WHERE {_OF_SUBJECT})) "
        "UPDATE policy_log l SET op = CASE WHEN n.kept IS NULL THEN 'remove' ELSE 'add' END, "
        "d = coalesce(array_to_json(n.kept)::text, '') FROM named n WHERE l.seq = n.seq",
        subject,
    )
    return int(status.split()[-1])
