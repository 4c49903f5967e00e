"""A hybrid search's context (`SearchEngine.rank`): the keyword candidates' cosines come with the
nearest rows when the keyword leg has answered before the query's vector is ready (else they are
read after both legs), and the neighbours are read only for the candidates that can change the
places the caller reads (`Query.needed`); those places are the same as with every candidate's
neighbours, whichever leg answers first."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import time
from collections.abc import AsyncIterator, Sequence

import asyncpg
import numpy as np
import pytest
from fake_embedder import HashEncoder

from catalog.db import create_pool
from catalog.search import Query, SearchEngine, neighbours, repo
from catalog.search.embedder import Embedder

SCOPE = "u"
TOPICS = ["pottery", "garden", "kettle", "bicycle", "harbour", "espresso", "hiking", "violin"]


@pytest.fixture
async def pool(fresh_database_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(fresh_database_url, min_size=1, max_size=4)
    try:
        yield p
    finally:
        await p.close()


class SlowEncoder(HashEncoder):
    """A model slower than the keyword leg, as the real one is on a short query."""

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        time.sleep(0.05)
        return super().encode(texts)


@pytest.fixture
async def engine(pool: asyncpg.Pool, tmp_path) -> AsyncIterator[SearchEngine]:  # type: ignore[no-untyped-def]
    e = SearchEngine.create(pool, Embedder(SlowEncoder()), tmp_path / "index")
    await e.start()
    try:
        yield e
    finally:
        await e.close()


async def _dialogue(pool: asyncpg.Pool) -> str:
    store = str(
        await pool.fetchval(
            "INSERT INTO memory_stores (schema_id, name, owner, created_by, updated_by) "
            "SELECT id, 'dialogue', 'admin', 'admin', 'admin' FROM schemas LIMIT 1 RETURNING id"
        )
    )
    turns = []
    for i, topic in enumerate(TOPICS):  # each topic asked about, then answered in other words
        for n, text in enumerate(
            (
                f"Did you get to the {topic} club last weekend, as you said?",
                "Yes, finally! It was lovely and I stayed until the evening.",
                f"filler {i}: the weather was mild and the trains were on time",
                f"filler {i}: nothing much else happened on {topic} days",
            )
        ):
            turns.append((store, SCOPE, f"s{i % 3}", f"/t/{i}/{n}", text))
    for turn in turns:  # one at a time: the write order is the turns' order
        await pool.execute(
            "INSERT INTO entries (store_id, scope, session_id, path, contents, created_by, updated_by) "
            "VALUES ($1, $2, $3, $4, $5, 'admin', 'admin')",
            *turn,
        )
    return store


async def test_the_first_places_are_those_of_every_neighbour_read_either_way(pool, engine, monkeypatch):
    store = await _dialogue(pool)
    asked: list[int] = []
    read = neighbours.neighbours

    async def counted(pool, store_id, ids: Sequence[str], *args, **kwargs):  # type: ignore[no-untyped-def]
        asked.append(len(ids))
        return await read(pool, store_id, ids, *args, **kwargs)

    cosines: list[int] = []
    similarities = repo.similarities

    async def similar(pool, store_id, ids: Sequence[str], *args, **kwargs):  # type: ignore[no-untyped-def]
        cosines.append(len(ids))
        return await similarities(pool, store_id, ids, *args, **kwargs)

    deadline = time.monotonic() + 30
    while (await engine.rank(Query(store, (SCOPE,), "turn", 30, "hybrid"))).degraded or await pool.fetchval(
        "SELECT count(*) FROM entries WHERE embedded_version IS DISTINCT FROM version"
    ):
        assert time.monotonic() < deadline, "the turns were not indexed and embedded"
        await asyncio.sleep(0.05)
    monkeypatch.setattr(neighbours, "neighbours", counted)
    keyword = engine._keyword
    answered: list = []  # type: ignore[type-arg]

    async def recorded(q: Query):  # type: ignore[no-untyped-def]
        answered.append(await keyword(q))
        return answered[-1]

    async def late(q: Query):  # type: ignore[no-untyped-def]
        # the answer the leg gave on time (BM25's ties may come in another order after an index
        # merge), after the vector
        await asyncio.sleep(0.3)
        return answered[-1]

    for topic in TOPICS[:3]:
        query = Query(store, (SCOPE,), f"{topic} club last weekend", 30, "hybrid", explain=True)
        every = await engine.rank(query)  # every candidate's neighbours, with the cosines before
        assert asked[-1] > 10, asked
        first = await engine.rank(dataclasses.replace(query, needed=4))
        assert asked[-1] < asked[-2], asked  # fewer candidates' neighbours read
        assert first.hits[:4] == every.hits[:4]
        assert first.explained is not None  # an answer lifted into those places by its question
        assert any(first.explained.hits[doc].neighbour_lift > 0 for doc, _ in first.hits[:4])
        assert max(s for _, s in every.hits) == first.hits[0][1]

        # the keyword leg answering after the vector (fewer candidates from each leg, so that
        # BM25 finds some the vectors do not): its candidates' cosines are read after both legs,
        # and the neighbours again only of those that can lift into the first places
        few = dataclasses.replace(query, limit=6, needed=4)
        monkeypatch.setattr(engine, "_keyword", recorded)
        on_time = await engine.rank(few)
        monkeypatch.setattr(engine, "_keyword", late)
        monkeypatch.setattr(repo, "similarities", similar)
        statements = len(cosines)
        last = await engine.rank(few)
        monkeypatch.setattr(engine, "_keyword", keyword)
        monkeypatch.setattr(repo, "similarities", similarities)
        assert len(cosines) <= statements + 1, cosines  # one statement at most
        assert asked[-1] == asked[-2], asked  # the same candidates' neighbours as on time
        assert last.hits == on_time.hits
        assert last.explained is not None and on_time.explained is not None
        assert {d: h.cosine for d, h in last.explained.hits.items()} == {
            d: h.cosine for d, h in on_time.explained.hits.items()
        }
    assert cosines and max(cosines) > 0, cosines  # BM25-only candidates' cosines were read after
    assert len(set(asked)) > 1


async def test_a_keyword_leg_that_failed_beside_a_failing_vector_leg_is_not_reported_lost(
    pool, engine, monkeypatch, caplog
):
    """Both legs failing: the search raises the vector leg's error, and the keyword leg's, already
    raised, is not logged as a task's exception nobody retrieved."""

    async def keyword(q: Query):  # type: ignore[no-untyped-def]
        raise RuntimeError("the index is gone")

    async def semantic(q: Query, also=None):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.05)
        raise ConnectionError("the database is gone")

    monkeypatch.setattr(engine, "_keyword", keyword)
    monkeypatch.setattr(engine, "_semantic", semantic)
    with pytest.raises(ConnectionError):
        await engine.rank(Query("s", (SCOPE,), "anything", 30, "hybrid"))
    gc.collect()
    await asyncio.sleep(0)
    # (the collection may also find another test's abandoned task: only this search's error counts)
    lost = [r for r in caplog.records if "never retrieved" in r.getMessage()]
    assert not [r for r in lost if "the index is gone" in r.getMessage() + str(r.exc_info)]
