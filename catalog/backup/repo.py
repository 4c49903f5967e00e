"""SQL of backup and restore: the bulk reads of an export and the bulk writes of an import.

This module reads and writes the tables of other slices (entries and their history, grants,
conversations, sessions, transcript vectors, lineage) because an archive copies rows as they are:
ids of items, versions, times and authors, vectors with their model. The slices' own functions
write rows as a request makes them (new times, the caller as author, one row at a time), so they
cannot restore one; what they can do is used instead (the store's row: `catalog.governance.
namespace.repo`). The statements here name the store in every row, as every slice's do.

An export reads in one REPEATABLE READ transaction (`snapshot`): the archive is the store at one
instant. An import writes in the caller's transaction (`catalog.recorder.audited`): all of it, or
nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeAlias

import asyncpg

Conn: TypeAlias = asyncpg.Connection | asyncpg.Pool

BATCH = 500  # rows fetched per round trip of a cursor


@asynccontextmanager
async def snapshot(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
    """A connection in a read-only REPEATABLE READ transaction: every read sees one instant."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        yield conn


async def store(conn: Conn, store_id: str) -> asyncpg.Record | None:
    """The store's row as an archive defines it (kind included)."""
    return await conn.fetchrow(
        "SELECT name, kind, description, properties, owner, scope_binding, shared_scopes, legal_hold, "
        "default_ttl_seconds, trust_policy, created_at, created_by, updated_at, updated_by "
        "FROM memory_stores WHERE id = $1",
        store_id,
    )


async def store_kind(conn: Conn, store_id: str) -> str | None:
    value = await conn.fetchval("SELECT kind FROM memory_stores WHERE id = $1", store_id)
    return None if value is None else str(value)


# --- export: each kind's rows, in archive order ---------------------------------------------------

# every statement takes the store's id as $1 and (but the grants') the scope filter as $2
_EXPORT: dict[str, str] = {
    "grant": "SELECT principal, privilege, granted_by, granted_at, scopes FROM grants "
    "WHERE securable_id = $1 ORDER BY principal, privilege",
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
    "conversation": "SELECT id, scope, scope_kind, metadata, last_position, created_at, created_by, "
    "updated_at FROM conversations WHERE store_id = $1 AND ($2::text IS NULL OR scope = $2) ORDER BY id",
    "conversation_item": "SELECT i.conversation_id, i.position, i.id, i.type, i.item, i.text, "
    "i.created_at, i.created_by FROM conversation_items i "
    "JOIN conversations c ON c.store_id = i.store_id AND c.id = i.conversation_id "
    "WHERE i.store_id = $1 AND ($2::text IS NULL OR c.scope = $2) ORDER BY i.conversation_id, i.position",
    "session": "SELECT session_id, actor_id, parent_session_id, root_session_id, metadata, "
    "next_position, created_at, updated_at, last_activity_at FROM agent_sessions "
    "WHERE store_id = $1 AND ($2::text IS NULL OR actor_id = $2) ORDER BY created_at, session_id",
    "session_item": "SELECT s.session_id, i.position, i.item_id::text AS item_id, i.data, i.created_at "
    "FROM session_items i JOIN agent_sessions s ON s.store_id = i.store_id AND s.id = i.session "
    "WHERE i.store_id = $1 AND ($2::text IS NULL OR s.actor_id = $2) ORDER BY s.created_at, s.session_id, "
    "i.position",
    # only the items whose vector is current: the rest are embedded after the import anyway
    "transcript": "SELECT source, thread_id, item_id, embedding, embedding_model FROM transcript_items "
    "WHERE store_id = $1 AND ($2::text IS NULL OR scope = $2) AND embedding IS NOT NULL "
    "AND embedded_version = version ORDER BY source, thread_id, position, item_id",
    "lineage": "SELECT target_entry_id::text AS target_entry_id, target_scope, "
    "nullif(target_session_id, '') AS target_session_id, target_path, "
    "source_entry_id::text AS source_entry_id, "
    "CASE WHEN source_store_id <> $1 THEN source_store_id::text END AS source_store_id, "
    "CASE WHEN source_store_id <> $1 THEN (SELECT c.name || '.' || s.name || '.' || m.name "
    "  FROM memory_stores m JOIN schemas s ON s.id = m.schema_id JOIN catalogs c ON c.id = s.catalog_id "
    "  WHERE m.id = l.source_store_id) END AS source_store, "
    "source_scope, nullif(source_session_id, '') AS source_session_id, source_path, created_at, created_by "
    "FROM entry_lineage l WHERE target_store_id = $1 AND ($2::text IS NULL OR target_scope = $2) "
    "ORDER BY target_scope, target_path, source_store_id, source_scope, source_path",
    "origin": "SELECT target_entry_id::text AS target_entry_id, target_scope, "
    "nullif(target_session_id, '') AS target_session_id, target_path, source_kind, "
    "CASE WHEN source_store_id <> $1 THEN source_store_id::text END AS source_store_id, "
    "CASE WHEN source_store_id <> $1 THEN (SELECT c.name || '.' || s.name || '.' || m.name "
    "  FROM memory_stores m JOIN schemas s ON s.id = m.schema_id JOIN catalogs c ON c.id = s.catalog_id "
    "  WHERE m.id = l.source_store_id) END AS source_store, "
    "source_scope, source_thread_id, source_item_ids, created_at, created_by, updated_at, updated_by "
    "FROM transcript_lineage l WHERE target_store_id = $1 AND ($2::text IS NULL OR target_scope = $2) "
    "ORDER BY target_scope, target_path, source_kind, source_store_id, source_thread_id",
}
# the grants of the store are its definition: a scope filter keeps them all
_UNFILTERED = frozenset({"grant"})


