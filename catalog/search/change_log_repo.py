"""SQL of the change logs the indexer tails (`entry_changes`, `transcript_changes`), their prune
marks (`change_log_pruned`), and the rows of a corpus as its full-text index holds them.

A change row is (seq, the changed row's id, op), written by triggers in the writing transaction;
`change_log_pruned` holds, per change log, the highest seq deleted by pruning. Table and column
names come from `Corpus` (constants of the code); every value is bound.
"""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import asyncpg

from catalog.search.corpus import Corpus
from catalog.search.fulltext import IndexedEntry

Conn: TypeAlias = asyncpg.Connection | asyncpg.Pool


@dataclass(frozen=True)
class Change:
    seq: int
    entry_id: str  # the changed row's id (an entry's or a transcript item's)
    op: str


def _indexed(corpus: Corpus) -> str:
    """The columns of an `IndexedEntry`, in its order."""
    return (
        "id::text, store_id::text, scope, session_id, path, coalesce(contents, ''), "
        f"coalesce(description, ''), {corpus.metadata}, {corpus.state}"
    )


async def log_changed(conn: Conn, corpus: Corpus, store_id: str, ids: Sequence[str]) -> None:
    """Log rows of the store as changed (`upsert`), for a change their triggers do not log (one
    that keeps the row's version: a redaction), so that the indexers read them again."""
    await conn.execute(
        f"INSERT INTO {corpus.changes} (store_id, {corpus.key}, op) "
        "SELECT $1, id, 'upsert' FROM unnest($2::uuid[]) AS t(id)",
        store_id,
        list(ids),
    )


async def head(conn: Conn, corpus: Corpus) -> int:
    """The highest seq of the corpus's change log (0 when it is empty)."""
    return int(await conn.fetchval(f"SELECT coalesce(max(seq), 0) FROM {corpus.changes}"))


async def pruned_up_to(conn: Conn, corpus: Corpus) -> int:
    """How far the change log has been pruned: no row at or below this seq is left."""
    value = await conn.fetchval("SELECT up_to FROM change_log_pruned WHERE changes = $1", corpus.changes)
    return int(value or 0)


async def changes_past(conn: Conn, corpus: Corpus, watermark: int, limit: int) -> tuple[int, list[Change]]:
    """(the prune mark, the first `limit` change rows past `watermark` in seq order), read in one
    statement, so the mark is the one that held when the rows were read."""
    # one row of NULLs when no change row is past the watermark
    found = await conn.fetch(
        "SELECT mark.up_to, c.seq, c.entry_id, c.op FROM (SELECT coalesce((SELECT up_to "
        "FROM change_log_pruned WHERE changes = $3), 0) AS up_to) mark LEFT JOIN LATERAL ("
        f"SELECT seq, {corpus.key}::text AS entry_id, op FROM {corpus.changes} "
        "WHERE seq > $1 ORDER BY seq LIMIT $2) c ON true",
        watermark,
        limit,
        corpus.changes,
    )
    changes = [Change(row["seq"], row["entry_id"], row["op"]) for row in found if row["seq"] is not None]
    return int(found[0]["up_to"]), changes


async def current(conn: Conn, corpus: Corpus, ids: Sequence[str]) -> list[IndexedEntry]:
    """The given rows as they are now (a row deleted since is not among them)."""
    rows = await conn.fetch(
        f"SELECT {_indexed(corpus)} FROM {corpus.table} WHERE id = ANY($1::uuid[])", list(ids)
    )
    return [IndexedEntry(*row) for row in rows]


async def every_row(conn: asyncpg.Connection, corpus: Corpus, prefetch: int) -> AsyncIterator[IndexedEntry]:
    """Every row of the corpus, read by a cursor (inside the caller's transaction: its snapshot)."""
    async for row in conn.cursor(f"SELECT {_indexed(corpus)} FROM {corpus.table}", prefetch=prefetch):
        yield IndexedEntry(*row)


async def prune_oldest(
    conn: asyncpg.Connection, corpus: Corpus, limit: int, retention: datetime.timedelta
) -> tuple[int | None, int]:
    """Delete the oldest change rows by seq, at most `limit`, up to (not including) the first one
    younger than `retention`, and raise the prune mark to the highest seq deleted; returns (that
    seq, None when the log is empty; how many rows were deleted). Run it in a transaction, so the
    mark moves with the deletion."""
    changes = corpus.changes
    top = await conn.fetchval(
        "SELECT coalesce(min(seq) FILTER (WHERE at >= clock_timestamp() - $2::interval) - 1, "
        f"max(seq)) FROM (SELECT seq, at FROM {changes} ORDER BY seq LIMIT $1) oldest",
        limit,
        retention,
    )
    if top is None:
        return None, 0
    status = await conn.execute(f"DELETE FROM {changes} WHERE seq <= $1", top)
    deleted = int(status.split()[-1])
    if deleted:
        await conn.execute(
            "INSERT INTO change_log_pruned AS p (changes, up_to) VALUES ($1, $2) "
            "ON CONFLICT (changes) DO UPDATE SET up_to = greatest(p.up_to, excluded.up_to)",
            changes,
            top,
        )
    return int(top), deleted
