"""A search never waits for the embedding worker: the rows of its scopes still lacking a vector
are embedded by the search itself (read-your-writes without the backlog), at most `ON_DEMAND` of
them and for at most `SEARCH_WAIT`; past either the semantic leg is named in `degraded`."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Sequence

import asyncpg
import numpy as np
import pytest
from fake_embedder import HashEncoder
from litestar.testing import TestClient
from rest import UC

from catalog.app import create_app
from catalog.auth import mint_dev_token
from catalog.search import embedding_worker, engine
from catalog.search.corpus import Corpus

_names = itertools.count()


class Store:
    """A store of its own for each test (the database is shared)."""

    def __init__(self) -> None:
        self.name = f"waits{next(_names)}"
        self.url = f"{UC}/memory-stores/main.default.{self.name}"

    def unembedded(self, database_url: str) -> list[str]:
        async def run() -> list[str]:
            conn = await asyncpg.connect(database_url)
            try:
                rows = await conn.fetch(
                    "SELECT e.path FROM entries e JOIN memory_stores s ON s.id = e.store_id "
                    "WHERE s.name = $1 AND (e.embedded_version IS DISTINCT FROM e.version "
                    "OR e.embedding IS NULL) ORDER BY e.path",
                    self.name,
                )
                return [r["path"] for r in rows]
            finally:
                await conn.close()

        return asyncio.run(run())


@pytest.fixture
def no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedding worker embeds nothing (a backlog it has not reached yet)."""

    async def idle(self: embedding_worker.EmbeddingWorker, corpus: Corpus) -> None:
        return None

    monkeypatch.setattr(embedding_worker.EmbeddingWorker, "_drain", idle)


class HeldEncoder(HashEncoder):
    """The test embedder, holding any batch with `marker` in it until `gate` is set."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker
        self.gate = threading.Event()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if any(self.marker in t for t in texts):
            self.gate.wait(60)
        return super().encode(texts)


def _client(settings, encoder=None) -> TestClient:  # type: ignore[no-untyped-def]
    return TestClient(create_app(settings, encoder=encoder), raise_server_exceptions=False)


def _setup(c: TestClient, headers: dict[str, str], entries: dict[str, str]) -> Store:
    store = Store()
    body = {"name": store.name, "catalog_name": "main", "schema_name": "default"}
    assert c.post(f"{UC}/memory-stores", headers=headers, json=body).status_code == 200
    for path, text in entries.items():
        r = c.post(
            f"{store.url}/entries",
            headers=headers,
            params={"scope": "u"},
            json={"path": path, "contents": text},
        )
        assert r.status_code == 200, r.text
    return store


def _search(c: TestClient, headers: dict[str, str], store: Store, query: str, mode: str) -> dict:
    r = c.post(
        f"{store.url}/entries:search", headers=headers, json={"scope": "u", "query": query, "mode": mode}
    )
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.usefixtures("no_worker")
def test_a_search_embeds_its_scopes_rows_the_worker_has_not_reached(settings, database_url):
    headers = {"Authorization": f"Bearer {mint_dev_token(settings, 'admin')}"}
    with _client(settings) as c:
        store = _setup(c, headers, {"/a.md": "platypus eggs", "/b.md": "echidna spines"})
        other = {"scope": "elsewhere"}
        r = c.post(
            f"{store.url}/entries", headers=headers, params=other, json={"path": "/c.md", "contents": "kiwi"}
        )
        assert r.status_code == 200
        assert store.unembedded(database_url) == ["/a.md", "/b.md", "/c.md"]  # the worker has done nothing
        for mode in ("semantic", "hybrid"):
            answer = _search(c, headers, store, "echidna spines", mode)
            assert answer["results"][0]["memory_entry"]["path"] == "/b.md", answer
            assert answer["results"][0]["score"] > 0.9, answer  # ranked by its own vector
            assert "degraded" not in answer, answer
        # the vectors are stored as the worker would store them; another scope's row is left to it
        assert store.unembedded(database_url) == ["/c.md"]
        assert c.app.state.runtime.context.search.embedded_on_demand == 2


@pytest.mark.usefixtures("no_worker")
def test_more_rows_missing_than_a_search_embeds_is_degraded(settings, database_url, monkeypatch):
    monkeypatch.setattr(embedding_worker, "ON_DEMAND", 2)
    headers = {"Authorization": f"Bearer {mint_dev_token(settings, 'admin')}"}
    with _client(settings) as c:
        store = _setup(c, headers, {f"/{n}.md": f"note number {n}" for n in range(5)})
        answer = _search(c, headers, store, "note number", "semantic")
        assert answer["degraded"] == ["semantic"], answer
        assert len(store.unembedded(database_url)) == 3  # two embedded by that search
        _search(c, headers, store, "note number", "semantic")
        answer = _search(c, headers, store, "note number", "semantic")
        assert "degraded" not in answer, answer  # the last one found none missing
        assert store.unembedded(database_url) == []


@pytest.mark.usefixtures("no_worker")
def test_a_search_does_not_wait_for_a_model_that_is_stuck_on_a_row(settings, database_url, monkeypatch):
    """The row's text holds the model (the query's does not): the search answers without that
    row's vector after `SEARCH_WAIT`, saying so, and stores nothing for it."""
    monkeypatch.setattr(engine, "SEARCH_WAIT", 0.2)
    encoder = HeldEncoder("slowpoke")
    headers = {"Authorization": f"Bearer {mint_dev_token(settings, 'admin')}"}
    try:
        with _client(settings, encoder) as c:
            store = _setup(c, headers, {"/slow.md": "slowpoke pokes slowly"})
            answer = _search(c, headers, store, "pokes", "hybrid")
            assert not encoder.gate.is_set()  # answered while the model still held the row
            assert answer["degraded"] == ["semantic"], answer
            assert [x["memory_entry"]["path"] for x in answer["results"]] == ["/slow.md"]  # keyword found it
            assert store.unembedded(database_url) == ["/slow.md"]
            encoder.gate.set()
    finally:
        encoder.gate.set()


