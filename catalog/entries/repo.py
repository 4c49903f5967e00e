"""SQL for entries. Each write mode is one statement, so two concurrent writers never lose an
update; edits read the row under a lock and write it back in the same transaction. The change
log (`entry_changes`) is written by triggers. Rows come back as `EntryRow`s."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeAlias

import asyncpg
import msgspec

from catalog.errors import CatalogError, InvalidParameter, is_unavailable

Conn: TypeAlias = asyncpg.Connection | asyncpg.Pool


class Key(NamedTuple):
    """An entry's key, its fields in the order of the `$1`-`$4` of `_KEY` (passed as `*key`)."""

    store_id: str
    scope: str
    session_id: str  # '' for none
    path: str


class EntryRow(msgspec.Struct, frozen=True, kw_only=True):
    """An entry as stored (times in epoch milliseconds; `session_id` '' for none)."""

    id: str
    store_id: str
    scope: str
    session_id: str
    path: str
    contents: str | None
    description: str | None
    source_type: str | None
    creation_reason: str | None
    creation_source: str | None
    version: int
    created_at: int
    created_by: str
    updated_at: int
    updated_by: str
    expires_at: int | None = None  # epoch milliseconds; None: never
    metadata: dict[str, Any] | None = None
    state: str = "active"  # active | superseded | merged
    superseded_by: dict[str, str] | None = None  # {scope, session_id, path} of the entry replacing it
    imported_by: str | None = None  # who imported it from an archive (created_by is the archive's)
    # where its current text came from (catalog.entries.provenance); None: written before it was kept
    provenance: dict[str, Any] | None = None

    @property
    def active(self) -> bool:
        return self.state == "active"

    @property
    def held(self) -> bool:
        """Held for review by the store's trust policy (`quarantined`)."""
        return self.state == "quarantined"

    @property
    def has_contents(self) -> bool:
        return bool(self.contents)

    @property
    def key(self) -> Key:
        return Key(self.store_id, self.scope, self.session_id, self.path)


class Fields(msgspec.Struct, frozen=True, kw_only=True):
    contents: str | None
    description: str | None
    source_type: str | None
    creation_reason: str | None = None
    creation_source: str | None = None
    metadata: dict[str, Any] | None = None  # None: none given (an overwrite or append keeps the entry's)
    provenance: dict[str, Any] | None = None  # where this write came from (the version keeps it)
    held: bool = False  # the store's trust policy holds it for review (`quarantined`)

    @property
    def values(self) -> tuple[Any, ...]:
        """In the order of `_INSERT`'s $5.. parameters."""
        return (
            self.contents,
            self.description,
            self.source_type,
            self.creation_reason,
            self.creation_source,
            self.metadata,
            self.provenance,
            self.held,
        )


@dataclass(frozen=True)
class Held:
    """Which entries held for review a read answers: none, every one (`author` None: a MANAGE
    holder's read) or those one principal wrote (`author`: its own)."""

    include: bool = False
    author: str | None = None


NO_HELD = Held()
# the states a read answers: active ones; with $a superseded and merged ones; with $b held ones, of
# the author $c when given (NULL: any); `{col}` is the column that names a held version's author
_STATES = (
    "(state = 'active' OR (${a} AND state IN ('superseded', 'merged')) "
    "OR (${b} AND state = 'quarantined' AND (${c}::text IS NULL OR {col} = ${c})))"
)


def states(a: int, b: int, c: int, col: str = "updated_by", alias: str = "") -> str:
    """The state condition of a read, its flags and author at parameters $a, $b, $c."""
    condition = _STATES.replace("${a}", f"${a}").replace("${b}", f"${b}").replace("${c}", f"${c}")
    condition = condition.format(col=f"{alias}{col}")
    return condition.replace("state", f"{alias}state") if alias else condition


COLUMNS = (
    "id, store_id, scope, session_id, path, contents, description, source_type, creation_reason, "
    "creation_source, version, "
    "(extract(epoch FROM created_at) * 1000)::bigint AS created_at, created_by, "
    "(extract(epoch FROM updated_at) * 1000)::bigint AS updated_at, updated_by, "
    "(extract(epoch FROM expires_at) * 1000)::bigint AS expires_at, metadata, state, imported_by, "
    "provenance, "
    # the key of the entry that supersedes it (None when there is none, or it is gone)
    "(SELECT jsonb_build_object('scope', s.scope, 'session_id', s.session_id, 'path', s.path) "
    " FROM entries s WHERE s.store_id = entries.store_id AND s.id = entries.superseded_by) AS superseded_by"
)
# an entry past its expiry is gone for every read, before the sweep deletes it
LIVE = "(expires_at IS NULL OR expires_at > clock_timestamp())"
_KEY = "store_id = $1 AND scope = $2 AND session_id = $3 AND path = $4"
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


