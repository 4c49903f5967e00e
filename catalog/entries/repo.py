"""SQL for entries. Each write mode is one statement, so two concurrent writers never lose an
update; edits read the row under a lock and write it back in the same transaction. The change
log (`entry_changes`) is written by triggers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import asyncpg
import numpy as np

Conn: TypeAlias = asyncpg.Connection | asyncpg.Pool

COLUMNS = (
    "id, store_id, scope, session_id, path, contents, description, source_type, version, "
    "(extract(epoch FROM created_at) * 1000)::bigint AS created_at, created_by, "
    "(extract(epoch FROM updated_at) * 1000)::bigint AS updated_at, updated_by"
)
_KEY = "store_id = $1 AND scope = $2 AND session_id = $3 AND path = $4"
_VALUES = "($1, $2, $3, $4, $5, $6, $7, $8, $8)"
_INSERT = (
    "INSERT INTO entries (store_id, scope, session_id, path, contents, description, source_type, "
    "created_by, updated_by) VALUES " + _VALUES
)


async def insert_exclusive(conn: Conn, key: tuple[str, str, str, str], fields: dict[str, Any], by: str):  # type: ignore[no-untyped-def]
    return await conn.fetchrow(
        _INSERT + " ON CONFLICT (store_id, scope, session_id, path) DO NOTHING RETURNING " + COLUMNS,
        *key,
        fields["contents"],
        fields["description"],
        fields["source_type"],
        by,
    )


async def upsert_overwrite(conn: Conn, key: tuple[str, str, str, str], fields: dict[str, Any], by: str):  # type: ignore[no-untyped-def]
    return await conn.fetchrow(
        _INSERT + " ON CONFLICT (store_id, scope, session_id, path) DO UPDATE SET "
        "contents = EXCLUDED.contents, description = EXCLUDED.description, "
        "source_type = coalesce(EXCLUDED.source_type, entries.source_type), "
        "version = entries.version + 1, updated_at = clock_timestamp(), updated_by = EXCLUDED.updated_by "
        "RETURNING " + COLUMNS,
        *key,
        fields["contents"],
        fields["description"],
        fields["source_type"],
        by,
    )


async def upsert_append(  # type: ignore[no-untyped-def]
    conn: Conn, key: tuple[str, str, str, str], fields: dict[str, Any], by: str, *, dedupe: bool = True
):
    """Add the text as new lines at the end, unless exactly those lines are already there (so a
    retried append changes nothing and keeps the version). `dedupe=False` always appends (for a
    caller who may not read the entry: whether it changed must not tell what it holds)."""
    return await conn.fetchrow(
        _INSERT + " ON CONFLICT (store_id, scope, session_id, path) DO UPDATE SET "
        "contents = CASE WHEN entries.contents IS NULL OR entries.contents = '' THEN EXCLUDED.contents "
        "  WHEN entries.contents LIKE '%' || chr(10) THEN entries.contents || EXCLUDED.contents "
        "  ELSE entries.contents || chr(10) || EXCLUDED.contents END, "
        "description = coalesce(EXCLUDED.description, entries.description), "
        "source_type = coalesce(EXCLUDED.source_type, entries.source_type), "
        "version = entries.version + 1, updated_at = clock_timestamp(), updated_by = EXCLUDED.updated_by "
        "WHERE NOT $9 OR strpos(chr(10) || coalesce(entries.contents, '') || chr(10), "
        "             chr(10) || rtrim(EXCLUDED.contents, chr(10)) || chr(10)) = 0 "
        "   OR coalesce(EXCLUDED.description, entries.description) IS DISTINCT FROM entries.description "
        "RETURNING " + COLUMNS,
        *key,
        fields["contents"],
        fields["description"],
        fields["source_type"],
        by,
        dedupe,
    )


async def get(conn: Conn, key: tuple[str, str, str, str], *, for_update: bool = False):  # type: ignore[no-untyped-def]
    lock = " FOR UPDATE" if for_update else ""
    return await conn.fetchrow(f"SELECT {COLUMNS} FROM entries WHERE {_KEY}{lock}", *key)


async def update_contents(  # type: ignore[no-untyped-def]
    conn: Conn, entry_id: str, version: int, contents: str | None, description: str | None, by: str
):
    return await conn.fetchrow(
        "UPDATE entries SET contents = $3, description = $4, version = version + 1, "
        "updated_at = clock_timestamp(), updated_by = $5 WHERE id = $1 AND version = $2 RETURNING " + COLUMNS,
        entry_id,
        version,
        contents,
        description,
        by,
    )


async def delete(conn: Conn, key: tuple[str, str, str, str], version: int | None) -> tuple[bool, int | None]:
    """(deleted, current version when not deleted because the version did not match)."""
    row = await conn.fetchrow(
        f"WITH target AS (SELECT id, version FROM entries WHERE {_KEY}), "
        "gone AS (DELETE FROM entries e USING target t "
        "         WHERE e.id = t.id AND ($5::bigint IS NULL OR e.version = $5) RETURNING e.id) "
        "SELECT (SELECT version FROM target) AS version, (SELECT count(*) FROM gone) AS deleted",
        *key,
        version,
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
) -> list[asyncpg.Record]:
    """Ordered by (path, scope, session_id); `after` is the last key of the previous page."""
    after_path, after_scope, after_session = after or (None, None, None)
    return await conn.fetch(
        f"SELECT {COLUMNS}, contents IS NOT NULL AND contents <> '' AS has_contents FROM entries "
        "WHERE store_id = $1 AND scope = ANY($2::text[]) AND ($3::text IS NULL OR session_id = $3) "
        "AND ($4::text IS NULL OR starts_with(path, $4)) "
        "AND ($5::text IS NULL OR (path, scope, session_id) > ($5, $6, $7)) "
        "AND ($9::text IS NULL OR path = $9) "
        "ORDER BY path, scope, session_id LIMIT $8",
        store_id,
        list(scopes),
        session_id,
        path_prefix,
        after_path,
        after_scope,
        after_session,
        limit,
        exact_path,
    )


async def get_by_id(conn: Conn, store_id: str, entry_id: str, *, for_update: bool = False):  # type: ignore[no-untyped-def]
    lock = " FOR UPDATE" if for_update else ""
    return await conn.fetchrow(
        f"SELECT {COLUMNS} FROM entries WHERE store_id = $1 AND id = $2{lock}", store_id, entry_id
    )


async def delete_by_id(conn: Conn, store_id: str, entry_id: str) -> bool:
    status: str = await conn.execute(
        "DELETE FROM entries WHERE store_id = $1 AND id = $2", store_id, entry_id
    )
    return status.endswith(" 1")


async def delete_scope(conn: Conn, store_id: str, scope: str) -> int:
    status: str = await conn.execute(
        "DELETE FROM entries WHERE store_id = $1 AND scope = $2", store_id, scope
    )
    return int(status.split()[-1])


async def erase_scope(conn: Conn, scope: str) -> list[asyncpg.Record]:
    """Delete a scope's entries from every store; how many went from which store."""
    return await conn.fetch(
        "WITH gone AS (DELETE FROM entries WHERE scope = $1 RETURNING store_id) "
        "SELECT c.name || '.' || s.name || '.' || m.name AS memory_store, count(*) AS deleted "
        "FROM gone g JOIN memory_stores m ON m.id = g.store_id JOIN schemas s ON s.id = m.schema_id "
        "JOIN catalogs c ON c.id = s.catalog_id GROUP BY 1 ORDER BY 1",
        scope,
    )


