"""What happens to entries after their write: expiry's sweep, and review of those a store's
trust policy holds (approve, or put back the version before the hold)."""

from __future__ import annotations

from typing import Any

import asyncpg

from catalog.entries.repo.rows import COLUMNS, KEY, LIVE, Conn, EntryRow, Key, row_of, rows_of
from catalog.entries.repo.versions import VERSION_COLUMNS, VersionRow


async def sweep_expired(conn: asyncpg.Connection, limit: int) -> list[tuple[str, int]]:
    """Delete up to `limit` expired entries of stores not under legal hold (in the caller's
    transaction); (store full name, how many)."""
    await conn.execute("SELECT set_config('catalog.principal', 'system:expiry', true)")
    rows = await conn.fetch(
        "WITH gone AS (DELETE FROM entries WHERE id IN ("
        "  SELECT id FROM entries WHERE expires_at <= clock_timestamp() "
        "  AND store_id NOT IN (SELECT id FROM memory_stores WHERE legal_hold) LIMIT $1"
        ") RETURNING store_id) "
        "SELECT c.name || '.' || s.name || '.' || m.name AS memory_store, count(*) AS deleted "
        "FROM gone g JOIN memory_stores m ON m.id = g.store_id JOIN schemas s ON s.id = m.schema_id "
        "JOIN catalogs c ON c.id = s.catalog_id GROUP BY 1 ORDER BY 1",
        limit,
    )
    return [(row["memory_store"], int(row["deleted"])) for row in rows]


async def next_expiry(conn: Conn) -> float | None:
    """Seconds until the next expiry of an entry (of a store not under hold), or None."""
    value = await conn.fetchval(
        "SELECT extract(epoch FROM min(expires_at) - clock_timestamp()) FROM entries "
        "WHERE expires_at IS NOT NULL AND store_id NOT IN (SELECT id FROM memory_stores WHERE legal_hold)"
    )
    return None if value is None else float(value)


# --- review (entries held by a store's trust policy) ------------------------------------------------


async def quarantined(
    conn: Conn, store_id: str, scope: str | None, after: tuple[str, str, str] | None, limit: int
) -> list[EntryRow]:
    """The store's entries held for review (of one scope when given), by (scope, session_id, path);
    `after` is the last key of the previous page."""
    after_scope, after_session, after_path = after or (None, None, None)
    return rows_of(
        await conn.fetch(
            f"SELECT {COLUMNS} FROM entries WHERE store_id = $1 AND state = 'quarantined' "
            "AND ($2::text IS NULL OR scope = $2) "
            "AND ($3::text IS NULL OR (scope, session_id, path) > ($3, $4, $5)) "
            f"AND {LIVE} ORDER BY scope, session_id, path LIMIT $6",
            store_id,
            scope,
            after_scope,
            after_session,
            after_path,
            limit,
        )
    )


async def approve(
    conn: asyncpg.Connection, key: Key, version: int | None, by: str, review: dict[str, Any]
) -> EntryRow | None:
    """Make the entry held at the key active, as a new version (`approve`) whose provenance is the
    held text's with the review added; None when no held entry is there (at `version`, if given)."""
    await conn.execute("SELECT set_config('catalog.operation', 'approve', true)")
    row = row_of(
        await conn.fetchrow(
            "UPDATE entries SET state = 'active', version = version + 1, updated_at = clock_timestamp(), "
            "updated_by = $6, provenance = coalesce(provenance, jsonb_build_object('principal', updated_by)) "
            "|| jsonb_build_object('review', $7::jsonb) "
            f"WHERE {KEY} AND {LIVE} AND state = 'quarantined' AND ($5::bigint IS NULL OR version = $5) "
            f"RETURNING {COLUMNS}",
            *key,
            version,
            by,
            review,
        )
    )
    await conn.execute("SELECT set_config('catalog.operation', '', true)")
    return row


async def before_hold(conn: Conn, key: Key, entry_id: str) -> VersionRow | None:
    """The entry's newest kept version that was not held for review (what a rejection puts back);
    None when it has none since it was last deleted, or none is kept."""
    row = await conn.fetchrow(
        f"SELECT {VERSION_COLUMNS} FROM entry_versions "
        f"WHERE {KEY} AND entry_id = $5 AND state <> 'quarantined' ORDER BY seq DESC LIMIT 1",
        *key,
        entry_id,
    )
    if row is None:
        return None
    kept = VersionRow(**dict(row))
    return None if kept.operation == "delete" else kept


async def put_back(
    conn: asyncpg.Connection, current: EntryRow, kept: VersionRow, by: str, review: dict[str, Any]
) -> EntryRow:
    """Write a held entry back as it was at the kept version (its text, metadata, state and
    provenance, with the review added), as a new version (`reject`)."""
    await conn.execute("SELECT set_config('catalog.operation', 'reject', true)")
    origin = kept.provenance if kept.provenance is not None else {"principal": kept.changed_by}
    row = row_of(
        await conn.fetchrow(
            "UPDATE entries SET contents = $3, description = $4, metadata = $5::jsonb, state = $6, "
            "provenance = $7::jsonb, version = version + 1, updated_at = clock_timestamp(), updated_by = $8 "
            f"WHERE store_id = $1 AND id = $2 AND version = $9 RETURNING {COLUMNS}",
            current.store_id,
            current.id,
            kept.contents,
            kept.description,
            kept.metadata,
            kept.state,
            {**origin, "review": review},
            by,
            current.version,
        )
    )
    await conn.execute("SELECT set_config('catalog.operation', '', true)")
    assert row is not None  # the caller holds the row's lock at its version
    return row