def _row(record: asyncpg.Record | None) -> EntryRow | None:
    if record is None:
        return None
    values = dict(record)
    values["id"], values["store_id"] = str(values["id"]), str(values["store_id"])
    return EntryRow(**values)


def _rows(records: Sequence[asyncpg.Record]) -> list[EntryRow]:
    return [row for row in map(_row, records) if row is not None]


async def insert_exclusive(conn: Conn, key: Key, fields: Fields, by: str) -> EntryRow | None:
    """None when an entry already exists at the key."""
    return _row(
        await conn.fetchrow(
            _INSERT + " ON CONFLICT (store_id, scope, session_id, path) DO NOTHING RETURNING " + COLUMNS,
            *key,
            *fields.values,
            by,
        )
    )


async def upsert_overwrite(conn: Conn, key: Key, fields: Fields, by: str) -> EntryRow:
    row = _row(
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
    return _row(
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
    return _row(await conn.fetchrow(f"SELECT {COLUMNS} FROM entries WHERE {_KEY} AND {LIVE}{lock}", *key))


async def get_by_id(conn: Conn, store_id: str, entry_id: str, *, for_update: bool = False) -> EntryRow | None:
    lock = " FOR UPDATE" if for_update else ""
    return _row(
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
    return _row(
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
    return _rows(
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
    return _row(
        await conn.fetchrow(
            "UPDATE entries SET state = $5, superseded_by = $6, version = version + 1, "
            f"updated_at = clock_timestamp(), updated_by = $7 WHERE {_KEY} AND {LIVE} "
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
    rows = _rows(
        await conn.fetch(
            f"SELECT {COLUMNS} FROM entries WHERE store_id = $1 AND id = ANY($2::uuid[]) AND {LIVE}",
            store_id,
            list(ids),
        )
    )
    return {row.id: row for row in rows}


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


_VERSION_COLUMNS = (
    "version, contents, description, metadata, operation, "
    "(extract(epoch FROM changed_at) * 1000)::bigint AS changed_at, changed_by, "
    "(extract(epoch FROM redacted_at) * 1000)::bigint AS redacted_at, redacted_by, redaction_reason, "
    "state, superseded_by, imported_by, provenance"
)


async def history(conn: Conn, key: Key, limit: int) -> list[VersionRow]:
    """The key's versions, newest first."""
    rows = await conn.fetch(
        f"SELECT {_VERSION_COLUMNS} FROM entry_versions WHERE {_KEY} ORDER BY seq DESC LIMIT $5",
        *key,
        limit,
    )
    return [VersionRow(**dict(row)) for row in rows]


async def version(conn: Conn, key: Key, number: int) -> VersionRow | None:
    """The newest kept version `number` of the key that holds contents (not a deletion)."""
    row = await conn.fetchrow(
        f"SELECT {_VERSION_COLUMNS} FROM entry_versions "
        f"WHERE {_KEY} AND version = $5 AND operation <> 'delete' "
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
    return _rows(
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
        f"WHERE {_KEY} AND version = $5 AND operation <> 'delete' AND redacted_at IS NULL",
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
        f"embedded_version = NULL WHERE {_KEY} AND version = $5 RETURNING id",
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
        f"SELECT EXISTS (SELECT 1 FROM entries WHERE {_KEY} AND NOT {LIVE}) AS expired, "
        f"EXISTS (SELECT 1 FROM entries WHERE {_KEY} AND {LIVE}) AS live, "
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
        await conn.execute(f"DELETE FROM entries WHERE {_KEY} AND NOT {LIVE}", *key)
        await conn.execute("SELECT set_config('catalog.principal', '', true)")
    return WriteReady(ttl, kept_expired=False, held=held, live=live)


async def set_expiry(conn: Conn, store_id: str, entry_id: str, ttl_seconds: int) -> EntryRow:
    row = _row(
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
    return _rows(
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
    row = _row(
        await conn.fetchrow(
            "UPDATE entries SET state = 'active', version = version + 1, updated_at = clock_timestamp(), "
            "updated_by = $6, provenance = coalesce(provenance, jsonb_build_object('principal', updated_by)) "
            "|| jsonb_build_object('review', $7::jsonb) "
            f"WHERE {_KEY} AND {LIVE} AND state = 'quarantined' AND ($5::bigint IS NULL OR version = $5) "
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
        f"SELECT {_VERSION_COLUMNS} FROM entry_versions "
        f"WHERE {_KEY} AND entry_id = $5 AND state <> 'quarantined' ORDER BY seq DESC LIMIT 1",
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
    row = _row(
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
