"""What extraction remembers: per session and memory store, the items it last extracted from
(`extraction_marks`, migration 0017), so that extracting an unchanged session again does
nothing, and a pipeline run knows which sessions changed."""

from __future__ import annotations

from typing import TypeAlias

import asyncpg

Conn: TypeAlias = asyncpg.Connection | asyncpg.Pool


async def mark(conn: Conn, session_store_id: str, session_row: str, memory_store_id: str) -> str | None:
    """The digest of the items last extracted from, or None."""
    value = await conn.fetchval(
        "SELECT items_digest FROM extraction_marks "
        "WHERE store_id = $1 AND session = $2 AND memory_store_id = $3",
        session_store_id,
        session_row,
        memory_store_id,
    )
    return None if value is None else str(value)


async def set_mark(
    conn: Conn, session_store_id: str, session_row: str, memory_store_id: str, digest: str, by: str
) -> None:
    """Keyed by the session's store (the session store) and row, and the memory store."""
    await conn.execute(
        "INSERT INTO extraction_marks (store_id, session, memory_store_id, items_digest, extracted_by) "
        "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (store_id, session, memory_store_id) DO UPDATE "
        "SET items_digest = EXCLUDED.items_digest, extracted_by = EXCLUDED.extracted_by, "
        "extracted_at = clock_timestamp()",
        session_store_id,
        session_row,
        memory_store_id,
        digest,
        by,
    )
