"""What a search is asked and what it answers: the `Query` (or the `Given` rows of an as-of
search) the engine ranks, its `Ranking` (ids and scores, the legs that may have missed rows, and
with `explain` how each score was made: `Explained`, `HitScores`, `LegRun`), the `Found` rows the
caller re-reads, and the engine's `SearchStatus`."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

from catalog.search.corpus import ENTRIES, Corpus
from catalog.search.health import WorkerStatus
from catalog.wire import SearchLeg


@dataclass(frozen=True)
class SearchStatus:
    index: WorkerStatus  # the entries' full-text index
    embeddings: WorkerStatus  # the embedding worker, both corpora
    other_indexes: tuple[WorkerStatus, ...] = ()  # the transcripts' full-text index

    @property
    def reasons(self) -> list[str]:
        """Why derived state is not keeping up; empty when all is well."""
        workers = (self.index, *self.other_indexes, self.embeddings)
        return [f"{w.name}: {w.reason}" for w in workers if not w.healthy]


@dataclass(frozen=True)
class Query:
    """What to rank: a store's entries (or transcript items) in some scopes, optionally one
    session (for transcripts: `conversation:<id>` or `session:<id>`) and a path prefix (a role)."""

    store_id: str
    scopes: tuple[str, ...]
    text: str
    limit: int  # candidates taken from each mode
    mode: str = "hybrid"  # hybrid, keyword or semantic
    session_id: str | None = None
    path_prefix: str | None = None
    corpus: Corpus = ENTRIES
    where: Mapping[str, Any] | None = None  # only entries whose metadata holds each pair (a filter)
    # the query's vector, when the caller started computing it early (`SearchEngine.embed_query`)
    vector: asyncio.Future[np.ndarray] | None = field(default=None, compare=False)
    explain: bool = False  # also say how each hit's score was made and what each leg did
    include_inactive: bool = False  # superseded and merged entries too (consolidation)
    # the head of the corpus's change log read after the request began (`Securable.changes`, for
    # entries): an index that already holds it holds every write committed before the request
    changes: int | None = None
    # whether a row of the store lacked its vector when the request began (None: not known, look)
    unembedded: bool | None = None
    # how many of the best hits the caller reads first (None: all): hybrid ranking reads the
    # neighbours only of the candidates that can change those places (`fusion.lifting`); past
    # them, an entry a neighbour would have lifted may rank lower
    needed: int | None = None


@dataclass(frozen=True)
class Given:
    """A row ranked outside the indexes: an as-of search ranks the versions of entries alive at
    a time, read from the history (`SearchEngine.rank_given`)."""

    id: str
    version: int
    scope: str
    session_id: str
    path: str
    contents: str | None
    description: str | None
    created_at: int = 0  # epoch ms: the order neighbours are found in


@dataclass(frozen=True)
class HitScores:
    """How one hit's score was made (`fusion`): the keyword score (from its share of the query's
    term weight, `coverage`) and BM25's raw score where BM25 found it, the semantic score (from
    `cosine`) where it has a vector, the mode's own score of the entry (`fused`), what its
    numbered neighbours added (`neighbour_lift`), and the `score` answered."""

    score: float
    fused: float
    neighbour_lift: float = 0.0
    keyword: float | None = None
    coverage: float | None = None
    bm25: float | None = None
    semantic: float | None = None
    cosine: float | None = None


@dataclass(frozen=True)
class LegRun:
    """One leg of a search: how many candidates it gave, how long it took (ms), and whether it
    held every write committed before the search (else it is in `degraded`)."""

    leg: SearchLeg
    candidates: int
    ms: float
    complete: bool


@dataclass(frozen=True)
class Explained:
    """What an explained search (`Query.explain`) reports: each ranked id's `HitScores`, the legs
    that ran, in order, and the time the hybrid fusion took (ms; None outside hybrid mode)."""

    hits: dict[str, HitScores]
    legs: tuple[LegRun, ...]
    fusion_ms: float | None = None


@dataclass(frozen=True)
class Ranking:
    """What `rank` found: (id, score) best first, and the legs that may have missed rows
    (`keyword`: the full-text index is failing or behind; `semantic`: vectors are missing), in
    the order they ran; empty when the answer is complete."""

    hits: list[tuple[str, float]]
    degraded: tuple[SearchLeg, ...] = ()
    explained: Explained | None = None  # with `Query.explain`


Row = TypeVar("Row")


@dataclass(frozen=True)
class Found(Generic[Row]):
    """A search's answer: the hits read back from PostgreSQL with their scores, best first, and
    the legs that may have missed some (`Ranking.degraded`)."""

    hits: list[tuple[Row, float]]
    degraded: tuple[SearchLeg, ...] = ()
    explained: Explained | None = None  # with `Query.explain` (`Explained.hits` by row id)
