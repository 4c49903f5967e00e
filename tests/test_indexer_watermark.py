"""The indexer's watermark never passes a change row that may still commit (a young gap), and
passes a gap once it is old enough to be a rolled-back write. Nor does it pass a row the index
did not commit: a failed commit (a full disk) or one that lost documents moves nothing, in
memory or in the watermark file; the rows are retried until they are applied."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from index_entries import insert

from catalog.search.fulltext import FullTextIndex, IndexDiverged
from catalog.search.indexer import WATERMARK_FILE, Indexer
from catalog.search.passes import Passes

ENOSPC = "An IO error occurred: 'No space left on device (os error 28)'"


def indexer() -> Indexer:
    return Indexer(pool=None, index_root=Path("/nonexistent"), gap_timeout=30.0)  # type: ignore[arg-type]


def test_contiguous_rows_move_the_watermark():
    ix = indexer()
    assert ix._advance([1, 2, 3]) is True
    assert ix.watermark == 3


def test_a_young_gap_holds_the_watermark_and_later_rows_are_remembered():
    ix = indexer()
    ix._advance([1, 2, 4, 5])  # 3 is drawn but not yet visible
    assert ix.watermark == 2
    assert {4, 5} <= ix._done_above  # applied already, so not applied twice
    ix._advance([3])  # the late commit arrives
    assert ix.watermark == 5 and not ix._done_above and not ix._gaps


def test_an_old_gap_is_a_rolled_back_write(monkeypatch):
    ix = indexer()
    clock = [1000.0]
    monkeypatch.setattr("catalog.search.indexer.time.monotonic", lambda: clock[0])
    ix._advance([1, 3])
    assert ix.watermark == 1
    clock[0] += 31.0
    assert ix._advance([]) is True
    assert ix.watermark == 3


# --- failures, against the real index and PostgreSQL ------------------------------------------


class FaultyWriter:
    """Stands in for tantivy's writer and passes everything through, except that while `fail` is
    set commit() raises what tantivy raises on a full disk, and while `lose` is set commit()
    succeeds without the documents added since the last commit (what a writer killed by an
    earlier I/O error does)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.fail = False
        self.lose = False
        self.commits = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def commit(self) -> int:
        self.commits += 1
        if self.fail:
            raise ValueError(ENOSPC)
        if self.lose:
            self.real.rollback()
        return int(self.real.commit())


async def head(pool: asyncpg.Pool) -> int:
    return int(await pool.fetchval("SELECT coalesce(max(seq), 0) FROM entry_changes"))


async def found(pool: asyncpg.Pool, ix: Indexer, store: str, word: str) -> list[str]:
    """The paths of `store` whose entries the indexer's index finds for `word`."""
    store_id = str(await pool.fetchval("SELECT id FROM memory_stores WHERE name = $1", store))
    assert ix.index is not None
    hits, _ = await asyncio.to_thread(ix.index.search, store_id, ["u"], word, 100)
    ids = [doc for doc, _ in hits]
    rows = await pool.fetch("SELECT path FROM entries WHERE id = ANY($1::uuid[])", ids)
    return sorted(r["path"] for r in rows)


def saved(ix: Indexer) -> int:
    return int(json.loads((ix.directory / WATERMARK_FILE).read_text())["seq"])


async def eventually(predicate, what: str, within: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.05)


async def test_a_failed_commit_moves_no_watermark_and_the_rows_are_applied_once_it_works(
    pool, store, tmp_path
):
    ix = Indexer(pool, tmp_path / "index")
    await ix.start(run=False)
    try:
        before = ix.watermark
        assert saved(ix) == before == await head(pool)
        await insert(pool, store, {"/a.md": "quokka one", "/b.md": "quokka two"})
        assert ix.index is not None
        writer = ix.index.writer = FaultyWriter(ix.index.writer)
        writer.fail = True
        for _ in range(2):
            with pytest.raises(ValueError, match="No space left"):
                await ix._pass()
            assert ix.watermark == before and saved(ix) == before  # in memory and on disk
            assert ix.lag(await head(pool)) == 2
        assert await found(pool, ix, store, "quokka") == []

        writer.fail = False  # space is back
        applied, more = await ix._pass()
        assert (applied, more) == (2, False)
        assert ix.watermark == saved(ix) == await head(pool)
        assert await found(pool, ix, store, "quokka") == ["/a.md", "/b.md"]
        assert ix.index.num_docs() == await pool.fetchval("SELECT count(*) FROM entries")
    finally:
        await ix.close()


