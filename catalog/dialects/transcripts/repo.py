"""The transcript rows search hits are read back from (`transcript_items`, kept by triggers on the
conversation and session item tables: migration 0015)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg


@dataclass(frozen=True)
class TranscriptRow:
    id: str
    store_id: str
    scope: str
    source: str  # conversation | session
    thread_id: str  # the conversation id or the session id
    item_id: str
    role: str
    text: str
    created_at: int  # epoch milliseconds


async def by_ids(pool: asyncpg.Pool, store_id: str, ids: Sequence[str]) -> dict[str, TranscriptRow]:
    """The store's transcript rows with these ids."""
    rows = await pool.fetch(
        "SELECT id::text, store_id::text, scope, source, thread_id, item_id, path AS role, "
        "contents AS text, (extract(epoch FROM created_at) * 1000)::bigint AS created_at "
        "FROM transcript_items WHERE store_id = $1 AND id = ANY($2::uuid[])",
        store_id,
        list(ids),
    )
    return {row["id"]: TranscriptRow(**dict(row)) for row in rows}
