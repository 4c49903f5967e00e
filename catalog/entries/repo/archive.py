"""What a store's archive (`catalog.backup`) holds of its entries: the rows of `entries` and
`entry_versions` as they are (ids, versions, times, authors, the vector of the current version),
read in archive order inside the export's snapshot, and written back as they were by an import
(in its transaction). A request's writes cannot restore a row (they stamp new times and the
caller as author); these do, and the triggers still record the change log and the history."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg

from catalog.entries.repo.rows import Conn

BATCH = 500  # rows fetched per round trip of the export's cursor

# the kinds of archive line, in archive order; each statement takes the store's id as $1 and the
# scope an export is limited to (or NULL) as $2
_EXPORT: dict[str, str] = {
    # a vector is archived only when it is of the current version (else it is recomputed anyway)
    "entry": "SELECT id::text AS id, scope, nullif(session_id, '') AS session_id, path, contents, "
    "description, source_type, creation_reason, creation_source, metadata, version, created_at, "
    "created_by, updated_at, updated_by, expires_at, "
    "CASE WHEN embedded_version = version THEN embedding END AS embedding, "
    "CASE WHEN embedded_version = version THEN embedding_model END AS embedding_model, "
    "state, superseded_by::text AS superseded_by, imported_by, provenance "
    "FROM entries WHERE store_id = $1 AND ($2::text IS NULL OR scope = $2) "
    "ORDER BY scope, session_id, path",
    "entry_version": "SELECT entry_id::text AS entry_id, scope, nullif(session_id, '') AS session_id, "
    "path, version, contents, description, metadata, operation, changed_at, changed_by, "
    "redacted_at, redacted_by, redaction_reason, state, superseded_by, imported_by, provenance "
    "FROM entry_versions WHERE store_id = $1 AND ($2::text IS NULL OR scope = $2) ORDER BY seq",
}
KINDS = tuple(_EXPORT)


async def rows(conn: asyncpg.Connection, kind: str, store_id: str, scope: str | None) -> AsyncIterator[Any]:
    """The store's rows of one kind, in archive order (in the export's snapshot)."""
    async for row in conn.cursor(_EXPORT[kind], store_id, scope, prefetch=BATCH):
        yield row


async def held(conn: Conn, store_id: str) -> dict[str, int]:
    """How many entries and versions the store holds (those it holds some of)."""
    row = await conn.fetchrow(
        "SELECT (SELECT count(*) FROM entries WHERE store_id = $1) AS entries, "
        "(SELECT count(*) FROM entry_versions WHERE store_id = $1) AS entry_versions",
        store_id,
    )
    assert row is not None
    return {key: int(value) for key, value in row.items() if value}


async def restore(conn: asyncpg.Connection, rows_: Sequence[tuple[Any, ...]]) -> None:
    """Entries as archived (ids, versions, times, authors, expiry; a vector with
    `embedded_version` equal to the version, or none), each with its importer. The history
    trigger records each as a new version and the change log's trigger queues it for the full-text
    index; `replace_history` then puts the archived history in place of the first."""
    await conn.executemany(
        "INSERT INTO entries (id, store_id, scope, session_id, path, contents, description, source_type, "
        "creation_reason, creation_source, metadata, version, created_at, created_by, updated_at, "
        "updated_by, expires_at, embedding, embedded_version, embedding_model, state, superseded_by, "
        "imported_by, provenance) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb, $12::bigint, $13, $14, $15, $16, $17, "
        "$18::vector, CASE WHEN $18::vector IS NULL THEN NULL ELSE $12::bigint END, $19, $20, $21::uuid, "
        "$22, $23::jsonb)",
        rows_,
    )


async def replace_history(conn: asyncpg.Connection, store_id: str, rows_: Sequence[tuple[Any, ...]]) -> None:
    """The store's history becomes the archived versions, in their order, each with its importer."""
    await conn.execute("DELETE FROM entry_versions WHERE store_id = $1", store_id)
    await conn.executemany(
        "INSERT INTO entry_versions (store_id, scope, session_id, path, entry_id, version, contents, "
        "description, metadata, operation, changed_at, changed_by, redacted_at, redacted_by, "
        "redaction_reason, state, superseded_by, imported_by, provenance) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10, $11, $12, $13, $14, $15, $16, $17::jsonb, "
        "$18, $19::jsonb)",
        [(store_id, *row) for row in rows_],
    )
