"""An index directory has one writer at a time (tantivy's writer lock): a slot another writer
holds is told apart from one that fails to open for another reason by the lock itself
(`catalog.search.fulltext.writer_held`), never by the text of tantivy's error."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from catalog.cli.reindex import reindex
from catalog.search.fulltext import FullTextIndex, IndexedEntry, WriterLocked, writer_held
from catalog.search.indexer import open_slot
from catalog.settings import Settings

HEAP = 15_000_000


def _entry(n: int) -> IndexedEntry:
    return IndexedEntry(f"00000000-0000-0000-0000-{n:012d}", "s", "u", "", f"/{n}.md", "walrus", "")


def test_a_directory_is_held_while_its_writer_lives(tmp_path: Path):
    directory = tmp_path / "slot-0"
    assert not writer_held(directory)  # no index yet
    index = FullTextIndex(directory, heap_bytes=HEAP)
    assert writer_held(directory)
    with pytest.raises(WriterLocked):
        FullTextIndex(directory, heap_bytes=HEAP)
    assert writer_held(directory)  # the probe let go of nothing it did not take
    index.close()
    del index
    assert not writer_held(directory)
    again = FullTextIndex(directory, heap_bytes=HEAP)  # the lock file stays, the lock does not
    again.close()


def test_a_held_slot_is_passed_over_for_the_next(tmp_path: Path):
    held = FullTextIndex(tmp_path / "slot-0", heap_bytes=HEAP)
    index = open_slot(tmp_path)
    try:
        assert index.directory == tmp_path / "slot-1"
        assert not list(tmp_path.glob("slot-0.corrupt-*"))
    finally:
        index.close()
        held.close()


def test_a_broken_slot_under_a_path_that_says_lock_is_rebuilt_not_passed_over(tmp_path: Path):
    """A segment file gone missing: tantivy's error names the file's path, here under a
    directory whose name holds "lock". The slot is unreadable, not held: it is moved aside and
    rebuilt in place, instead of being left broken while the server takes the next slot."""
    root = tmp_path / "blockstore" / "index"
    index = FullTextIndex(root / "slot-0", heap_bytes=HEAP)
    index.apply([], [_entry(1), _entry(2)])
    index.close()
    del index
    segments = list((root / "slot-0").glob("*.idx"))
    assert segments
    for segment in segments:
        segment.unlink()

    reopened = open_slot(root)
    try:
        assert reopened.directory == root / "slot-0"
        assert reopened.num_docs() == 0  # a fresh index, to be rebuilt from PostgreSQL
        assert list(root.glob("slot-0.corrupt-*"))
        assert not (root / "slot-1").exists()
    finally:
        reopened.close()


def test_reindex_skips_a_slot_a_server_holds(own_settings: Settings, capsys: pytest.CaptureFixture[str]):
    held = FullTextIndex(own_settings.index_dir / "slot-0", heap_bytes=HEAP)
    try:
        assert asyncio.run(reindex(own_settings)) == 0
    finally:
        held.close()
    out, err = capsys.readouterr()
    assert "entries slot-0: held by a running server, which keeps it current; skipped" in err
    assert "transcripts slot-0: 0 documents indexed" in err
    assert "1 full-text index slot(s) rebuilt, 1 skipped" in out
