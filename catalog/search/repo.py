"""SQL of the search slice's vectors: vector search in PostgreSQL (pgvector), the embedding
worker's claims and vectors, and what hybrid ranking reads about its candidates. The change logs'
SQL is in `change_log_repo`, the large scopes' own indexes' in `scope_index_repo`.

Vector search is exact where the filter is selective. An HNSW scan filtered by store and scope
can return fewer rows than asked, silently (pgvector 0.8's iterative scans, `hnsw.iterative_scan`,
continue the scan instead, but measured at 1M entries they found fewer of the exact answer's rows
than these choices, at no better latency: docs/benchmarks.md, bench/vector_filter.py). So: inside
scopes of at most `EXACT_LIMIT` entries, or scopes too small a share of the graph for the HNSW
candidates to hold enough of them, the search is an exact scan (fenced with OFFSET 0 so the
planner cannot swap in the HNSW index); otherwise the HNSW index is read with oversampling, and
if the filtered result is short, the exact scan runs after all. Results never go missing because
of the filter.

The whole table's HNSW graph holds the vectors of large scopes only (`GRAPH_MIN`, migration 0043):
an insertion into the graph is the dearest part of a write, and a scope too small to be searched
through the graph alone gains nothing from it. A scope set's size is counted in the graph; a
search that reads the graph reads the rows of its scopes outside it by an exact scan in the same
statement (at most about `GRAPH_MIN` rows a scope: those written before it grew), and ranks both.

Table names come from `Corpus` (constants of the code); every value is bound but the HNSW scan's
candidate count, an int the code computes, written into the statement so the planner sees it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import asyncpg
import numpy as np
from pgvector import Vector

from catalog.db.pool import IDS, joined_ids
from catalog.search import scope_index
from catalog.search.corpus import ENTRIES, Corpus
from catalog.search.passages import PASSAGE_PENALTY

EXACT_LIMIT = 5_000
OVERSAMPLE = 16
MIN_CANDIDATES = 400
MAX_CANDIDATES = 1000  # pgvector's hnsw.ef_search ceiling
_COUNT_TTL = 30.0
# an entry's vector enters the whole table's HNSW graph when its scope holds at least this many
# entries as the vector is stored (`set_embeddings`): a search of one smaller scope is always an
# exact scan, and a search of many (at most MAX_SCOPES) scans at most this many rows of each exactly
GRAPH_MIN = 1_000

# the distance a row is ranked by is its cosine distance plus its length's penalty
# (`passages.PASSAGE_PENALTY`: a code constant, written into the statements)
_PENALTY = f"{float(PASSAGE_PENALTY)!r} * ln(passages)"
_FILTER = (
    "store_id = $1 AND scope = ANY($2::text[]) AND ($3::text IS NULL OR session_id = $3) "
    "AND ($4::text IS NULL OR starts_with(path, $4)) AND embedding IS NOT NULL"
)
# a metadata filter (entries only: `metadata @> $7`), inside the scan, so `limit` rows still come back
_WHERE = " AND metadata @> $7::jsonb"


class VectorSearch:
    # the fewest candidates a scope's own index is read for: at 1M entries, 40 found 0.44 of the
    # exact top 10 in a scope of 100k entries, 200 found 0.89 for 2 ms more (bench/vector_filter.py)
    own_candidates = 200

    def __init__(self, pool: asyncpg.Pool, corpus: Corpus = ENTRIES, *, scope_index_min: int = 0) -> None:
        self.pool = pool
        self.corpus = corpus
        # scopes of at least this many entries may have a vector index of their own
        # (`catalog.search.scope_index`; 0: never looked for)
        self.scope_index_min = scope_index_min if corpus is ENTRIES else 0
        self._sizes: dict[tuple[str, tuple[str, ...], int, str], tuple[float, int]] = {}
        self._own: dict[tuple[str, str], tuple[float, bool]] = {}
        self.fallbacks = 0
        self.own_index_searches = 0
        self.graph_searches = 0  # searches that read the whole table's HNSW graph
        self._rows = 0
        self._rows_at = float("-inf")

    async def _graph_rows(self) -> int:
        """How many rows the whole table's HNSW graph holds, as PostgreSQL last estimated it (the
        index's `reltuples`, kept by VACUUM and ANALYZE; cheap, refreshed briefly): what the
        graph's candidates are drawn from (of the entries, only large scopes' rows: `GRAPH_MIN`);
        0 while the index is missing (dropped by hand: every set of scopes is then the exact scan's
        up to `EXACT_LIMIT`, and a larger one's statement is read without it)."""
        now = time.monotonic()
        if now - self._rows_at > _COUNT_TTL:
            self._rows = int(
                await self.pool.fetchval(
                    "SELECT coalesce((SELECT greatest(reltuples, 0) FROM pg_class "
                    "WHERE oid = to_regclass($1)), 0)::bigint",
                    self.corpus.hnsw_index,
                )
            )
            self._rows_at = now
        return self._rows

    async def _size(
        self, store_id: str, scopes: Sequence[str], cap: int, where: Mapping[str, Any] | None = None
    ) -> int:
        """How many entries the scopes hold (with `where`: whose metadata holds it), counted up to
        just above `cap` (cached briefly); of a corpus with a `graph` column, those in the graph
        (the others are scanned exactly on every path)."""
        key = (store_id, tuple(sorted(scopes)), cap, json.dumps(where, sort_keys=True) if where else "")
        cached = self._sizes.get(key)
        now = time.monotonic()
        if cached and now - cached[0] < _COUNT_TTL:
            return cached[1]
        graph = f" AND {self.corpus.graph}" if self.corpus.graph else ""
        size = int(
            await self.pool.fetchval(
                f"SELECT count(*) FROM (SELECT 1 FROM {self.corpus.table} WHERE store_id = $1 "
                f"AND scope = ANY($2::text[]){graph} AND metadata @> $4::jsonb LIMIT $3) capped"
                if where
                else f"SELECT count(*) FROM (SELECT 1 FROM {self.corpus.table} WHERE store_id = $1 "
                f"AND scope = ANY($2::text[]){graph} LIMIT $3) capped",
                store_id,
                list(scopes),
                cap + 1,
                *([where] if where else []),
            )
        )
        if len(self._sizes) > 50_000:
            self._sizes.clear()
        self._sizes[key] = (now, size)
        return size

    async def search(
        self,
        store_id: str,
        scopes: Sequence[str],
        vector: np.ndarray,
        limit: int,
        *,
        session_id: str | None = None,
        path_prefix: str | None = None,
        where: Mapping[str, Any] | None = None,
        include_inactive: bool = False,
        also: Sequence[str] = (),
    ) -> tuple[list[tuple[str, float]], dict[str, float]]:
        """(entry id, cosine similarity), best first; with `where` (a metadata filter), only
        entries whose metadata holds each of its pairs; only active entries unless
        `include_inactive` (superseded and merged ones too). And, in the same statement,
        `similarities` of the rows of the store named in `also` (a hybrid search's keyword
        candidates): their cosine, less the length's penalty, where they have a vector."""
        if where and self.corpus.metadata == "NULL::jsonb":  # rows without metadata hold no pair
            return [], await similarities(self.pool, store_id, also, vector, self.corpus)
        args: tuple[Any, ...] = (store_id, list(scopes), session_id, path_prefix, vector, limit)
        condition = _FILTER if include_inactive else f"{_FILTER} AND {self.corpus.state} = 'active'"
        if where:
            args, condition = (*args, where), condition + _WHERE
        candidates = min(max(limit * OVERSAMPLE, MIN_CANDIDATES), MAX_CANDIDATES)
        graph_rows = max(await self._graph_rows(), 1)
        # HNSW only pays off when the candidates it returns hold enough rows of these scopes (a
        # share of the graph's rows: `size` counts theirs in it): count the scopes only as far as
        # that decision needs
        enough = max(EXACT_LIMIT, -(-3 * limit * graph_rows // (2 * candidates)))
        large = self.scope_index_min and len(scopes) == 1
        size = await self._size(store_id, scopes, max(enough, self.scope_index_min if large else 0), where)
        if large and size >= self.scope_index_min and await self._has_own_index(store_id, scopes[0]):
            rows, cosines, found = await self._own_index(
                condition,
                args,
                scopes[0],
                limit,
                filtered=bool(session_id is not None or path_prefix is not None or where),
                also=also,
            )
            if found >= min(limit, size):
                return rows, cosines
            self.fallbacks += 1
            return await self._exact(condition, *args, also=also)
        if size <= enough:
            return await self._exact(condition, *args, also=also)
        self.graph_searches += 1
        rows, cosines, found = await self._hnsw(self.hnsw_sql(condition, candidates), candidates, args, also)
        if found >= limit:  # the graph's filtered candidates fill the answer (with the rows outside it)
            return rows, cosines
        self.fallbacks += 1
        return await self._exact(condition, *args, also=also)

    async def _has_own_index(self, store_id: str, scope: str) -> bool:
        """Whether the scope has a valid vector index of its own (cached briefly)."""
        now = time.monotonic()
        cached = self._own.get((store_id, scope))
        if cached and now - cached[0] < _COUNT_TTL:
            return cached[1]
        ready = await scope_index.ready_index(self.pool, store_id, scope)
        if len(self._own) > 50_000:
            self._own.clear()
        self._own[(store_id, scope)] = (now, ready)
        return ready

    async def _own_index(
        self,
        condition: str,
        args: tuple[Any, ...],
        scope: str,
        limit: int,
        *,
        filtered: bool,
        also: Sequence[str] = (),
    ) -> tuple[list[tuple[str, float]], dict[str, float], int]:
        """The nearest rows of one scope from its own HNSW index: the scan reads only that scope's
        graph, so it takes a few more candidates than asked (more when other filters apply)."""
        self.own_index_searches += 1
        candidates = min(max(limit * (OVERSAMPLE if filtered else 2), self.own_candidates), MAX_CANDIDATES)
        return await self._hnsw(
            self.hnsw_sql(condition, candidates, own_scope=len(args) + 1), candidates, (*args, scope), also
        )

    async def _hnsw(
        self, sql: str, candidates: int, args: tuple[Any, ...], also: Sequence[str] = ()
    ) -> tuple[list[tuple[str, float]], dict[str, float], int]:
        """`sql` (an `hnsw_sql` statement) in a transaction of its own settings: the nearest rows,
        best first, at most the limit (`args[5]`); the cosines of `also`; and how many of the
        nearest came from the HNSW index (the filtered candidates: fewer than the limit means the
        scan may have missed some, and the caller scans exactly)."""
        sql, args = self._with_cosines(sql, args, also)
        async with self.pool.acquire() as conn:
            # the limit is written into the statement (an int, never user text) and plans are custom,
            # so that the planner always sees a small LIMIT and walks the HNSW index (and sees the
            # store and scope as constants, so that it can match a scope's own partial index); the
            # transaction that keeps both settings to this search begins with them, in one trip
            await conn.execute(
                "BEGIN; SET LOCAL plan_cache_mode = force_custom_plan; "
                f"SET LOCAL hnsw.ef_search = {int(candidates)}"
            )
            try:
                rows = await conn.fetch(sql, *args)
            finally:  # a read: nothing to keep (a connection let go mid-transaction is rolled back)
                await conn.execute("ROLLBACK")
        return _split(rows, int(args[5]))

    def hnsw_sql(self, condition: str, candidates: int, own_scope: int | None = None) -> str:
        """The HNSW statement: the nearest `candidates` of the store (one shard's index when the
        table is distributed by store), or with `own_scope` (the scope's parameter number) of that
        scope alone, read from its own index; then the filter and the limit. The whole table's
        graph holds only some rows of a corpus with a `graph` column: the nearest of the others
        (`NOT graph`, filtered alike) come beside them, marked (`part` 1; the graph's 0)."""
        graph = self.corpus.graph if own_scope is None else ""
        inner = "WHERE store_id = $1 " + ("" if own_scope is None else f"AND scope = ${own_scope}::text ")
        if graph:
            inner += f"AND {graph} "
        # a scope's own index orders by inner product (`scope_index.PREFIX`): the vectors are
        # normalised, so 1 + inner-product distance is the cosine distance
        order = "embedding <=> $5" if own_scope is None else "embedding <#> $5"
        distance = "embedding <=> $5" if own_scope is None else "1 + (embedding <#> $5)"
        nearest = (
            "SELECT id::text, 1 - d AS similarity, 0 AS part FROM ("
            f"  SELECT id, store_id, scope, session_id, path, {self.corpus.metadata} AS metadata, "
            f"  {self.corpus.state} AS state, embedding, ({distance}) + {_PENALTY} AS d "
            f"  FROM {self.corpus.table} {inner}"
            f"  ORDER BY {order} LIMIT {int(candidates)}) nearest "
            f"WHERE {condition} ORDER BY d, id LIMIT $6"
        )
        if not graph:
            return nearest
        return (
            f"SELECT g.* FROM ({nearest}) g UNION ALL "
            f"SELECT id::text, 1 - d, 1 FROM ({self._exact_sql(f'{condition} AND NOT {graph}')}) outside"
        )

    def _exact_sql(self, condition: str) -> str:
        """The nearest rows by an exact scan of the rows `condition` admits (id, d); rows equally
        near by id, so that the same rows come back whatever else the statement holds."""
        return (
            f"SELECT id, d FROM (SELECT id, (embedding <=> $5) + {_PENALTY} AS d FROM {self.corpus.table} "
            f"  WHERE {condition} OFFSET 0) scoped ORDER BY d, id LIMIT $6"
        )

    async def _exact(
        self, condition: str, *args: object, also: Sequence[str] = ()
    ) -> tuple[list[tuple[str, float]], dict[str, float]]:
        sql, all_args = self._with_cosines(
            f"SELECT id::text, 1 - d AS similarity, 0 AS part FROM ({self._exact_sql(condition)}) exact",
            args,
            also,
        )
        limit = args[5]
        assert isinstance(limit, int)
        rows, cosines, _ = _split(await self.pool.fetch(sql, *all_args), limit)
        return rows, cosines

    def _with_cosines(
        self, sql: str, args: tuple[Any, ...], also: Sequence[str]
    ) -> tuple[str, tuple[Any, ...]]:
        """The nearest rows' statement `sql` (id, similarity), each row marked as one, followed
        by the cosine (as `similarities` gives it) of each row of the store named in `also`:
        what hybrid ranking needs of its keyword candidates, in the same trip. Without `also`,
        `sql` as it is."""
        if not also:
            return sql, args
        ids = IDS.format(f"${len(args) + 1}")
        return (
            f"SELECT n.* FROM ({sql}) n UNION ALL "
            f"SELECT id::text, 1 - (embedding <=> $5) - {_PENALTY}, 2 FROM {self.corpus.table} "
            f"WHERE store_id = $1 AND id = ANY({ids}) AND embedding IS NOT NULL",
            (*args, joined_ids(also)),
        )


def _split(
    rows: Sequence[asyncpg.Record], limit: int
) -> tuple[list[tuple[str, float]], dict[str, float], int]:
    """The nearest rows of a statement (id, similarity, part), best first, at most `limit`; the
    cosines of `_with_cosines` (part 2); and how many of the nearest came from the index or the
    exact scan the statement was made for (part 0, not the rows outside the graph, part 1)."""
    nearest = [row for row in rows if row[2] != 2]
    hits = sorted(((row[0], float(row[1])) for row in nearest), key=lambda hit: (-hit[1], hit[0]))[:limit]
    scanned = sum(1 for row in nearest if row[2] == 0)
    return hits, {row[0]: float(row[1]) for row in rows if row[2] == 2}, scanned


# --- keeping the vectors current (the embedding worker, `catalog reindex`) ---------------------------
# An entry's vector is current when `embedded_version` equals its `version`.

Conn: TypeAlias = asyncpg.Connection | asyncpg.Pool


# a row whose vector is older than its text: one already given a vector of its version (a search
# embedded it while the worker's pass that claimed it ran the model) is not written again (the
# same model on the same text: a second row version and graph insertion for nothing)
_STALE = "t.embedded_version IS DISTINCT FROM t.version"


async def set_embeddings(
    conn: Conn,
    rows: Sequence[tuple[str, int, np.ndarray, int]],
    corpus: Corpus = ENTRIES,
    model: str | None = None,
    *,
    release: Sequence[str] = (),
    large: Sequence[tuple[str, str]] = (),
) -> list[tuple[str, str]]:
    """Store each (id, version, vector, passages), and the id of the `model` that made it, if its
    row is still at the version it was computed from (else the row stays stale, for the next
    pass) and has no vector of that version yet (another path stored one meanwhile: kept),
    releasing its claim; and, in the same statement, let go of the claims on the rows of
    `release` it did not store (changed since they were claimed: the next pass may take them).
    Of a corpus with a `graph` column, each vector enters the whole table's HNSW graph only when
    its scope holds at least `GRAPH_MIN` rows: each scope of the batch counted no further than
    that, but those named in `large` (store id, scope: known large), which are not counted.
    Answers the scopes the count found large (none for a corpus without the column)."""
    given = (
        "unnest($1::uuid[], $2::bigint[], $3::vector[], $4::smallint[]) "
        "AS g(id, version, embedding, passages)"
    )
    release_sql = (
        f"UPDATE {corpus.table} SET embedding_claim = NULL, embedding_claimer = NULL, "
        "embedding_claimer_start = NULL WHERE id = ANY($6::uuid[]) AND embedding_claim IS NOT NULL "
        "AND id NOT IN (SELECT id FROM stored)"
    )
    args = (
        [row[0] for row in rows],
        [row[1] for row in rows],
        [Vector(row[2]) for row in rows],  # a Vector, not an ndarray: one element of the array
        [row[3] for row in rows],
        model,
        list(release),
    )
    store = (
        f"UPDATE {corpus.table} t SET embedding = g.embedding, embedded_version = t.version, "
        "embedding_claim = NULL, passages = g.passages, embedding_model = $5"
    )
    if not corpus.graph:
        await conn.execute(
            f"WITH stored AS ({store} FROM {given} WHERE t.id = g.id AND t.version = g.version "
            f"AND {_STALE} RETURNING t.id) {release_sql}",
            *args,
        )
        return []
    found = await conn.fetch(
        f"WITH g AS (SELECT * FROM {given}), "
        # each scope of the batch: known large, or counted no further than GRAPH_MIN
        "sized AS (SELECT k.store_id, k.scope, k.known, CASE WHEN k.known THEN true ELSE (SELECT "
        f"  count(*) FROM (SELECT 1 FROM {corpus.table} e WHERE e.store_id = k.store_id "
        "   AND e.scope = k.scope LIMIT $7) c) >= $7 END AS large "
        "  FROM (SELECT s.*, (s.store_id, s.scope) IN (SELECT * FROM unnest($8::uuid[], $9::text[])) "
        f"  AS known FROM (SELECT DISTINCT t.store_id, t.scope FROM {corpus.table} t "
        "  JOIN g ON t.id = g.id) s) k), "
        f"stored AS ({store}, {corpus.graph} = z.large FROM g, sized z WHERE t.id = g.id "
        f"  AND t.version = g.version AND {_STALE} AND z.store_id = t.store_id AND z.scope = t.scope "
        "  RETURNING t.id), "
        f"released AS ({release_sql} RETURNING 1) "
        "SELECT store_id::text, scope FROM sized WHERE large AND NOT known",
        *args,
        GRAPH_MIN,
        [key[0] for key in large],
        [key[1] for key in large],
    )
    return [(row[0], row[1]) for row in found]


async def count_unembedded(conn: Conn, corpus: Corpus = ENTRIES) -> int:
    return int(
        await conn.fetchval(
            f"SELECT count(*) FROM {corpus.table} WHERE embedded_version IS DISTINCT FROM version"
        )
    )


async def forget_embeddings(conn: Conn, corpus: Corpus = ENTRIES, keep: str | None = None) -> int:
    """Mark stale every vector that model `keep` did not make, and every row without one (None:
    every vector), to be recomputed by the backfill or `catalog reindex`; wake the running
    servers' embedding workers as a change does (catalog.search.passes). How many rows."""
    return int(
        await conn.fetchval(
            f"WITH stale AS (UPDATE {corpus.table} SET embedded_version = NULL "
            "WHERE $2::text IS NULL OR embedding IS NULL OR embedding_model IS DISTINCT FROM $2 "
            "RETURNING 1) SELECT (SELECT count(*) FROM stale), pg_notify('catalog_changes', $1)",
            corpus.changes,
            keep,
        )
    )


async def rebuild_vector_index(conn: Conn, corpus: Corpus = ENTRIES) -> None:
    await conn.execute(f"REINDEX INDEX {corpus.hnsw_index}")


# A claim holds while its lease runs and the database session that took it is alive (its
# backend, by pid and start time: a pid may be reused); a claim without a claimer holds its lease.
_CLAIM_HELD = (
    "embedding_claim > clock_timestamp() AND (embedding_claimer IS NULL OR EXISTS ("
    "  SELECT 1 FROM pg_stat_activity a WHERE a.pid = embedding_claimer "
    "  AND a.backend_start = embedding_claimer_start))"
)


async def claim_unembedded(
    conn: Conn, limit: int, corpus: Corpus = ENTRIES, lease: float = 60.0
) -> list[asyncpg.Record]:
    """Claim up to `limit` rows whose vector is stale and that no live claim holds (id, version,
    contents, description, store_id, scope), for `lease` seconds and this database session, in
    one short statement: no row lock is held while the
    model runs, so writes to these rows never wait for it (SKIP LOCKED passes over rows a writer
    holds right now). The caller keeps the connection for the whole pass: when its process dies,
    the session ends and the claims are free at once."""
    return await conn.fetch(
        f"UPDATE {corpus.table} t SET embedding_claim = clock_timestamp() + make_interval(secs => $2), "
        "embedding_claimer = pg_backend_pid(), embedding_claimer_start = ("
        "  SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()) "
        f"FROM (SELECT id FROM {corpus.table} WHERE embedded_version IS DISTINCT FROM version "
        f"      AND (embedding_claim IS NULL OR NOT ({_CLAIM_HELD})) "
        "      LIMIT $1 FOR UPDATE SKIP LOCKED) c "
        "WHERE t.id = c.id RETURNING t.id, t.version, t.contents, t.description, t.store_id::text, t.scope",
        limit,
        lease,
    )


async def release_claims(conn: Conn, ids: Sequence[str], corpus: Corpus = ENTRIES) -> None:
    """Let go of claims whose rows were not given a vector (a newer version came, the model
    failed): the next pass may take them at once."""
    await conn.execute(
        f"UPDATE {corpus.table} SET embedding_claim = NULL, embedding_claimer = NULL, "
        "embedding_claimer_start = NULL WHERE id = ANY($1::uuid[]) AND embedding_claim IS NOT NULL",
        list(ids),
    )


async def next_claim_expiry(conn: Conn, corpus: Corpus = ENTRIES) -> float | None:
    """Seconds until the first live claim on a stale row runs out (a claim another process
    holds), or None when there is none (a claim whose session is gone is free already)."""
    value = await conn.fetchval(
        f"SELECT extract(epoch FROM min(embedding_claim) - clock_timestamp()) FROM {corpus.table} "
        f"WHERE embedded_version IS DISTINCT FROM version AND {_CLAIM_HELD}"
    )
    return None if value is None else float(value)


async def unembedded_in(
    conn: Conn, store_id: str, scopes: Sequence[str], limit: int, corpus: Corpus = ENTRIES
) -> list[asyncpg.Record]:
    """Up to `limit` rows of these scopes whose vector is missing or older than their text (id,
    version, contents, description, store_id, scope): what a search embeds itself rather than
    wait for the worker (read by the small partial index of such rows)."""
    return await conn.fetch(
        f"SELECT id, version, contents, description, store_id::text, scope FROM {corpus.table} "
        "WHERE embedded_version IS DISTINCT FROM version AND store_id = $1 AND scope = ANY($2::text[]) "
        "LIMIT $3",
        store_id,
        list(scopes),
        limit,
    )


async def ids_under_prefix(
    conn: Conn,
    store_id: str,
    scopes: Sequence[str],
    session_id: str | None,
    path_prefix: str,
    corpus: Corpus = ENTRIES,
) -> list[str]:
    """The ids of the rows of these scopes whose path starts with `path_prefix` (what a path
    prefix too long for the full-text index's regex admits there)."""
    rows = await conn.fetch(
        f"SELECT id::text FROM {corpus.table} WHERE store_id = $1 AND scope = ANY($2::text[]) "
        "AND ($3::text IS NULL OR session_id = $3) AND starts_with(path, $4)",
        store_id,
        list(scopes),
        session_id,
        path_prefix,
    )
    return [row[0] for row in rows]


# --- what hybrid ranking reads about its candidates --------------------------------------------------


async def similarities(
    conn: Conn, store_id: str, ids: Sequence[str], vector: np.ndarray, corpus: Corpus = ENTRIES
) -> dict[str, float]:
    """The cosine similarity to `vector` of each given row of the store that has a vector."""
    if not ids:
        return {}
    rows = await conn.fetch(
        f"SELECT id::text, 1 - (embedding <=> $2) - {_PENALTY} FROM {corpus.table} "
        f"WHERE store_id = $3 AND id = ANY({IDS.format('$1')}) AND embedding IS NOT NULL",
        joined_ids(ids),
        vector,
        store_id,
    )
    return {row[0]: float(row[1]) for row in rows}


async def vectors_at(
    conn: Conn, store_id: str, rows: Sequence[tuple[str, int]], corpus: Corpus = ENTRIES
) -> dict[str, np.ndarray]:
    """The stored vector of each (id, version) given, where the row is still at that version's
    vector (an old version's text has none stored: the caller embeds it)."""
    if not rows:
        return {}
    found = await conn.fetch(
        f"SELECT t.id::text, t.embedding FROM {corpus.table} t "
        "JOIN unnest($2::uuid[], $3::bigint[]) AS w(id, version) ON w.id = t.id "
        "WHERE t.store_id = $1 AND t.embedded_version = w.version AND t.embedding IS NOT NULL",
        store_id,
        [r[0] for r in rows],
        [r[1] for r in rows],
    )
    return {row[0]: np.asarray(row[1].to_numpy(), dtype=np.float32) for row in found}


# The rule of `catalog.search.neighbours`, in SQL: for each hit written in a session, the entry
# written just before and the one just after it in its store, scope and session (an index probe each, on
# `entries_written`), kept when written within the gap and short (`passages.is_short`). Short is
# read from the row's vector where it is current: one passage (`passages`, counted by the rule
# itself when the text was embedded). A row whose vector is not current yet is measured here: fewer
# than 2 x `short_words` characters cannot hold more words; else at most `short_words`
# whitespace-separated words and `short_words` x 24 characters (the rule counts a long word one
# per 24 characters). Splitting every neighbour's text cost about half of the statement.
_NEIGHBOURS_SQL = f"""
SELECT hit.id::text, other.id::text
FROM entries hit
CROSS JOIN LATERAL (
  (SELECT o.id, o.created_at, o.contents, o.passages, o.embedded_version = o.version AS counted
   FROM entries o
   WHERE o.store_id = hit.store_id AND o.scope = hit.scope AND o.session_id = hit.session_id
     AND o.written < hit.written AND ($2::text IS NULL OR starts_with(o.path, $2))
     AND ($4 OR o.state = 'active')
   ORDER BY o.written DESC LIMIT 1)
  UNION ALL
  (SELECT o.id, o.created_at, o.contents, o.passages, o.embedded_version = o.version AS counted
   FROM entries o
   WHERE o.store_id = hit.store_id AND o.scope = hit.scope AND o.session_id = hit.session_id
     AND o.written > hit.written AND ($2::text IS NULL OR starts_with(o.path, $2))
     AND ($4 OR o.state = 'active')
   ORDER BY o.written ASC LIMIT 1)
) AS other
WHERE hit.store_id = $3 AND hit.id = ANY({IDS.format("$1")}) AND hit.session_id <> ''
  AND abs(extract(epoch FROM other.created_at - hit.created_at)) <= $5
  AND CASE
    WHEN other.counted THEN other.passages = 1
    WHEN length(coalesce(other.contents, '')) < 2 * $6 THEN true
    ELSE length(coalesce(other.contents, '')) <= $6 * 24
      AND cardinality(regexp_split_to_array(btrim(coalesce(other.contents, '')), '\\s+')) <= $6
  END
"""


async def written_neighbours(
    conn: Conn,
    store_id: str,
    ids: Sequence[str],
    path_prefix: str | None,
    *,
    include_inactive: bool,
    gap_seconds: float,
    short_words: int,
) -> list[tuple[str, str]]:
    """(id, id of a neighbour) for the given entries of the store, the neighbours within
    `path_prefix` (same store, scope and session by construction)."""
    rows = await conn.fetch(
        _NEIGHBOURS_SQL, joined_ids(ids), path_prefix, store_id, include_inactive, gap_seconds, short_words
    )
    return [(hit, other) for hit, other in rows]