async def test_a_commit_that_loses_documents_is_caught_and_retried(pool, store, tmp_path):
    ix = Indexer(pool, tmp_path / "index")
    await ix.start(run=False)
    try:
        before = ix.watermark
        await insert(pool, store, {"/c.md": "wombat three"})
        assert ix.index is not None
        writer = ix.index.writer = FaultyWriter(ix.index.writer)
        writer.lose = True
        with pytest.raises(IndexDiverged, match="kept 0 of 1 upserted"):
            await ix._pass()
        assert ix.watermark == before and saved(ix) == before
        writer.lose = False
        await ix._pass()
        assert await found(pool, ix, store, "wombat") == ["/c.md"]
        assert ix.watermark == saved(ix) == await head(pool)

        # a delete the commit did not keep is caught the same way
        await pool.execute("DELETE FROM entries WHERE path = '/c.md'")
        writer.lose = True
        with pytest.raises(IndexDiverged, match="kept 1 of 1 deleted"):
            await ix._pass()
        writer.lose = False
        await ix._pass()
        assert await found(pool, ix, store, "wombat") == []
    finally:
        await ix.close()


async def test_an_unwritable_watermark_file_lags_and_is_written_later(pool, store, tmp_path, monkeypatch):
    ix = Indexer(pool, tmp_path / "index")
    await ix.start(run=False)
    try:
        before = ix.watermark
        await insert(pool, store, {"/d.md": "numbat four"})
        real = Indexer._write_watermark

        def full(self: Indexer, seq: int) -> None:
            if not self.directory.is_relative_to(tmp_path):  # the module's server writes its own
                return real(self, seq)
            raise OSError(28, "No space left on device", str(self.directory / "catalog-watermark.tmp"))

        monkeypatch.setattr(Indexer, "_write_watermark", full)
        with pytest.raises(OSError, match="No space left"):
            await ix._pass()
        # the index committed the row, so the watermark in memory passes it; the file lags
        # (a restart would replay the row: harmless)
        assert ix.watermark == await head(pool) and saved(ix) == before
        assert await found(pool, ix, store, "numbat") == ["/d.md"]
        monkeypatch.setattr(Indexer, "_write_watermark", real)
        await ix._pass()
        assert saved(ix) == ix.watermark
    finally:
        await ix.close()


async def test_the_loop_backs_off_reports_and_catches_up_by_itself(pool, store, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="catalog.search")
    ix = Indexer(pool, tmp_path / "index", poll_interval=0.02, retry_delay=0.02, max_retry_delay=0.1)
    await ix.start()
    try:
        assert (await ix.status()).healthy
        assert ix.index is not None
        writer = ix.index.writer = FaultyWriter(ix.index.writer)
        writer.fail = True
        texts = {f"/e{i}.md": f"bilby {i}" for i in range(5)}
        await insert(pool, store, texts)

        async def retried() -> bool:
            return ix.health.failures_total >= 5

        await eventually(retried, "five failed attempts")
        status = await ix.status()
        assert not status.healthy and status.lag == 5
        assert status.reason is not None and "No space left on device" in status.reason
        assert status.failing_since is not None
        assert await ix.wait_fresh() is False  # a search does not wait for passes that cannot succeed
        assert await found(pool, ix, store, "bilby") == []

        writer.fail = False  # no restart, no reindex

        async def caught_up() -> bool:
            s = await ix.status()
            return s.healthy and s.lag == 0

        await eventually(caught_up, "the index to catch up")
        assert await found(pool, ix, store, "bilby") == sorted(texts)
        assert saved(ix) == ix.watermark == await head(pool)
        assert await ix.wait_fresh() is True
        # this indexer's lines only (the module's server logs its own)
        mine = [r for r in caplog.records if getattr(r, "where", None) == str(ix.index_root)]
        messages = [r.getMessage() for r in mine]
        # one line when the failure started, one when it ended, however many retries between;
        # a full disk is expected: no trace
        assert len([m for m in messages if "full-text index: failing" in m]) == 1, messages
        assert len([m for m in messages if "full-text index: recovered" in m]) == 1, messages
        assert not [r for r in caplog.records if r.name == "catalog.search" and r.exc_info]
    finally:
        await ix.close()


async def test_a_rebuild_that_fails_at_start_leaves_it_degraded_and_is_retried(
    pool, store, tmp_path, monkeypatch
):
    await insert(pool, store, {"/f.md": "dugong five"})
    real = FullTextIndex.commit
    broken = [True]

    def commit(self: FullTextIndex) -> None:
        # only this test's index: the module's server (its indexer woken by these writes) must
        # not fail, or its recovery would be logged in another test
        if broken[0] and self.directory.is_relative_to(tmp_path):
            raise ValueError(ENOSPC)
        real(self)

    monkeypatch.setattr(FullTextIndex, "commit", commit)
    ix = Indexer(pool, tmp_path / "index", retry_delay=0.02, max_retry_delay=0.1)
    await ix.start()  # the server starts degraded instead of not at all
    try:
        status = await ix.status()
        assert not status.healthy and status.lag == await head(pool)
        assert status.reason is not None and status.reason.startswith("rebuilding the index: No space left")
        broken[0] = False

        async def caught_up() -> bool:
            s = await ix.status()
            return s.healthy and s.lag == 0

        await eventually(caught_up, "the rebuild")
        assert await found(pool, ix, store, "dugong") == ["/f.md"]
    finally:
        await ix.close()


