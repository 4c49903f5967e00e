"""The whole table's HNSW graph holds the vectors of large scopes only (`GRAPH_MIN`, migration
0043): the embedding worker's statement says which rows enter it, a search counts only those to
choose the graph, and a search through the graph still finds the rows outside it."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import numpy as np
import pytest
from stores import make_store

from catalog.db import create_pool
from catalog.search import repo
from catalog.search.corpus import ENTRIES
from catalog.search.embedding_worker import LargeScopes
from catalog.search.repo import _FILTER, VectorSearch, set_embeddings, similarities

DIM = 384


def _vectors(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


async def _write(pool, store_id: str, scope: str, vectors: np.ndarray, first: int = 0, large=(), given=()):  # type: ignore[no-untyped-def]
    """Rows of `scope` without vectors (of the ids `given`, in their order, if any), then their
    vectors stored as the embedding worker stores them (`large`: the scopes it knows large); the
    scopes found large. The rows are claimed from the start (a claim of no session, for an hour),
    so that the app's own worker leaves them to this statement."""
    ids = []
    async with pool.acquire() as conn:
        for i in range(len(vectors)):
            ids.append(
                await conn.fetchval(
                    "INSERT INTO entries (id, store_id, scope, session_id, path, contents, created_by, "
                    "updated_by, embedding_claim) VALUES (coalesce($5::uuid, gen_random_uuid()), "
                    "$1, $2, '', $3, $4, 't', 't', clock_timestamp() + interval '1 hour') RETURNING id",
                    store_id,
                    scope,
                    f"/v/{first + i}.md",
                    f"note {first + i}",
                    given[i] if given else None,
                )
            )
        made = [(i, 1, v, 1) for i, v in zip(ids, vectors, strict=True)]
        return await set_embeddings(conn, made, model="m", large=large)


async def _in_graph(pool, scope: str) -> list[bool]:  # type: ignore[no-untyped-def]
    rows = await pool.fetch("SELECT in_graph FROM entries WHERE scope = $1 ORDER BY path", scope)
    return [row[0] for row in rows]


def test_only_large_scopes_vectors_enter_the_graph_and_a_graph_search_misses_none(
    own_client, own_token, own_settings, monkeypatch
):
    make_store(own_client, own_token, "graph")
    monkeypatch.setattr(repo, "GRAPH_MIN", 30)
    monkeypatch.setattr(repo, "EXACT_LIMIT", 20)
    big, small, grown = _vectors(60, 1), _vectors(40, 2), _vectors(40, 3)

    async def scenario() -> None:
        pool = await create_pool(own_settings.database_url, min_size=1, max_size=4)
        try:
            store_id = str(await pool.fetchval("SELECT id FROM memory_stores WHERE name = 'graph'"))
            index = await pool.fetchval("SELECT pg_get_indexdef('entries_embedding_hnsw'::regclass)")
            assert index.endswith("WHERE in_graph"), index
            # 60 rows as its vectors are stored: all in, the scope found large
            assert await _write(pool, store_id, "big", big) == [(store_id, "big")]
            for n in range(4):  # 10 rows each: all outside
                assert await _write(pool, store_id, f"small-{n}", small[n * 10 : n * 10 + 10]) == []
            # a scope that grows past GRAPH_MIN: the rows written before stay outside
            assert await _write(pool, store_id, "grown", grown[:10]) == []
            assert await _write(pool, store_id, "grown", grown[10:], first=10) == [(store_id, "grown")]
            assert await _in_graph(pool, "big") == [True] * 60
            assert await _in_graph(pool, "small-0") == [False] * 10
            # a scope named known large is not counted (nor answered: the caller knows it): its
            # vectors enter the graph (a scope of its own, removed again)
            assert await _write(pool, store_id, "known", small[:2], large=[(store_id, "known")]) == []
            assert await _in_graph(pool, "known") == [True, True]
            await pool.execute("DELETE FROM entries WHERE scope = 'known'")
            # (paths sort as text: /v/0-9 of the first ten, then /v/10-39)
            in_graph = await pool.fetch("SELECT path, in_graph FROM entries WHERE scope = 'grown'")
            assert {r["path"] for r in in_graph if not r["in_graph"]} == {f"/v/{i}.md" for i in range(10)}
            await pool.execute("ANALYZE entries")
            # the exact scan's line is drawn on the graph's rows (its index's count, as ANALYZE
            # left it), not the table's: the rows outside it are never among the graph's candidates
            graph_rows = await pool.fetchval("SELECT count(*) FROM entries WHERE in_graph")
            table_rows = await pool.fetchval("SELECT count(*) FROM entries")
            assert await VectorSearch(pool)._graph_rows() == graph_rows < table_rows
            # an index dropped by hand counts as an empty graph, not a failed search
            assert await VectorSearch(pool, replace(ENTRIES, hnsw_index="no_such_index"))._graph_rows() == 0

            # sets whose rows in the graph are more than the exact scan takes: through the graph,
            # with the rows of their scopes outside it beside; each finds what the exact scan finds
            sets = [["big", "small-0", "small-1", "small-2"], ["grown", "small-3"], ["big"]]
            queries = [small[3], small[25], grown[4], grown[20], big[7], _vectors(1, 9)[0]]
            for scopes in sets:
                for query in queries:
                    search = VectorSearch(pool)
                    hits, _ = await search.search(store_id, scopes, query, 5)
                    assert search.graph_searches == 1 and search.fallbacks == 0
                    exact, _ = await search._exact(_FILTER, store_id, scopes, None, None, query, 5)
                    assert [h for h, _ in hits] == [h for h, _ in exact]
                    assert [s for _, s in hits] == pytest.approx([s for _, s in exact], abs=1e-5)
            # a row outside the graph comes first when it is the nearest (a row of small-0 here)
            hits, _ = await VectorSearch(pool).search(store_id, sets[0], small[3], 5)
            first = await pool.fetchval("SELECT in_graph FROM entries WHERE id = $1::uuid", hits[0][0])
            assert hits[0][1] == pytest.approx(1.0, abs=1e-3) and first is False
            # with a hybrid search's keyword candidates: their cosines in the same statement
            rows = await pool.fetch("SELECT id::text FROM entries WHERE scope IN ('big', 'small-1') LIMIT 6")
            others = [row[0] for row in rows]
            search = VectorSearch(pool)
            both, cosines = await search.search(store_id, sets[0], small[3], 5, also=others)
            assert search.graph_searches == 1 and both == hits
            assert cosines == pytest.approx(await similarities(pool, store_id, others, small[3]))

            # a set of small scopes only holds nothing in the graph: the exact scan, no graph read
            search = VectorSearch(pool)
            scopes = [f"small-{n}" for n in range(4)]
            hits, _ = await search.search(store_id, scopes, small[33], 5)
            assert search.graph_searches == 0 and len(hits) == 5
            assert hits[0][1] == pytest.approx(1.0, abs=1e-3)
        finally:
            await pool.close()

    asyncio.run(scenario())


