"""The change logs are pruned without losing what an index still needs, and the background
workers sleep while idle and wake on a commit made by another process (LISTEN/NOTIFY)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import pathlib
import threading
import time
from collections.abc import AsyncIterator, Iterator

import asyncpg
import numpy as np
import pytest
from fake_embedder import HashEncoder

import catalog.search.embedding_worker
from catalog.db import create_pool
from catalog.search import SearchEngine
from catalog.search import repo as search_repo
from catalog.search.corpus import ENTRIES
from catalog.search.embedder import Embedder
from catalog.search.embedding_worker import EMBED_BATCH
from catalog.search.indexer import Indexer
from catalog.search.passes import ChangeFeed, Passes

SCOPE = "u"


@pytest.fixture
async def pool(fresh_database_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(fresh_database_url, min_size=1, max_size=4)
    try:
        yield p
    finally:
        await p.close()


@pytest.fixture
async def store(pool: asyncpg.Pool) -> str:
    return str(
        await pool.fetchval(
            "INSERT INTO memory_stores (schema_id, name, owner, created_by, updated_by) "
            "SELECT id, 'changes', 'admin', 'admin', 'admin' FROM schemas LIMIT 1 RETURNING id"
        )
    )


async def write(conn: asyncpg.Connection | asyncpg.Pool, store: str, texts: dict[str, str]) -> None:
    """Create or change entries as any writer does (the triggers write the change log)."""
    await conn.executemany(
        "INSERT INTO entries (store_id, scope, path, contents, created_by, updated_by) "
        "VALUES ($1, $2, $3, $4, 'admin', 'admin') ON CONFLICT (store_id, scope, session_id, path) "
        "DO UPDATE SET contents = excluded.contents, version = entries.version + 1",
        [(store, SCOPE, path, text) for path, text in texts.items()],
    )


@contextlib.asynccontextmanager
async def idle_engine(pool: asyncpg.Pool, tmp_path: pathlib.Path) -> AsyncIterator[SearchEngine]:
    """A search engine (a fake model) once its change feed listens and its embedding worker idles."""
    engine = SearchEngine.create(pool, Embedder(HashEncoder()), tmp_path / "index")
    await engine.start()
    try:
        assert engine.feed is not None
        await eventually(lambda: holds(engine.feed.listening), "the feed to listen")
        await eventually(lambda: holds(idle(engine.passes)), "an idle worker")
        yield engine
    finally:
        await engine.close()


async def embedded(pool: asyncpg.Pool, store: str, path: str) -> bool:
    """Whether the entry at `path` has the vector of its current version."""
    return bool(
        await pool.fetchval(
            "SELECT embedded_version = version FROM entries WHERE path = $2 AND store_id = $1", store, path
        )
    )


async def found(pool: asyncpg.Pool, ix: Indexer, store: str, word: str) -> list[str]:
    """The paths the index finds for `word` (reading the index only: this wakes no pass)."""
    assert ix.index is not None
    hits, _ = await asyncio.to_thread(ix.index.search, store, [SCOPE], word, 100)
    ids = [doc for doc, _ in hits]
    rows = await pool.fetch("SELECT path FROM entries WHERE id = ANY($1::uuid[])", ids)
    return sorted(r["path"] for r in rows)


async def eventually(predicate, what: str, within: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.05)


async def holds(value: bool) -> bool:
    return value


def idle(passes: Passes) -> bool:
    """No pass running, and none asked for (the feed wakes every worker once it listens)."""
    return passes.done == passes.started and not passes.wake.is_set()


async def age(pool: asyncpg.Pool, up_to: int | None = None) -> None:
    """Make change rows (all, or those up to `up_to`) two days old."""
    await pool.execute(
        "UPDATE entry_changes SET at = at - interval '2 days' WHERE $1::bigint IS NULL OR seq <= $1", up_to
    )


async def head(pool: asyncpg.Pool) -> int:
    return int(await pool.fetchval("SELECT coalesce(max(seq), 0) FROM entry_changes"))


# --- pruning --------------------------------------------------------------------------------------


async def test_pruning_deletes_only_rows_older_than_the_retention_and_marks_how_far(pool, store, tmp_path):
    await write(pool, store, {"/a.md": "one", "/b.md": "two"})
    old = await head(pool)
    await age(pool)
    await write(pool, store, {"/c.md": "three"})
    ix = Indexer(pool, tmp_path / "index", retention=datetime.timedelta(hours=1))
    assert await ix.prune() == 2
    assert [r["seq"] for r in await pool.fetch("SELECT seq FROM entry_changes")] == [old + 1]
    assert await pool.fetchval("SELECT up_to FROM change_log_pruned WHERE changes = 'entry_changes'") == old
    assert await ix.prune() == 0  # nothing older left: the young row stays
    assert await pool.fetchval("SELECT count(*) FROM entry_changes") == 1


async def test_an_index_stopped_past_the_pruned_rows_is_rebuilt_and_misses_nothing(pool, store, tmp_path):
    """A process whose index stopped before rows it never applied were pruned (by another
    process) must not catch up from the log, which no longer holds them."""
    await write(pool, store, {"/keep.md": "wombat kept", "/gone.md": "wombat doomed", "/edit.md": "before"})
    ix = Indexer(pool, tmp_path / "index")
    await ix.start(run=False)
    await ix.close()  # stopped here, its watermark saved
    stopped_at = await head(pool)

    # meanwhile, in other processes: a new entry, a deletion, an edit; then the log is pruned
    await write(pool, store, {"/new.md": "wombat arrived", "/edit.md": "wombat after"})
    await pool.execute("DELETE FROM entries WHERE path = '/gone.md'")
    await age(pool)
    other = Indexer(pool, tmp_path / "other-index", retention=datetime.timedelta(hours=1))
    assert await other.prune() > 0
    assert await pool.fetchval("SELECT count(*) FROM entry_changes") == 0

    ix = Indexer(pool, tmp_path / "index")
    await ix.start(run=False)  # the watermark it saved is below the prune mark: rebuilt
    try:
        assert ix.watermark >= stopped_at
        assert await found(pool, ix, store, "wombat") == ["/edit.md", "/keep.md", "/new.md"]
        # and it is not rebuilt again at every pass: it catches up from the log as usual
        await write(pool, store, {"/later.md": "wombat later"})
        assert await ix.catch_up() == 1
        assert not ix._needs_rebuild
        assert await found(pool, ix, store, "wombat") == ["/edit.md", "/keep.md", "/later.md", "/new.md"]
    finally:
        await ix.close()


async def test_rows_an_index_has_not_passed_are_kept_when_young(pool, store, tmp_path):
    ix = Indexer(pool, tmp_path / "index", retention=datetime.timedelta(hours=1))
    await ix.start(run=False)
    try:
        await write(pool, store, {"/x.md": "numbat"})
        assert await ix.prune() == 0  # young: kept, though this index has not applied it
        assert await ix.catch_up() == 1
        assert await found(pool, ix, store, "numbat") == ["/x.md"]
    finally:
        await ix.close()


# --- idle workers and the change feed ----------------------------------------------------------


async def test_an_idle_indexer_does_not_poll_and_wakes_on_another_process_commit(
    pool, store, tmp_path, fresh_database_url
):
    feed = ChangeFeed(pool)
    # a poll interval of an hour: only a notification can bring the write in
    ix = Indexer(pool, tmp_path / "index", poll_interval=3600.0, feed=feed)
    feed.start()
    await ix.start()
    try:
        await eventually(lambda: holds(feed.listening), "the feed to listen")
        await eventually(lambda: holds(idle(ix.passes)), "an idle indexer")
        idle_since = ix.passes.started
        await asyncio.sleep(1.0)
        assert ix.passes.started == idle_since  # no pass while nothing changes

        other = await asyncpg.connect(fresh_database_url)  # another process's connection
        try:
            await write(other, store, {"/n.md": "bilby"})
        finally:
            await other.close()
        await eventually(lambda: found(pool, ix, store, "bilby"), "the other process's write to be indexed")
    finally:
        await ix.close()
        await feed.close()


async def test_writes_gather_for_one_commit_but_a_search_never_waits_for_the_interval(
    pool, store, tmp_path, fresh_database_url
):
    feed = ChangeFeed(pool)
    # an interval of an hour: after the first commit only a search can bring a write in
    ix = Indexer(pool, tmp_path / "index", poll_interval=3600.0, feed=feed, commit_interval=3600.0)
    feed.start()
    await ix.start()
    try:
        await eventually(lambda: holds(feed.listening), "the feed to listen")
        await write(pool, store, {"/a.md": "numbat"})  # the first since the start: committed at once
        await eventually(lambda: found(pool, ix, store, "numbat"), "the first write to be indexed")
        await eventually(lambda: holds(ix.passes.done == ix.passes.started), "no pass running")
        commits, started, heard = ix.commits, ix.passes.started, feed.notifications

        other = await asyncpg.connect(fresh_database_url)  # another process's writes, notified
        try:
            await write(other, store, {"/b.md": "quokka"})
            await write(other, store, {"/c.md": "quokka"})
        finally:
            await other.close()
        await eventually(lambda: holds(feed.notifications >= heard + 2), "the feed to hear both")
        await asyncio.sleep(0.5)  # long enough for a pass that was not put off to have started
        assert ix.passes.started == started and ix.commits == commits  # gathering
        assert await found(pool, ix, store, "quokka") == []

        assert await ix.wait_fresh(5.0) is True  # a search: served now, both writes in one commit
        assert await found(pool, ix, store, "quokka") == ["/b.md", "/c.md"]
        assert ix.commits == commits + 1
    finally:
        await ix.close()
        await feed.close()


async def test_the_idle_embedding_worker_wakes_on_another_process_commit(
    pool, store, tmp_path, fresh_database_url, monkeypatch
):
    # only a notification can wake it
    monkeypatch.setattr(catalog.search.embedding_worker, "EMBED_POLL", 3600.0)
    async with idle_engine(pool, tmp_path) as engine:
        idle_since = engine.passes.started
        await asyncio.sleep(1.0)
        assert engine.passes.started == idle_since  # no pass while nothing changes

        other = await asyncpg.connect(fresh_database_url)
        try:
            await write(other, store, {"/e.md": "echidna"})
        finally:
            await other.close()

        await eventually(lambda: embedded(pool, store, "/e.md"), "the other process's write to be embedded")


async def test_a_write_is_one_embedding_pass_though_it_wakes_the_worker_twice(
    pool, store, tmp_path, monkeypatch
):
    """The server's write wakes the worker itself, and the change feed's notification of its
    commit wakes it again, a little later: one pass embeds the row, none claims for nothing
    after it."""
    monkeypatch.setattr(catalog.search.embedding_worker, "EMBED_POLL", 3600.0)
    monkeypatch.setattr(catalog.search.embedding_worker, "EMBED_GATHER", 1.0)
    async with idle_engine(pool, tmp_path) as engine:
        assert engine.feed is not None
        started, heard = engine.passes.started, engine.feed.notifications

        await write(pool, store, {"/w.md": "wallaby"})
        engine.written(ENTRIES)  # as the write's request does once it committed
        await asyncio.sleep(0.1)
        engine.worker.wake()  # as a notification that came later does

        await eventually(lambda: embedded(pool, store, "/w.md"), "the write to be embedded")
        await eventually(lambda: holds(engine.feed.notifications > heard), "the commit's notification")
        await eventually(lambda: holds(idle(engine.passes)), "an idle worker")
        assert engine.passes.started == started + 1


@contextlib.contextmanager
def counted_claims(
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[list[tuple[str, int]], list[str], list[int]]]:
    """The embedding worker's claims (corpus, rows claimed), its looks at others' claims (corpus),
    and the most passes that ran at once in one corpus, as the worker makes them."""
    claims: list[tuple[str, int]] = []
    looks: list[str] = []
    most = [0]
    running: dict[str, int] = {}
    claim, expiry = search_repo.claim_unembedded, search_repo.next_claim_expiry
    embed_pass = catalog.search.embedding_worker.EmbeddingWorker.embed_pass

    async def claiming(conn, limit, corpus=ENTRIES, lease=60.0):  # type: ignore[no-untyped-def]
        rows = await claim(conn, limit, corpus, lease)
        claims.append((corpus.name, len(rows)))
        return rows

    async def looking(conn, corpus=ENTRIES):  # type: ignore[no-untyped-def]
        looks.append(corpus.name)
        return await expiry(conn, corpus)

    async def passing(self, limit=EMBED_BATCH, corpus=ENTRIES, claimed=None):  # type: ignore[no-untyped-def]
        running[corpus.name] = running.get(corpus.name, 0) + 1
        most[0] = max(most[0], running[corpus.name])
        try:
            return await embed_pass(self, limit, corpus, claimed)
        finally:
            running[corpus.name] -= 1

    monkeypatch.setattr(search_repo, "claim_unembedded", claiming)
    monkeypatch.setattr(search_repo, "next_claim_expiry", looking)
    monkeypatch.setattr(catalog.search.embedding_worker.EmbeddingWorker, "embed_pass", passing)
    yield claims, looks, most


async def test_a_writes_embedding_pass_claims_once_in_its_own_corpus(
    pool, store, tmp_path, fresh_database_url, monkeypatch
):
    """A pass woken by an entry's write (this process's own, or another's through the change
    feed) claims once, in the entries' table: no claim by an idle second lane, none in the
    transcripts' table, one look at the claims others hold."""
    monkeypatch.setattr(catalog.search.embedding_worker, "EMBED_POLL", 3600.0)
    async with idle_engine(pool, tmp_path) as engine:
        assert engine.transcripts is not None  # two corpora
        with counted_claims(monkeypatch) as (claims, looks, _):
            await write(pool, store, {"/own.md": "bilby"})
            engine.written(ENTRIES)  # as the write's request does once it committed
            await eventually(lambda: embedded(pool, store, "/own.md"), "the write to be embedded")
            await eventually(lambda: holds(idle(engine.passes)), "an idle worker")
            assert claims == [("entries", 1)] and looks == ["entries"]

            claims.clear(), looks.clear()
            other = await asyncpg.connect(fresh_database_url)
            try:
                await write(other, store, {"/other.md": "potoroo"})
            finally:
                await other.close()
            await eventually(lambda: embedded(pool, store, "/other.md"), "the other write to be embedded")
            await eventually(lambda: holds(idle(engine.passes)), "an idle worker")
            assert claims == [("entries", 1)] and looks == ["entries"]


