"""An entry's versions (`entry_versions`, kept by trigger): its history, one version, the
versions alive at a time (as-of), a version's redaction and a restore of an earlier one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg
import msgspec

from catalog.entries.repo.rows import KEY, NO_HELD, Conn, EntryRow, Fields, Held, Key, rows_of, states
from catalog.entries.repo.writes import upsert_overwrite

# --- history ----------------------------------------------------------------------------------------


class VersionRow(msgspec.Struct, frozen=True, kw_only=True):
    """One version of an entry's key (`entry_versions`, kept by trigger)."""

    version: int
    contents: str | None
    description: str | None
    metadata: dict[str, Any] | None
    operation: str  # create | update | restore | delete
    changed_at: int  # epoch milliseconds
    changed_by: str
    redacted_at: int | None = None  # epoch milliseconds: its contents and description were redacted
    redacted_by: str | None = None
    redaction_reason: str | None = None
    state: str = "active"  # its consolidation state at this version
    superseded_by: dict[str, str] | None = None  # {scope, session_id, path} of the entry replacing it
    imported_by: str | None = None  # who imported it from an archive (changed_by is the archive's)
    provenance: dict[str, Any] | None = None  # where its text (or the deletion) came from
    withheld: bool = False  # held for review, answered without its text (not read from the table)


VERSION_COLUMNS = (
    "version, contents, description, metadata, operation, "
    "(extract(epoch FROM changed_at) * 1000)::bigint AS changed_at, changed_by, "
    "(extract(epoch FROM redacted_at) * 1000)::bigint AS redacted_at, redacted_by, redaction_reason, "
    "state, superseded_by, imported_by, provenance"
)


async def history(conn: Conn, key: Key, limit: int) -> list[VersionRow]:
    """The key's versions, newest first."""
    rows = await conn.fetch(
        f"SELECT {VERSION_COLUMNS} FROM entry_versions WHERE {KEY} ORDER BY seq DESC LIMIT $5",
        *key,
        limit,
    )
    return [VersionRow(**dict(row)) for row in rows]


async def version(conn: Conn, key: Key, number: int) -> VersionRow | None:
    """The newest kept version `number` of the key that holds contents (not a deletion)."""
    row = await conn.fetchrow(
        f"SELECT {VERSION_COLUMNS} FROM entry_versions "
        f"WHERE {KEY} AND version = $5 AND operation <> 'delete' "
        "ORDER BY seq DESC LIMIT 1",
        *key,
        number,
    )
    return None if row is None else VersionRow(**dict(row))


# --- the store as it was (as-of reads, from the history) ---------------------------------------------
# Each key's newest kept version changed at or before the time asked; a key whose version then is
# a deletion had no entry. Created at/by (and imported by): the entry's first kept version. The
# history keeps no source_type, creation_reason, creation_source or expiry: those are answered empty.
_AS_OF = """
SELECT a.id, a.store_id, a.scope, a.session_id, a.path, a.contents, a.description,
       NULL::text AS source_type, NULL::text AS creation_reason, NULL::text AS creation_source,
       a.version, (extract(epoch FROM f.changed_at) * 1000)::bigint AS created_at, f.changed_by AS created_by,
       (extract(epoch FROM a.changed_at) * 1000)::bigint AS updated_at, a.changed_by AS updated_by,
       NULL::bigint AS expires_at, a.metadata, a.state, a.superseded_by, f.imported_by, a.provenance
FROM (
  SELECT DISTINCT ON (v.scope, v.session_id, v.path) v.entry_id AS id, v.store_id, v.scope, v.session_id,
         v.path, v.version, v.contents, v.description, v.metadata, v.operation, v.changed_at, v.changed_by,
         v.state, v.superseded_by, v.provenance
  FROM entry_versions v
  WHERE v.store_id = $1 AND ($2::text[] IS NULL OR v.scope = ANY($2::text[]))
    AND v.changed_at < to_timestamp(($3::double precision + 1) / 1000)
    AND ($4::text IS NULL OR v.session_id = $4) AND ($5::text IS NULL OR starts_with(v.path, $5))
    AND ($6::text IS NULL OR v.path = $6) AND ($7::uuid IS NULL OR v.entry_id = $7)
  ORDER BY v.scope, v.session_id, v.path, v.seq DESC
) a
LEFT JOIN LATERAL (
  SELECT changed_at, changed_by, imported_by FROM entry_versions f
  WHERE f.store_id = $1 AND f.entry_id = a.id ORDER BY f.seq LIMIT 1
) f ON true
WHERE a.operation <> 'delete' AND ($8::jsonb IS NULL OR a.metadata @> $8)
  AND ($9::text IS NULL OR (a.path, a.scope, a.session_id) > ($9, $10, $11))
  AND {states}
ORDER BY a.path, a.scope, a.session_id
LIMIT $12
""".replace("{states}", states(13, 14, 15, col="changed_by", alias="a."))