@pytest.mark.usefixtures("no_worker")
def test_a_search_learns_from_its_request_what_its_index_and_vectors_must_hold(own_settings, monkeypatch):
    """The store's change-log head and whether a row of it lacks its vector come with the
    request's chain: a search whose index and vectors already hold them neither waits for an
    indexer pass nor looks for rows to embed; one write later it does both, and finds the write.
    (A database of its own: a gap in the change log that others left, a transaction rolled back,
    would hold the index's watermark below the head for a while, and the searches would wait.)"""
    settings = own_settings
    from catalog.search.indexer import Indexer

    calls = {"wait_fresh": 0, "embed_pending": 0}
    wait_fresh, embed_pending = Indexer.wait_fresh, embedding_worker.EmbeddingWorker.embed_pending

    async def counted_wait(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls["wait_fresh"] += 1
        return await wait_fresh(self, *args, **kwargs)

    async def counted_embed(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls["embed_pending"] += 1
        return await embed_pending(self, *args, **kwargs)

    monkeypatch.setattr(Indexer, "wait_fresh", counted_wait)
    monkeypatch.setattr(embedding_worker.EmbeddingWorker, "embed_pending", counted_embed)
    headers = {"Authorization": f"Bearer {mint_dev_token(settings, 'admin')}"}
    with _client(settings) as c:
        store = _setup(c, headers, {"/a.md": "platypus eggs", "/b.md": "echidna spines"})
        first = _search(c, headers, store, "echidna spines", "hybrid")  # embeds both rows itself
        assert [h["memory_entry"]["path"] for h in first["results"]][:1] == ["/b.md"], first
        assert calls["embed_pending"] == 1
        before = dict(calls)
        for mode in ("hybrid", "keyword", "hybrid"):
            again = _search(c, headers, store, "echidna spines", mode)
            assert again["results"][0]["memory_entry"]["path"] == "/b.md" and "degraded" not in again, again
        assert calls == before, calls  # nothing to wait for, nothing to embed
        r = c.post(
            f"{store.url}/entries",
            headers=headers,
            params={"scope": "u"},
            json={"path": "/c.md", "contents": "wombat burrows"},
        )
        assert r.status_code == 200, r.text
        answer = _search(c, headers, store, "wombat burrows", "hybrid")
        assert answer["results"][0]["memory_entry"]["path"] == "/c.md" and "degraded" not in answer, answer
        assert calls["embed_pending"] == before["embed_pending"] + 1  # the new row lacked its vector


def test_a_reader_holds_what_the_writers_last_answer_says_its_commit_holds(tmp_path):
    from catalog.search.sharing import Follower

    reloads: list[int] = []
    follower = Follower(tmp_path, lambda: reloads.append(1))
    assert not follower.holds(0)  # no commit of the writer's read yet
    follower._done(1.0, "41.3", 7)
    assert reloads == [1] and follower.holds(7) and not follower.holds(8)
    follower._done(2.0, "41.3", 9)  # the same commit: the watermark passed rows with no work
    assert reloads == [1] and follower.holds(9)
    follower.failing = "disk full"
    assert not follower.holds(1)


def test_a_search_waits_only_for_the_writes_of_the_scopes_it_reads(own_settings, monkeypatch):
    """The change-log head a search learns with its store is that of the scopes it reads: while
    the indexer is held back, a write to another scope of the store makes a search neither wait
    nor answer degraded; a write to the searched scope is found once the indexer goes on."""
    settings = own_settings
    from catalog.search.indexer import Indexer

    waits: list[float] = []
    wait_fresh, sync = Indexer.wait_fresh, Indexer._sync
    going = threading.Event()  # while clear, the indexer's passes wait
    going.set()

    async def counted(self, timeout, head=None):  # type: ignore[no-untyped-def]  # noqa: ASYNC109
        waits.append(timeout)
        return await wait_fresh(self, timeout, head)

    async def paused(self):  # type: ignore[no-untyped-def]
        if not going.is_set():
            await asyncio.to_thread(going.wait, 30)
        return await sync(self)

    monkeypatch.setattr(Indexer, "wait_fresh", counted)
    monkeypatch.setattr(Indexer, "_sync", paused)
    headers = {"Authorization": f"Bearer {mint_dev_token(settings, 'admin')}"}

    def write(scope: str, path: str, text: str) -> None:
        body = {"path": path, "contents": text}
        r = c.post(f"{store.url}/entries", headers=headers, params={"scope": scope}, json=body)
        assert r.status_code == 200, r.text

    def search(scope: str, query: str) -> dict:  # type: ignore[type-arg]
        body = {"scope": scope, "query": query, "mode": "keyword"}
        r = c.post(f"{store.url}/entries:search", headers=headers, json=body)
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    with _client(settings) as c:
        store = _setup(c, headers, {"/a.md": "platypus eggs"})
        write("v", "/v.md", "koala leaves")
        for scope, query, path in (("u", "platypus eggs", "/a.md"), ("v", "koala leaves", "/v.md")):
            found = search(scope, query)  # (waiting for the indexer if it must)
            assert [h["memory_entry"]["path"] for h in found["results"]] == [path], found
        before = len(waits)
        going.clear()
        write("u", "/b.md", "echidna spines")
        other = search("v", "koala leaves")
        assert [h["memory_entry"]["path"] for h in other["results"]] == ["/v.md"], other
        assert "degraded" not in other and len(waits) == before, (other, waits)
        going.set()
        own = search("u", "echidna spines")
        assert [h["memory_entry"]["path"] for h in own["results"]] == ["/b.md"], own
        assert "degraded" not in own