async def test_a_backlog_is_embedded_by_two_lanes_the_second_once_a_claim_was_full(
    pool, store, tmp_path, monkeypatch
):
    monkeypatch.setattr(catalog.search.embedding_worker, "EMBED_POLL", 3600.0)
    monkeypatch.setattr(catalog.search.embedding_worker, "EMBED_BATCH", 2)
    async with idle_engine(pool, tmp_path) as engine:
        with counted_claims(monkeypatch) as (claims, _, most):
            await write(pool, store, {f"/b{i}.md": f"bandicoot {i}" for i in range(7)})
            engine.written(ENTRIES)
            for i in range(7):
                await eventually(lambda i=i: embedded(pool, store, f"/b{i}.md"), "the backlog to be embedded")
            await eventually(lambda: holds(idle(engine.passes)), "an idle worker")
            assert most[0] == 2  # a second lane, never a third
            assert sum(n for _, n in claims) == 7 and {name for name, _ in claims} == {"entries"}
            assert claims[0] == ("entries", 2)


async def test_a_search_shares_the_model_run_of_a_row_the_worker_has_given_the_model(
    pool, store, tmp_path, monkeypatch
):
    """A search that needs a row the embedding worker's pass has queued for the model moves its
    text ahead of the pass's other rows and stores the vector that run gives, while the pass
    waits for the rest; the model runs the text once, and the pass does not write the row again."""
    monkeypatch.setattr(catalog.search.embedding_worker, "EMBED_POLL", 3600.0)
    seen: list[list[str]] = []
    running, release, rest = threading.Event(), threading.Event(), threading.Event()
    mine = "a quoll of the searched scope"  # the longest text: queued last (shortest first)

    class Slow(HashEncoder):
        def encode(self, texts):  # type: ignore[no-untyped-def]
            seen.append(list(texts))
            running.set()
            release.wait(60)
            if len(seen) > 1 and mine not in texts:
                rest.wait(60)  # the pass's later batches: once the search has stored its row
            return super().encode(texts)

    engine = SearchEngine.create(pool, Embedder(Slow(), background_batch=4, lanes=1), tmp_path / "index")
    await engine.start()
    try:
        assert engine.feed is not None
        await eventually(lambda: holds(engine.feed.listening), "the feed to listen")
        await eventually(lambda: holds(idle(engine.passes)), "an idle worker")
        others = {f"/q{i:02}.md": f"quoll {i:02}" for i in range(15)}
        await write(pool, store, others)
        await pool.execute(
            "INSERT INTO entries (store_id, scope, path, contents, created_by, updated_by) "
            "VALUES ($1, 'searched', '/mine.md', $2, 'admin', 'admin')",
            store,
            mine,
        )
        engine.written(ENTRIES)
        assert await asyncio.to_thread(running.wait, 60)  # the pass's first batch of four runs
        assert mine not in seen[0]
        search = asyncio.create_task(engine.worker.embed_pending(store, ["searched"], ENTRIES, 60))
        await eventually(lambda: holds(engine.embedder.queued[0] == 1), "its text moved ahead")
        release.set()
        assert await search is True
        assert seen[1] == [mine]
        assert await embedded(pool, store, "/mine.md")
        written = await pool.fetchval("SELECT xmin::text FROM entries WHERE path = '/mine.md'")
        rest.set()
        for path in others:
            await eventually(lambda path=path: embedded(pool, store, path), "the pass's rows to be embedded")
        await eventually(lambda: holds(idle(engine.passes)), "an idle worker")
        assert sorted(text for batch in seen for text in batch) == sorted([*others.values(), mine])
        assert await pool.fetchval("SELECT xmin::text FROM entries WHERE path = '/mine.md'") == written
    finally:
        release.set()
        rest.set()
        await engine.close()