def test_rows_equally_near_the_query_are_taken_by_id_whatever_the_plan(
    own_client, own_token, own_settings, monkeypatch
):
    """Rows of one vector (equally near any query), written in no order of id: the exact scan,
    the graph, and the merge of the graph's rows with those outside it (whose ids are lower here)
    all take the lowest ids, with keyword candidates' cosines beside or not, so that a query
    answers the same rows whichever statement reads them (each of the three fails without its
    own tie-break)."""
    make_store(own_client, own_token, "ties")
    monkeypatch.setattr(repo, "GRAPH_MIN", 30)
    monkeypatch.setattr(repo, "EXACT_LIMIT", 20)
    one = np.repeat(_vectors(1, 4), 40, axis=0)
    query = _vectors(1, 5)[0]

    def ids(prefix: int, n: int) -> list[str]:  # in an order of their own
        made = [f"{prefix:02x}{k:06x}-0000-4000-8000-000000000000" for k in range(n)]
        return [str(made[k]) for k in np.random.default_rng(7).permutation(n)]

    async def scenario() -> None:
        pool = await create_pool(own_settings.database_url, min_size=1, max_size=4)
        try:
            store_id = str(await pool.fetchval("SELECT id FROM memory_stores WHERE name = 'ties'"))
            large, few = ids(2, 40), ids(1, 12)
            assert await _write(pool, store_id, "large", one, given=large) == [(store_id, "large")]
            assert await _write(pool, store_id, "few", one[:12], given=few) == []
            await pool.execute("ANALYZE entries")
            others = few[:4]
            for scopes, graph, rows in (
                (["few"], 0, few),
                (["large"], 1, large),
                (["large", "few"], 1, large + few),
            ):
                for also in ((), others):
                    search = VectorSearch(pool)
                    hits, _ = await search.search(store_id, scopes, query, 3, also=also)
                    assert search.graph_searches == graph and search.fallbacks == 0
                    assert [h for h, _ in hits] == sorted(rows)[:3], (scopes, also)
        finally:
            await pool.close()

    asyncio.run(scenario())


def test_a_process_keeps_the_scopes_it_found_large_for_a_while_and_no_more(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr("catalog.search.embedding_worker.time.monotonic", lambda: now[0])
    large = LargeScopes(kept=600.0)
    rows = [{"store_id": "s", "scope": "a"}, {"store_id": "s", "scope": "b"}, {"store_id": "t", "scope": "a"}]
    assert large.of(rows) == []
    large.add([("s", "a"), ("t", "a")])
    assert large.of(rows) == [("s", "a"), ("t", "a")]
    assert large.of(rows[1:2]) == []  # only the scopes of the rows given
    now[0] += 599.0
    large.add([("s", "b")])
    assert large.of(rows) == [("s", "a"), ("s", "b"), ("t", "a")]
    now[0] += 2.0  # the first two found 601 s ago: no longer known
    assert large.of(rows) == [("s", "b")]
    now[0] += 60.0  # and forgotten by an add a tenth of that later
    large.add([])
    assert set(large._found) == {("s", "b")}
    large.MAX_KEPT = 2
    large.add([("u", "c"), ("u", "d")])  # past the bound: emptied first
    assert large.of([{"store_id": "s", "scope": "b"}, {"store_id": "u", "scope": "c"}]) == [("u", "c")]
