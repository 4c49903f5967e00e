"""An entry's reads and writes by key or id: each write mode is one statement (two concurrent
writers never lose an update), an edit reads the row under a lock and writes it back in the same
transaction; a batch's entry in a savepoint; the expiry a write starts from (`before_write`)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import asyncpg
import msgspec

from catalog.db.pool import IDS, joined_ids
from catalog.entries.repo.rows import (
    COLUMNS,
    KEY,
    LIVE,
    NO_HELD,
    Conn,
    EntryRow,
    Fields,
    Held,
    Key,
    row_of,
    rows_of,
    states,
)
from catalog.errors import CatalogError, InvalidParameter, is_unavailable

_INSERT = (
    "INSERT INTO entries (store_id, scope, session_id, path, contents, description, source_type, "
    "creation_reason, creation_source, metadata, provenance, state, created_by, updated_by) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::jsonb, $11::jsonb, "
    "CASE WHEN $12 THEN 'quarantined' ELSE 'active' END, $13, $13)"
)


# An overwrite or append that does not say where the entry came from keeps what it said before:
# the provenance fields describe the entry's origin, and a client that does not know them (the
# agent-memory SDK, the CLI) must not erase what a client that does recorded. Sent, they replace.
_KEEP_PROVENANCE = (
    "source_type = coalesce(EXCLUDED.source_type, entries.source_type), "
    "creation_reason = coalesce(EXCLUDED.creation_reason, entries.creation_reason), "
    "creation_source = coalesce(EXCLUDED.creation_source, entries.creation_source), "
    # metadata too: a writer that does not send it keeps it (`{}` clears it)
    "metadata = coalesce(EXCLUDED.metadata, entries.metadata), "
    # the text's provenance is this write's; an entry held for review stays held until reviewed
    # (what it holds is still what the reviewer decides on), and the write's own hold holds it
    "provenance = EXCLUDED.provenance, "
    "state = CASE WHEN EXCLUDED.state = 'quarantined' THEN 'quarantined' ELSE entries.state END, "
)


async def insert_exclusive(conn: Conn, key: Key, fields: Fields, by: str) -> EntryRow | None:
    """None when an entry already exists at the key."""
    return row_of(
        await conn.fetchrow(
            _INSERT + " ON CONFLICT (store_id, scope, session_id, path) DO NOTHING RETURNING " + COLUMNS,
            *key,
            *fields.values,
            by,
        )
    )


async def upsert_overwrite(conn: Conn, key: Key, fields: Fields, by: str) -> EntryRow:
    row = row_of(
        await conn.fetchrow(
            _INSERT + " ON CONFLICT (store_id, scope, session_id, path) DO UPDATE SET "
            "contents = EXCLUDED.contents, description = EXCLUDED.description, "
            + _KEEP_PROVENANCE
            + "version = entries.version + 1, updated_at = clock_timestamp(), "
            "updated_by = EXCLUDED.updated_by RETURNING " + COLUMNS,
            *key,
            *fields.values,
            by,
        )
    )
    assert row is not None
    return row


async def upsert_append(
    conn: Conn, key: Key, fields: Fields, by: str, *, dedupe: bool = True
) -> EntryRow | None:
    """Add the text as new lines at the end, unless exactly those lines are already there (so a
    retried append changes nothing and keeps the version: None; with a new description or
    metadata, only those change). `dedupe=False` always appends
    (for a caller who may not read the entry: whether it changed must not tell what it holds)."""
    return row_of(
        await conn.fetchrow(
            _INSERT + " ON CONFLICT (store_id, scope, session_id, path) DO UPDATE SET "
            "contents = CASE WHEN entries.contents IS NULL OR entries.contents = '' THEN EXCLUDED.contents "
            # the lines are there already and only the description or metadata changes: not again
            "  WHEN $14 AND strpos(chr(10) || entries.contents || chr(10), "
            "             chr(10) || rtrim(EXCLUDED.contents, chr(10)) || chr(10)) > 0 THEN entries.contents "
            "  WHEN entries.contents LIKE '%' || chr(10) THEN entries.contents || EXCLUDED.contents "
            "  ELSE entries.contents || chr(10) || EXCLUDED.contents END, "
            "description = coalesce(EXCLUDED.description, entries.description), "
            + _KEEP_PROVENANCE
            + "version = entries.version + 1, updated_at = clock_timestamp(), "
            "updated_by = EXCLUDED.updated_by "
            "WHERE NOT $14 OR strpos(chr(10) || coalesce(entries.contents, '') || chr(10), "
            "             chr(10) || rtrim(EXCLUDED.contents, chr(10)) || chr(10)) = 0 "
            "   OR coalesce(EXCLUDED.description, entries.description) IS DISTINCT FROM entries.description "
            "   OR coalesce(EXCLUDED.metadata, entries.metadata) IS DISTINCT FROM entries.metadata "
            "RETURNING " + COLUMNS,
            *key,
            *fields.values,
            by,
            dedupe,
        )
    )


async def get(conn: Conn, key: Key, *, for_update: bool = False) -> EntryRow | None:
    lock = " FOR UPDATE" if for_update else ""
    return row_of(await conn.fetchrow(f"SELECT {COLUMNS} FROM entries WHERE {KEY} AND {LIVE}{lock}", *key))


async def get_by_id(conn: Conn, store_id: str, entry_id: str, *, for_update: bool = False) -> EntryRow | None:
    lock = " FOR UPDATE" if for_update else ""
    return row_of(
        await conn.fetchrow(
            f"SELECT {COLUMNS} FROM entries WHERE store_id = $1 AND id = $2 AND {LIVE}{lock}",
            store_id,
            entry_id,
        )
    )


async def update_contents(
    conn: Conn,
    store_id: str,
    entry_id: str,
    version: int,
    contents: str | None,
    description: str | None,
    by: str,
    metadata: dict[str, Any] | None = None,
    provenance: dict[str, Any] | None = None,
    held: bool = False,
) -> EntryRow | None:
    """None when the entry is no longer at `version`. `metadata` None keeps the entry's; `held`
    holds it for review (a held entry stays held)."""
    return row_of(
        await conn.fetchrow(
            "UPDATE entries SET contents = $3, description = $4, version = version + 1, "
            "metadata = coalesce($6::jsonb, metadata), provenance = $8::jsonb, "
            "state = CASE WHEN $9 THEN 'quarantined' ELSE state END, "
            "updated_at = clock_timestamp(), updated_by = $5 "
            "WHERE store_id = $7 AND id = $1 AND version = $2 RETURNING " + COLUMNS,
            entry_id,
            version,
            contents,
            description,
            by,
            metadata,
            store_id,
            provenance,
            held,
        )
    )


async def delete(
    conn: Conn,
    store_id: str,
    entry_id: str,
    version: int | None,
    by: str,
    provenance: dict[str, Any] | None = None,
) -> tuple[bool, int | None]:
    """Delete the entry if it is at `version` (any version when None): (deleted, its version
    when it exists, else None). `by` is who the history names as the deleter, `provenance` where
    the deletion came from (the deletion's version keeps it)."""
    await conn.execute(
        "SELECT set_config('catalog.principal', $1, true), set_config('catalog.provenance', $2, true)",
        by,
        "" if provenance is None else msgspec.json.encode(provenance).decode(),
    )
    row = await conn.fetchrow(
        "WITH target AS (SELECT id, version FROM entries WHERE store_id = $3 AND id = $1), "
        "gone AS (DELETE FROM entries e USING target t WHERE e.store_id = $3 AND e.id = t.id "
        "         AND ($2::bigint IS NULL OR e.version = $2) RETURNING e.id) "
        "SELECT (SELECT version FROM target) AS version, (SELECT count(*) FROM gone) AS deleted",
        entry_id,
        version,
        store_id,
    )
    assert row is not None
    return bool(row["deleted"]), row["version"]


async def list_entries(
    conn: Conn,
    store_id: str,
    scopes: Sequence[str],
    session_id: str | None,
    path_prefix: str | None,
    after: tuple[str, str, str] | None,
    limit: int,
    exact_path: str | None = None,
    where: dict[str, Any] | None = None,
    include_inactive: bool = False,
    held: Held = NO_HELD,
) -> list[EntryRow]:
    """Ordered by (path, scope, session_id); `after` is the last key of the previous page; with
    `where`, only entries whose metadata holds each of its pairs; only active entries unless
    `include_inactive` (superseded and merged ones too) or `held` (held ones, as it says)."""
    after_path, after_scope, after_session = after or (None, None, None)
    return rows_of(
        await conn.fetch(
            f"SELECT {COLUMNS} FROM entries "
            "WHERE store_id = $1 AND scope = ANY($2::text[]) AND ($3::text IS NULL OR session_id = $3) "
            "AND ($4::text IS NULL OR starts_with(path, $4)) "
            "AND ($5::text IS NULL OR (path, scope, session_id) > ($5, $6, $7)) "
            "AND ($9::text IS NULL OR path = $9) AND ($10::jsonb IS NULL OR metadata @> $10) "
            f"AND {states(11, 12, 13)} AND {LIVE} ORDER BY path, scope, session_id LIMIT $8",
            store_id,
            list(scopes),
            session_id,
            path_prefix,
            after_path,
            after_scope,
            after_session,
            limit,
            exact_path,
            where,
            include_inactive,
            held.include,
            held.author,
        )
    )


async def set_state(
    conn: asyncpg.Connection, key: Key, state: str, superseded_by: str | None, by: str
) -> EntryRow | None:
    """Set the entry's state and the entry that supersedes it (None for `active`), as a new
    version of it (its contents and their provenance unchanged); None when no entry is at the key
    or it is held for review (only a review releases it)."""
    return row_of(
        await conn.fetchrow(
            "UPDATE entries SET state = $5, superseded_by = $6, version = version + 1, "
            f"updated_at = clock_timestamp(), updated_by = $7 WHERE {KEY} AND {LIVE} "
            f"AND state <> 'quarantined' RETURNING {COLUMNS}",
            *key,
            state,
            superseded_by,
            by,
        )
    )


async def delete_scope(conn: Conn, store_id: str, scope: str) -> int:
    """Delete a scope's entries from one store, with their history, and take the scope out of the
    provenance the store's other entries and versions keep; how many entries."""
    await conn.execute("SELECT set_config('catalog.erasing', 'on', true)")  # no deletion is recorded
    status: str = await conn.execute(
        "DELETE FROM entries WHERE store_id = $1 AND scope = $2", store_id, scope
    )
    await conn.execute("DELETE FROM entry_versions WHERE store_id = $1 AND scope = $2", store_id, scope)
    # the change log keeps the scope's changes (the indexes follow them) without naming it: such
    # rows count for every search of the store until the log's pruning takes them
    await conn.execute(
        "UPDATE entry_changes SET scope = NULL WHERE store_id = $1 AND scope = $2", store_id, scope
    )
    for table in ("entries", "entry_versions"):
        await conn.execute(
            f"UPDATE {table} SET provenance = provenance_without_scope(provenance, $2, false) "
            "WHERE store_id = $1 AND provenance_names_scope(provenance, $2, false)",
            store_id,
            scope,
        )
    return int(status.split()[-1])


async def erase_scope(conn: Conn, scope: str, *, subject: bool = False) -> list[tuple[str, int]]:
    """Delete a scope's entries (with `subject`: also of every scope starting `scope:`), and their
    history, from every store not under legal hold, and take the scope out of the provenance the
    entries and versions kept there name it in (their source entries, their end user); (store full
    name, how many), by name."""
    await conn.execute("SELECT set_config('catalog.erasing', 'on', true)")  # no deletion is recorded
    rows = await conn.fetch(
        "WITH gone AS (DELETE FROM entries WHERE (scope = $1 OR ($2 AND starts_with(scope, $1 || ':'))) "
        "AND store_id NOT IN (SELECT id FROM memory_stores WHERE legal_hold) RETURNING store_id) "
        "SELECT c.name || '.' || s.name || '.' || m.name AS memory_store, count(*) AS deleted "
        "FROM gone g JOIN memory_stores m ON m.id = g.store_id JOIN schemas s ON s.id = m.schema_id "
        "JOIN catalogs c ON c.id = s.catalog_id GROUP BY 1 ORDER BY 1",
        scope,
        subject,
    )
    await conn.execute(  # their history too
        "DELETE FROM entry_versions WHERE (scope = $1 OR ($2 AND starts_with(scope, $1 || ':'))) "
        "AND store_id NOT IN (SELECT id FROM memory_stores WHERE legal_hold)",
        scope,
        subject,
    )
    await conn.execute(  # the change log keeps their changes without naming the scope
        "UPDATE entry_changes SET scope = NULL WHERE (scope = $1 OR ($2 AND starts_with(scope, $1 || ':'))) "
        "AND store_id NOT IN (SELECT id FROM memory_stores WHERE legal_hold)",
        scope,
        subject,
    )
    for table in ("entries", "entry_versions"):  # and the scope out of the provenance kept elsewhere
        await conn.execute(
            f"UPDATE {table} SET provenance = provenance_without_scope(provenance, $1, $2) "
            "WHERE provenance_names_scope(provenance, $1, $2) "
            "AND store_id NOT IN (SELECT id FROM memory_stores WHERE legal_hold)",
            scope,
            subject,
        )
    return [(row["memory_store"], int(row["deleted"])) for row in rows]


@asynccontextmanager
async def savepoint(conn: asyncpg.Connection) -> AsyncIterator[None]:
    """One entry's write of a batch, in a savepoint of the caller's transaction: released when the
    block succeeds; rolled back to when it raises a catalog error or a PostgreSQL error, so the
    transaction goes on without it. A PostgreSQL error comes out as a catalog error (400 "the
    entry could not be written"), unless it says the database is unavailable: that one, like any
    other exception, leaves the savepoint alone (there is nothing to roll back on) and the whole
    transaction fails."""
    await conn.execute("SAVEPOINT batch_entry")
    try:
        yield
    except CatalogError:
        await conn.execute("ROLLBACK TO SAVEPOINT batch_entry")
        raise
    except asyncpg.PostgresError as exc:
        if is_unavailable(exc):
            raise
        await conn.execute("ROLLBACK TO SAVEPOINT batch_entry")
        raise InvalidParameter("the entry could not be written") from exc
    await conn.execute("RELEASE SAVEPOINT batch_entry")


async def by_ids(conn: Conn, store_id: str, ids: Sequence[str]) -> dict[str, EntryRow]:
    """The live entries of the store with these ids."""
    rows = rows_of(
        await conn.fetch(
            f"SELECT {COLUMNS} FROM entries WHERE store_id = $1 AND id = ANY({IDS.format('$2')}) AND {LIVE}",
            store_id,
            joined_ids(ids),
        )
    )
    return {row.id: row for row in rows}


# --- expiry --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WriteReady:
    default_ttl: int | None  # the store's default TTL in seconds (None: none)
    kept_expired: bool  # an expired entry is at the key and the store's legal hold keeps it
    held: bool = False  # the store is under legal hold
    live: bool = False  # a live (unexpired) entry is at the key


async def before_write(conn: Conn, key: Key) -> WriteReady:
    """Ready a write at the key: delete the entry there if it has expired (a write at its key
    starts afresh; the history names `system:expiry` as its deleter), unless the store is under
    legal hold (then it stays, and `kept_expired` says so); and read the store's default TTL, its
    legal hold and whether a live entry is at the key (what an overwrite under hold is refused
    by). One statement when nothing has expired (the usual case)."""
    row = await conn.fetchrow(
        f"SELECT EXISTS (SELECT 1 FROM entries WHERE {KEY} AND NOT {LIVE}) AS expired, "
        f"EXISTS (SELECT 1 FROM entries WHERE {KEY} AND {LIVE}) AS live, "
        "(SELECT default_ttl_seconds FROM memory_stores WHERE id = $1) AS ttl, "
        "coalesce((SELECT legal_hold FROM memory_stores WHERE id = $1), false) AS held",
        *key,
    )
    assert row is not None
    ttl = None if row["ttl"] is None else int(row["ttl"])
    held, live = bool(row["held"]), bool(row["live"])
    if row["expired"] and held:
        return WriteReady(ttl, kept_expired=True, held=held, live=live)
    if row["expired"]:
        await conn.execute("SELECT set_config('catalog.principal', 'system:expiry', true)")
        await conn.execute(f"DELETE FROM entries WHERE {KEY} AND NOT {LIVE}", *key)
        await conn.execute("SELECT set_config('catalog.principal', '', true)")
    return WriteReady(ttl, kept_expired=False, held=held, live=live)


async def set_expiry(conn: Conn, store_id: str, entry_id: str, ttl_seconds: int) -> EntryRow:
    row = row_of(
        await conn.fetchrow(
            "UPDATE entries SET expires_at = clock_timestamp() + make_interval(secs => $3) "
            f"WHERE store_id = $1 AND id = $2 RETURNING {COLUMNS}",
            store_id,
            entry_id,
            ttl_seconds,
        )
    )
    assert row is not None
    return row