async def rows(conn: asyncpg.Connection, kind: str, store_id: str, scope: str | None) -> AsyncIterator[Any]:
    """The store's rows of one kind of archive line, in archive order (inside `snapshot`)."""
    sql = _EXPORT[kind]
    args: tuple[Any, ...] = (store_id,) if kind in _UNFILTERED else (store_id, scope)
    async for row in conn.cursor(sql, *args, prefetch=BATCH):
        yield row


EXPORTED_KINDS = tuple(_EXPORT)


# --- import ---------------------------------------------------------------------------------------


async def lock_store(conn: asyncpg.Connection, store_id: str) -> None:
    await conn.execute("SELECT 1 FROM memory_stores WHERE id = $1 FOR UPDATE", store_id)


async def held_rows(conn: Conn, store_id: str) -> dict[str, int]:
    """What the store holds, by kind (an import goes only into a store that holds nothing)."""
    row = await conn.fetchrow(
        "SELECT (SELECT count(*) FROM entries WHERE store_id = $1) AS entries, "
        "(SELECT count(*) FROM entry_versions WHERE store_id = $1) AS entry_versions, "
        "(SELECT count(*) FROM conversations WHERE store_id = $1) AS conversations, "
        "(SELECT count(*) FROM agent_sessions WHERE store_id = $1) AS sessions",
        store_id,
    )
    assert row is not None
    return {key: int(value) for key, value in row.items() if value}


async def taken_conversation_ids(conn: Conn, ids: Sequence[str]) -> set[str]:
    """The conversation ids some store of this server already has (they are unique server-wide)."""
    rows_ = await conn.fetch(
        "SELECT conversation_id FROM conversation_stores WHERE conversation_id = ANY($1::text[])", list(ids)
    )
    return {row[0] for row in rows_}


async def insert_grants(
    conn: Conn, store_id: str, grants: Sequence[tuple[str, str, str, Any, list[str] | None]]
) -> None:
    """(principal, privilege, granted_by, granted_at, scope patterns or None); a grant the store
    has already is kept."""
    await conn.executemany(
        "INSERT INTO grants "
        "(securable_type, securable_id, principal, privilege, granted_by, granted_at, scopes) "
        "VALUES ('MEMORY_STORE', $1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING",
        [(store_id, *grant) for grant in grants],
    )


async def insert_entries(conn: asyncpg.Connection, rows_: Sequence[tuple[Any, ...]]) -> None:
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


async def insert_conversations(
    conn: asyncpg.Connection, store_id: str, rows_: Sequence[tuple[Any, ...]]
) -> None:
    """(id, scope, scope_kind, metadata, last_position, created_at, created_by, updated_at), with
    each id's store (`conversation_stores`, which the conversations slice keeps with them)."""
    await conn.executemany(
        "INSERT INTO conversations (id, store_id, scope, scope_kind, metadata, last_position, created_at, "
        "created_by, updated_at) VALUES ($1, $9, $2, $3, $4::jsonb, $5, $6, $7, $8)",
        [(*row, store_id) for row in rows_],
    )
    await conn.executemany(
        "INSERT INTO conversation_stores (conversation_id, store_id) VALUES ($1, $2)",
        [(row[0], store_id) for row in rows_],
    )


