"""A large scope's own vector index (`catalog.search.scope_index`): built once the scope is large,
read by the vector search (the plan uses it), dropped once the scope has shrunk; scope names are
quoted by PostgreSQL."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from stores import make_store

from catalog.db import create_pool
from catalog.search import scope_index
from catalog.search.repo import _FILTER, VectorSearch, similarities

BIG = "o'brien; DROP TABLE entries; --"  # a scope name that must be quoted in the index predicate


async def _load(pool, store_id: str, scope: str, vectors: np.ndarray) -> None:  # type: ignore[no-untyped-def]
    async with pool.acquire() as conn:
        await conn.execute("SET session_replication_role = replica")  # no change log: vectors only
        await conn.copy_records_to_table(
            "entries",
            records=[
                (store_id, scope, "", f"/v/{i}.md", f"note {i}", "t", "t", v, 1, 1)
                for i, v in enumerate(vectors)
            ],
            columns=[
                "store_id",
                "scope",
                "session_id",
                "path",
                "contents",
                "created_by",
                "updated_by",
                "embedding",
                "version",
                "embedded_version",
            ],
        )
        await conn.execute("RESET session_replication_role")
        await conn.execute("ANALYZE entries")


def test_a_large_scope_gets_its_own_index_which_searches_use_until_it_shrinks(
    own_client, own_token, own_settings
):
    make_store(own_client, own_token, "big")
    rng = np.random.default_rng(7)
    centres = rng.normal(size=(20, 384)).astype(np.float32)
    vectors = centres[rng.integers(20, size=1200)] + rng.normal(0, 0.3, size=(1200, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)

    async def scenario() -> None:
        pool = await create_pool(own_settings.database_url, min_size=1, max_size=4)
        try:
            store_id = str(await pool.fetchval("SELECT id FROM memory_stores WHERE name = 'big'"))
            # the table holds several times the large scope, as it would (its graph built once, at the end)
            await pool.execute("DROP INDEX entries_embedding_hnsw")
            await _load(pool, store_id, BIG, vectors)
            await _load(pool, store_id, "small", vectors[:50])
            for n in range(20):  # scopes too small for an index of their own
                await _load(pool, store_id, f"user-{n}", vectors[n * 50 : n * 50 + 200])
            await pool.execute(
                "CREATE INDEX entries_embedding_hnsw ON entries USING hnsw (embedding vector_cosine_ops) "
                "WHERE in_graph"
            )
            await pool.execute("ANALYZE entries")

            # an own index of an earlier version (ordered by cosine) is dropped and built anew
            await pool.execute(
                "CREATE INDEX entries_hnsw_s_earlier ON entries USING hnsw (embedding vector_cosine_ops) "
                f"WHERE store_id = '{store_id}'::uuid AND scope = 'small'"
            )
            done = await scope_index.maintain(pool, 1000)
            assert done.built == [(store_id, BIG)] and done.dropped == ["entries_hnsw_s_earlier"]
            assert await scope_index.ready_index(pool, store_id, BIG)
            assert not await scope_index.ready_index(pool, store_id, "small")
            assert (await scope_index.maintain(pool, 1000)).built == []  # kept, not built again
            assert await pool.fetchval("SELECT count(*) FROM entries") == 5250  # the name was quoted

            search = VectorSearch(pool, scope_index_min=1000)
            hits, _ = await search.search(store_id, [BIG], vectors[17], 10)
            assert search.own_index_searches == 1 and search.fallbacks == 0
            assert hits[0][0] == await pool.fetchval(
                "SELECT id::text FROM entries WHERE scope = $1 AND path = '/v/17.md'", BIG
            )
            exact, _ = await search._exact(_FILTER, store_id, [BIG], None, None, vectors[17], 10)
            assert len({h for h, _ in hits} & {h for h, _ in exact}) >= 8  # approximate, but close
            # the statement reads the scope's own index
            async with pool.acquire() as conn, conn.transaction():
                await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
                args = (store_id, [BIG], None, None, vectors[17], 10, BIG)
                plan = await conn.fetch("EXPLAIN " + search.hnsw_sql(_FILTER, 40, own_scope=7), *args)
            lines = "\n".join(row[0] for row in plan)
            assert scope_index.index_name(store_id, BIG) in lines, lines
            # other scopes are searched as before
            small = VectorSearch(pool, scope_index_min=1000)
            assert len((await small.search(store_id, ["small"], vectors[3], 10))[0]) == 10
            assert small.own_index_searches == 0

            # the cosines of other rows (a hybrid search's keyword candidates) come in the same
            # statement, as `similarities` reads them, on the own index's path and the exact one
            rows = await pool.fetch(
                "SELECT id::text FROM entries WHERE scope = 'user-3' ORDER BY path LIMIT 6"
            )
            others = [row[0] for row in rows]
            unseen = str(await pool.fetchval("SELECT gen_random_uuid()"))  # no such row
            for scope, index_searches in ((BIG, 1), ("small", 0)):
                both = VectorSearch(pool, scope_index_min=1000)
                hits, cosines = await both.search(store_id, [scope], vectors[17], 10, also=[*others, unseen])
                assert both.own_index_searches == index_searches
                assert hits == (await both.search(store_id, [scope], vectors[17], 10))[0]
                expected = await similarities(pool, store_id, others, vectors[17])
                assert cosines.keys() == set(others) and cosines == pytest.approx(expected)
                assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)

            # shrunk below half the threshold: the index goes
            await pool.execute("DELETE FROM entries WHERE scope = $1 AND path NOT LIKE '/v/1%'", BIG)
            done = await scope_index.maintain(pool, 1000)
            assert done.dropped == [scope_index.index_name(store_id, BIG)] and done.built == []
            assert not await scope_index.ready_index(pool, store_id, BIG)
        finally:
            await pool.close()

    asyncio.run(scenario())


def test_an_hnsw_search_sets_its_plan_and_candidates_for_itself_alone(database_url):
    """The HNSW statement runs with custom plans and `hnsw.ef_search` at its candidate count, set
    in the transaction that holds it (with its BEGIN, in one trip) and gone with it: the pooled
    connection goes back as it was, also when the statement fails."""

    class Reads(VectorSearch):  # the statement replaced by one that reads the two settings
        def hnsw_sql(self, condition: str, candidates: int, own_scope: int | None = None) -> str:
            return (
                "SELECT current_setting('plan_cache_mode') || ' ' || current_setting('hnsw.ef_search'), "
                "$6::float8, 0 FROM (SELECT $1::text, $2::text[], $3::text, $4::text, $5::vector) AS given"
            )

    async def scenario() -> tuple[list[tuple[str, float]], list[str], str]:
        pool = await create_pool(database_url, min_size=1, max_size=1)  # one connection: the same one
        try:
            search = Reads(pool)
            args = ("s", ["u"], None, None, np.ones(384, dtype=np.float32), 7)
            during, _, _ = await search._hnsw(search.hnsw_sql(_FILTER, 123), 123, args)
            after = [
                await pool.fetchval("SELECT current_setting('plan_cache_mode')"),
                await pool.fetchval("SELECT current_setting('hnsw.ef_search')"),
            ]
            try:
                await search._hnsw("SELECT 1 / 0", 50, ())
            except Exception as exc:
                failed = type(exc).__name__
            async with pool.acquire() as conn:
                after += [await conn.fetchval("SELECT current_setting('hnsw.ef_search')")]
                after += ["in a transaction" if conn.is_in_transaction() else "idle"]
            return during, after, failed
        finally:
            await pool.close()

    during, after, failed = asyncio.run(scenario())
    assert during == [("force_custom_plan 123", 7.0)]
    assert failed == "DivisionByZeroError"
    assert after == ["auto", "40", "40", "idle"]
