"""What a store's archive (`catalog.backup`) holds of its lineage: the edges into its entries, from
entries (`entry_lineage`) and from conversations and sessions (`transcript_lineage`), as they are,
read in archive order inside the export's snapshot (a source in another store named by its full
name too), and written back as they were by an import."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg

BATCH = 500  # rows fetched per round trip of the export's cursor

# the full name of an edge's source store, where it is not the exported one ($1)
_SOURCE_STORE = (
    "CASE WHEN source_store_id <> $1 THEN source_store_id::text END AS source_store_id, "
    "CASE WHEN source_store_id <> $1 THEN (SELECT c.name || '.' || s.name || '.' || m.name "
    "  FROM memory_stores m JOIN schemas s ON s.id = m.schema_id JOIN catalogs c ON c.id = s.catalog_id "
    "  WHERE m.id = l.source_store_id) END AS source_store, "
)
# each statement takes the store's id as $1 and the scope an export is limited to (or NULL) as $2
_EXPORT: dict[str, str] = {
    "lineage": "SELECT target_entry_id::text AS target_entry_id, target_scope, "
    "nullif(target_session_id, '') AS target_session_id, target_path, "
    "source_entry_id::text AS source_entry_id, " + _SOURCE_STORE + "source_scope, "
    "nullif(source_session_id, '') AS source_session_id, source_path, created_at, created_by "
    "FROM entry_lineage l WHERE target_store_id = $1 AND ($2::text IS NULL OR target_scope = $2) "
    "ORDER BY target_scope, target_path, source_store_id, source_scope, source_path",
    "origin": "SELECT target_entry_id::text AS target_entry_id, target_scope, "
    "nullif(target_session_id, '') AS target_session_id, target_path, source_kind, " + _SOURCE_STORE + ""
    "source_scope, source_thread_id, source_item_ids, created_at, created_by, updated_at, updated_by "
    "FROM transcript_lineage l WHERE target_store_id = $1 AND ($2::text IS NULL OR target_scope = $2) "
    "ORDER BY target_scope, target_path, source_kind, source_store_id, source_thread_id",
}
KINDS = tuple(_EXPORT)


async def rows(conn: asyncpg.Connection, kind: str, store_id: str, scope: str | None) -> AsyncIterator[Any]:
    """The store's edges of one kind, in archive order (in the export's snapshot)."""
    async for row in conn.cursor(_EXPORT[kind], store_id, scope, prefetch=BATCH):
        yield row


async def restore(conn: asyncpg.Connection, rows_: Sequence[tuple[Any, ...]]) -> None:
    """Edges from entries: (target entry id, store, scope, session, path, source entry id, store,
    scope, session, path, created_at, created_by)."""
    await conn.executemany(
        "INSERT INTO entry_lineage (target_entry_id, target_store_id, target_scope, target_session_id, "
        "target_path, source_entry_id, source_store_id, source_scope, source_session_id, source_path, "
        "created_at, created_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        rows_,
    )


async def restore_origins(conn: asyncpg.Connection, rows_: Sequence[tuple[Any, ...]]) -> None:
    """Edges from conversations and sessions: (target entry id, store, scope, session, path, source
    kind, store, scope, thread, item ids, created_at, created_by, updated_at, updated_by)."""
    await conn.executemany(
        "INSERT INTO transcript_lineage (target_entry_id, target_store_id, target_scope, target_session_id, "
        "target_path, source_kind, source_store_id, source_scope, source_thread_id, source_item_ids, "
        "created_at, created_by, updated_at, updated_by) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::text[], $11, $12, $13, $14)",
        rows_,
    )