async def test_a_row_changed_after_its_claim_stays_stale_and_its_claim_is_let_go(pool, store):
    """Storing a pass's vectors skips a row written since it was claimed (its vector would be
    of the old text) and, in the same statement, frees that row's claim: the next pass takes it
    at once rather than after the lease."""
    await write(pool, store, {"/same.md": "quokka", "/changed.md": "numbat"})
    async with pool.acquire() as conn:
        rows = await search_repo.claim_unembedded(conn, 10, ENTRIES, 600.0)
        assert sorted(r["contents"] for r in rows) == ["numbat", "quokka"]
        await write(pool, store, {"/changed.md": "numbat, changed"})
        vectors = HashEncoder().encode([r["contents"] for r in rows])
        made = [(r["id"], r["version"], v, 1) for r, v in zip(rows, vectors, strict=True)]
        await search_repo.set_embeddings(conn, made, ENTRIES, "m", release=[r["id"] for r in rows])
    states = {
        r["path"]: (r["embedded"], r["claimed"])
        for r in await pool.fetch(
            "SELECT path, embedded_version IS NOT DISTINCT FROM version AS embedded, "
            "embedding_claim IS NOT NULL AS claimed FROM entries"
        )
    }
    assert states == {"/same.md": (True, False), "/changed.md": (False, False)}
    stored = await pool.fetchval("SELECT embedding FROM entries WHERE path = '/same.md'")
    assert (
        stored is not None
        and abs(
            float(
                np.dot(np.asarray(stored.to_numpy()), vectors[[r["contents"] for r in rows].index("quokka")])
            )
            - 1.0
        )
        < 1e-5
    )
    async with pool.acquire() as conn:
        again = await search_repo.claim_unembedded(conn, 10, ENTRIES, 600.0)
    assert [r["contents"] for r in again] == ["numbat, changed"]


