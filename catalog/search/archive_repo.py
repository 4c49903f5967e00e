"""What a store's archive (`catalog.backup`) holds of its transcripts' derived rows: the vectors of
conversation and session items (the items themselves are their slices'), read inside the
export's snapshot, and put back by an import onto the rows the items' trigger derived again."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg

from catalog.search.repo import Conn

BATCH = 500  # rows fetched per round trip of the export's cursor

KINDS = ("transcript",)


async def rows(conn: asyncpg.Connection, kind: str, store_id: str, scope: str | None) -> AsyncIterator[Any]:
    """The vectors of the store's items that are of their current text (the rest are embedded
    after an import anyway), in archive order."""
    assert kind == "transcript", kind
    async for row in conn.cursor(
        "SELECT source, thread_id, item_id, embedding, embedding_model FROM transcript_items "
        "WHERE store_id = $1 AND ($2::text IS NULL OR scope = $2) AND embedding IS NOT NULL "
        "AND embedded_version = version ORDER BY source, thread_id, position, item_id",
        store_id,
        scope,
        prefetch=BATCH,
    ):
        yield row


async def restore_vectors(conn: asyncpg.Connection, store_id: str, rows_: Sequence[tuple[Any, ...]]) -> int:
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


async def count(conn: Conn, store_id: str) -> int:
    """How many transcript items the store holds."""
    return int(await conn.fetchval("SELECT count(*) FROM transcript_items WHERE store_id = $1", store_id))