async def as_of(
    conn: Conn,
    store_id: str,
    scopes: Sequence[str] | None,
    at_ms: int,
    *,
    session_id: str | None = None,
    path_prefix: str | None = None,
    exact_path: str | None = None,
    entry_id: str | None = None,
    where: dict[str, Any] | None = None,
    after: tuple[str, str, str] | None = None,
    limit: int = 1,
    include_inactive: bool = True,
    held: Held = NO_HELD,
) -> list[EntryRow]:
    """The entries of these scopes as they were at the end of millisecond `at_ms` (epoch ms: so a
    version's own `updated_at` finds it), from the kept history, each in its state then
    (`include_inactive=False`: only those active then, or superseded or merged then too; those
    held for review then only as `held` says), ordered by (path, scope, session_id) as
    `list_entries`; `after` is the last key of the previous page; `scopes` None: any scope (an
    entry asked for by id)."""
    after_path, after_scope, after_session = after or (None, None, None)
    return rows_of(
        await conn.fetch(
            _AS_OF,
            store_id,
            None if scopes is None else list(scopes),
            at_ms,
            session_id,
            path_prefix,
            exact_path,
            entry_id,
            where,
            after_path,
            after_scope,
            after_session,
            limit,
            include_inactive,
            held.include,
            held.author,
        )
    )


async def redact(conn: asyncpg.Connection, key: Key, number: int, by: str, reason: str) -> int:
    """Replace the contents and description of the key's kept versions `number` (not
    deletions, not yet redacted) by the redaction (who, when, why); how many rows (0: no such
    version kept, or it is redacted already)."""
    status: str = await conn.execute(
        "UPDATE entry_versions SET contents = NULL, description = NULL, "
        "redacted_at = clock_timestamp(), redacted_by = $6, redaction_reason = $7 "
        f"WHERE {KEY} AND version = $5 AND operation <> 'delete' AND redacted_at IS NULL",
        *key,
        number,
        by,
        reason,
    )
    return int(status.split()[-1])


async def redact_current(conn: asyncpg.Connection, key: Key, number: int) -> str | None:
    """If the entry at the key is at version `number`, empty its contents and description and
    drop its vector, at the same version (no new version: the history keeps the redaction); the
    caller logs the change for the full-text index (`catalog.search.log_changed`). Its id, if
    it was."""
    row = await conn.fetchrow(
        "UPDATE entries SET contents = NULL, description = NULL, embedding = NULL, "
        f"embedded_version = NULL WHERE {KEY} AND version = $5 RETURNING id",
        *key,
        number,
    )
    return None if row is None else str(row["id"])


async def restore(
    conn: asyncpg.Connection,
    key: Key,
    kept: VersionRow,
    by: str,
    provenance: dict[str, Any] | None = None,
    held: bool = False,
) -> EntryRow:
    """Write a kept version as the newest (an update, or a new entry when the key has none);
    its history row says `restore`."""
    await conn.execute("SELECT set_config('catalog.operation', 'restore', true)")
    # the version's metadata as it was (`{}` where it had none: None would keep the current)
    fields = Fields(
        contents=kept.contents,
        description=kept.description,
        source_type=None,
        metadata=kept.metadata or {},
        provenance=provenance,
        held=held,
    )
    row = await upsert_overwrite(conn, key, fields, by)
    await conn.execute("SELECT set_config('catalog.operation', '', true)")
    return row