async def test_workers_poll_while_the_feed_is_not_listening(pool, store, tmp_path):
    """Without the feed (lost, or not yet connected) changes are still found, by polling."""
    feed = ChangeFeed(pool)  # never started: not listening
    ix = Indexer(pool, tmp_path / "index", poll_interval=0.05, feed=feed)
    await ix.start()
    try:
        await write(pool, store, {"/p.md": "quoll"})
        await eventually(lambda: found(pool, ix, store, "quoll"), "the write to be indexed by polling")
    finally:
        await ix.close()


async def test_a_write_made_while_the_feed_was_lost_is_indexed_once_it_listens_again(
    pool, store, tmp_path, fresh_database_url
):
    feed = ChangeFeed(pool, retry_delay=0.2)
    ix = Indexer(pool, tmp_path / "index", poll_interval=3600.0, feed=feed)
    feed.start()
    await ix.start()
    try:
        await eventually(lambda: holds(feed.listening), "the feed to listen")
        other = await asyncpg.connect(fresh_database_url)
        try:
            # the listening connection is cut (a restart of PostgreSQL, a network failure)
            await other.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE 'LISTEN%'"
            )
            await eventually(lambda: holds(not feed.listening), "the feed to notice")
            await write(other, store, {"/lost.md": "dunnart"})  # no one listens for its notification
        finally:
            await other.close()
        await eventually(lambda: found(pool, ix, store, "dunnart"), "the write to be indexed")
        await eventually(lambda: holds(feed.listening), "the feed to listen again")
    finally:
        await ix.close()
        await feed.close()


def test_a_write_wakes_the_indexer_of_its_own_corpus_only(tmp_path):
    """An entry written wakes the entries' indexer (and the embedding worker), not the
    transcripts' (its change log's notifications wake it for its own writes); a write of unknown
    corpus (a restore, an erasure) wakes both."""
    engine = SearchEngine.create(None, Embedder(HashEncoder()), tmp_path / "index")  # type: ignore[arg-type]
    assert engine.transcripts is not None
    entries, transcripts = engine.indexer.passes.wake, engine.transcripts.indexer.passes.wake
    engine.written(ENTRIES)
    assert entries.is_set() and not transcripts.is_set() and engine.passes.wake.is_set()
    entries.clear()
    engine.written()
    assert entries.is_set() and transcripts.is_set()
