"""The indexer's watermark never passes a change row that may still commit (a young gap), and
passes a gap once it is old enough to be a rolled-back write."""

from __future__ import annotations

from pathlib import Path

from catalog.search.indexer import Indexer


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