async def by_ids(conn: Conn, ids: Sequence[str]) -> dict[str, asyncpg.Record]:
    rows = await conn.fetch(f"SELECT {COLUMNS} FROM entries WHERE id = ANY($1::uuid[])", list(ids))
    return {str(row["id"]): row for row in rows}


async def set_embeddings(conn: Conn, rows: Sequence[tuple[str, int, np.ndarray]]) -> None:
    await conn.executemany(
        "UPDATE entries SET embedding = $3, embedded_version = version WHERE id = $1 AND version = $2", rows
    )


async def count_unembedded(conn: Conn) -> int:
    return int(
        await conn.fetchval("SELECT count(*) FROM entries WHERE embedded_version IS DISTINCT FROM version")
    )


async def forget_embeddings(conn: Conn) -> None:
    """Mark every vector stale (they are recomputed by the backfill or `catalog reindex`)."""
    await conn.execute("UPDATE entries SET embedded_version = NULL")


async def rebuild_vector_index(conn: Conn) -> None:
    await conn.execute("REINDEX INDEX entries_embedding_hnsw")


async def claim_unembedded(conn: asyncpg.Connection, limit: int) -> list[asyncpg.Record]:
    """Lock (inside the caller's transaction) up to `limit` entries whose vector is stale,
    skipping rows another worker holds."""
    return await conn.fetch(
        "SELECT id, version, contents, description FROM entries "
        "WHERE embedded_version IS DISTINCT FROM version LIMIT $1 FOR UPDATE SKIP LOCKED",
        limit,
    )


async def has_unembedded(conn: Conn, store_id: str, scopes: Sequence[str]) -> bool:
    return bool(
        await conn.fetchval(
            "SELECT EXISTS (SELECT 1 FROM entries WHERE embedded_version IS DISTINCT FROM version "
            "AND store_id = $1 AND scope = ANY($2::text[]))",
            store_id,
            list(scopes),
        )
    )