async def insert_conversation_items(
    conn: asyncpg.Connection, store_id: str, rows_: Sequence[tuple[Any, ...]]
) -> None:
    """(conversation id, position, id, type, item JSON text, text, created_at, created_by), one
    statement per batch: the transcript trigger derives the searchable text of each message."""
    for start in range(0, len(rows_), BATCH):
        batch = rows_[start : start + BATCH]
        await conn.execute(
            "INSERT INTO conversation_items (store_id, conversation_id, position, id, type, item, text, "
            "created_at, created_by) "
            "SELECT $1, c, p, i, t, d::jsonb, x, a, b FROM unnest($2::text[], $3::bigint[], "
            "$4::text[], $5::text[], $6::text[], $7::text[], $8::timestamptz[], $9::text[]) "
            "AS u (c, p, i, t, d, x, a, b)",
            store_id,
            *[[row[k] for row in batch] for k in range(8)],
        )


async def insert_sessions(
    conn: asyncpg.Connection, store_id: str, rows_: Sequence[tuple[Any, ...]]
) -> dict[str, str]:
    """(session id, actor, parent, root, metadata, next_position, created_at, updated_at,
    last_activity_at); the row id of each session id."""
    ids: dict[str, str] = {}
    for row in rows_:
        ids[row[0]] = str(
            await conn.fetchval(
                "INSERT INTO agent_sessions (store_id, session_id, actor_id, parent_session_id, "
                "root_session_id, metadata, next_position, created_at, updated_at, last_activity_at) "
                "VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10) RETURNING id",
                store_id,
                *row,
            )
        )
    return ids


async def insert_session_items(
    conn: asyncpg.Connection, store_id: str, rows_: Sequence[tuple[Any, ...]]
) -> None:
    """(session row id, position, item id, data JSON text, created_at), one statement per batch."""
    for start in range(0, len(rows_), BATCH):
        batch = rows_[start : start + BATCH]
        await conn.execute(
            "INSERT INTO session_items (store_id, session, position, item_id, data, created_at) "
            "SELECT $1, s, p, i, d::jsonb, a FROM unnest($2::uuid[], $3::bigint[], $4::uuid[], $5::text[], "
            "$6::timestamptz[]) AS u (s, p, i, d, a)",
            store_id,
            *[[row[k] for row in batch] for k in range(5)],
        )


async def set_transcript_vectors(
    conn: asyncpg.Connection, store_id: str, rows_: Sequence[tuple[Any, ...]]
) -> int:
    """(source, thread id, item id, vector, model) onto the items' derived rows; how many found."""
    found = 0
    for source, thread_id, item_id, vector, model in rows_:
        status: str = await conn.execute(
            "UPDATE transcript_items SET embedding = $5, embedded_version = version, embedding_model = $6 "
            "WHERE store_id = $1 AND source = $2 AND thread_id = $3 AND item_id = $4 "
            # one vector passage only: a longer text's vector is made again, whole (search.passages)
            "AND length(contents) <= 96 * 24 "
            "AND cardinality(regexp_split_to_array(btrim(contents), '\\s+')) <= 96",
            store_id,
            source,
            thread_id,
            item_id,
            vector,
            model,
        )
        found += int(status.split()[-1])
    return found


async def count_transcripts(conn: Conn, store_id: str) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM transcript_items WHERE store_id = $1", store_id))


async def insert_lineage(conn: asyncpg.Connection, rows_: Sequence[tuple[Any, ...]]) -> None:
    await conn.executemany(
        "INSERT INTO entry_lineage (target_entry_id, target_store_id, target_scope, target_session_id, "
        "target_path, source_entry_id, source_store_id, source_scope, source_session_id, source_path, "
        "created_at, created_by) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        rows_,
    )


async def insert_origins(conn: asyncpg.Connection, rows_: Sequence[tuple[Any, ...]]) -> None:
    await conn.executemany(
        "INSERT INTO transcript_lineage (target_entry_id, target_store_id, target_scope, target_session_id, "
        "target_path, source_kind, source_store_id, source_scope, source_thread_id, source_item_ids, "
        "created_at, created_by, updated_at, updated_by) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10::text[], $11, $12, $13, $14)",
        rows_,
    )