# --- what a search waits for ----------------------------------------------------------------------

WAIT = 30.0  # a bound for each wait of the tests below, not a speed claim


async def test_a_pass_that_ends_holding_what_a_wait_needs_ends_the_wait():
    """A search that knows its head waits for the pass in progress when that pass ends holding
    it; without a head (or while the pass ends short of it) it waits for a pass that started
    after it asked."""
    passes = Passes()
    held = False
    first = passes.begin()  # a pass in progress when the searches ask
    knows = asyncio.create_task(passes.wait_next(WAIT, lambda: held))
    plain = asyncio.create_task(passes.wait_next(WAIT))
    await asyncio.sleep(0)
    await passes.end(first)  # it ended short of the head
    await asyncio.sleep(0)
    assert not knows.done() and not plain.done()
    second = passes.begin()
    held = True
    await passes.end(second)  # it started after both asked: both are answered
    await asyncio.wait_for(asyncio.gather(knows, plain), WAIT)

    third = passes.begin()
    knows = asyncio.create_task(passes.wait_next(WAIT, lambda: held))
    plain = asyncio.create_task(passes.wait_next(WAIT))
    await asyncio.sleep(0)
    await passes.end(third)  # in progress when they asked, and it holds the head
    await asyncio.wait_for(knows, WAIT)
    await asyncio.sleep(0)
    assert not plain.done()
    fourth = passes.begin()
    await passes.end(fourth)
    await asyncio.wait_for(plain, WAIT)


async def test_a_search_that_knows_its_head_is_answered_by_the_pass_in_progress(pool, store, tmp_path):
    """The index's pass in progress read the search's write; when it commits, the search is
    answered (and finds the write), with no pass after it; a search without its head still
    waits for one."""
    ix = Indexer(pool, tmp_path / "index")
    await ix.start(run=False)  # no loop: only the passes the test runs
    try:
        await insert(pool, store, {"/e.md": "bilby five"})
        request_head = await head(pool)
        assert ix.index is not None and not ix.holds(request_head)
        applying, go = threading.Event(), threading.Event()
        apply = ix.index.apply

        def held_up(deletes: list[str], upserts: list[Any]) -> None:
            applying.set()
            go.wait(WAIT)
            apply(deletes, upserts)

        ix.index.apply = held_up  # type: ignore[method-assign]
        in_progress = asyncio.create_task(ix._pass())
        assert await asyncio.to_thread(applying.wait, WAIT)  # it read the change
        knows = asyncio.create_task(ix.wait_fresh(WAIT, request_head))
        plain = asyncio.create_task(ix.wait_fresh(WAIT))
        await asyncio.sleep(0.05)
        assert not knows.done()
        go.set()
        assert await in_progress == (1, False)
        assert await asyncio.wait_for(knows, WAIT) is True
        assert await found(pool, ix, store, "bilby") == ["/e.md"]
        assert not plain.done()
        await ix._pass()
        assert await asyncio.wait_for(plain, WAIT) is True
    finally:
        await ix.close()


async def test_a_search_is_answered_before_the_pass_writes_its_watermark_file(
    pool, store, tmp_path, monkeypatch
):
    """The file lags harmlessly (a restart replays the rows past it), so a search waiting for a
    pass does not wait for it."""
    ix = Indexer(pool, tmp_path / "index")
    await ix.start(run=False)
    try:
        before = ix.watermark
        await insert(pool, store, {"/f.md": "dunnart six"})
        writing, go = threading.Event(), threading.Event()
        real = Indexer._write_watermark

        def slow(self: Indexer, seq: int) -> None:
            if self.directory.is_relative_to(tmp_path):  # the module's server writes its own
                writing.set()
                go.wait(WAIT)
            real(self, seq)

        monkeypatch.setattr(Indexer, "_write_watermark", slow)
        search = asyncio.create_task(ix.wait_fresh(WAIT))
        await asyncio.sleep(0)
        in_progress = asyncio.create_task(ix._pass())
        assert await asyncio.wait_for(search, WAIT) is True
        assert await found(pool, ix, store, "dunnart") == ["/f.md"]
        assert await asyncio.to_thread(writing.wait, WAIT)
        assert saved(ix) == before and not in_progress.done()
        go.set()
        await in_progress
        assert saved(ix) == ix.watermark == await head(pool)
    finally:
        await ix.close()
