"""The search engine: ranks a `Query` over one corpus (`catalog.search.corpus`) by BM25 over the
Tantivy index, cosine over pgvector, or both fused (`catalog.search.fusion.fuse`), and starts and
stops the background workers that keep that derived state up to date: each corpus's indexer
(Tantivy, `catalog.search.indexer`) and the embedding worker (`catalog.search.embedding_worker`).

Writes are answered once PostgreSQL has committed them; the workers then bring the derived state
up to date. A search sent after a write's response sees that write (read-your-writes) without
waiting for the embedding worker's backlog: the rows of its scopes still without their vector (a
small partial index finds them) are embedded by the search itself (`EmbeddingWorker.
embed_pending`). The keyword leg waits for the indexer's next pass, whose commits take
milliseconds, unless the request's chain says the index already holds every write committed
before it; no search waits more than `SEARCH_WAIT` for either, and a leg that may have missed
rows is named in `degraded`. While a worker fails, searches use what there is instead of
waiting, and `status()` (behind `/healthz` and `/metrics`) reports the lag and the reason.

The full-text calls of a search run on the event loop while they are short (a small index: a
hand-off to a thread and back costs more than the call), on a worker thread once they are not
(`Placement`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import asyncpg
import numpy as np

from catalog import telemetry
from catalog.search import neighbours, repo, scope_index
from catalog.search.corpus import ENTRIES, TRANSCRIPTS, Corpus
from catalog.search.embedder import Embedder
from catalog.search.embedding import embed_rows
from catalog.search.embedding_worker import EMBED_BATCH, EmbeddingWorker
from catalog.search.fulltext import Coverage, FullTextIndex, prefix_fits
from catalog.search.fusion import FusionWeights, fuse, lifting, own_scores, ranked, term_weight
from catalog.search.health import Health
from catalog.search.indexer import Indexer
from catalog.search.passages import VECTOR, passages, penalty
from catalog.search.passes import ChangeFeed, Passes
from catalog.search.placement import Placement
from catalog.search.query import Explained, Given, LegRun, Query, Ranking, SearchStatus
from catalog.search.repo import VectorSearch
from catalog.wire import SearchLeg

log = logging.getLogger("catalog.search")


# the longest a search waits for background work (the full-text index's next pass, the model for
# the rows of its scopes still without their vector); past it the leg is searched as it is and
# named in `degraded`
SEARCH_WAIT = 1.0


# old versions an as-of search embeds itself, at most (past it its semantic leg is `degraded`)
GIVEN_EMBED = 256


T = TypeVar("T")


def _coverage_of(index: FullTextIndex, text: str, rows: Sequence[Given]) -> dict[str, float]:
    """Each row's share of the query's term weight, each term weighing its idf among the rows'
    passages (`FullTextIndex.coverage`'s rule, computed from the rows' own texts)."""
    terms = index.query_terms(text)
    if not terms or not rows:
        return {r.id: 0.0 for r in rows}
    # each row's passages, as the index holds them: the weights count passages, a row scores its best
    held = [index.terms_of(r.contents, r.description, r.path) for r in rows]
    passages = [part for parts in held for part in parts]
    weights = [term_weight(len(passages), sum(term in h for h in passages)) for term in terms]
    total = sum(weights)
    if total <= 0:
        return {r.id: 0.0 for r in rows}
    return {
        r.id: min(
            max(sum(wt for term, wt in zip(terms, weights, strict=True) if term in h) for h in parts) / total,
            1.0,
        )
        for r, parts in zip(rows, held, strict=True)
    }


def _given_neighbours(rows: Sequence[Given], ids: Sequence[str]) -> dict[str, list[str]]:
    """The neighbours (`neighbours.among`: the rule in creation order) of the candidates among
    the rows."""
    return neighbours.among([(r.id, r.scope, r.session_id, r.created_at, r.contents) for r in rows], ids)


async def _timed(work: Awaitable[T]) -> tuple[T, float]:
    """The work's result and how long it took (ms)."""
    started = time.perf_counter()
    result = await work
    return result, (time.perf_counter() - started) * 1000


@dataclass(frozen=True)
class CorpusSearch:
    """One corpus's derived state: its full-text index and its vectors."""

    indexer: Indexer
    vectors: VectorSearch


@dataclass
class SearchEngine:
    pool: asyncpg.Pool
    embedder: Embedder
    indexer: Indexer  # the entries' (the corpus every process has)
    vectors: VectorSearch
    transcripts: CorpusSearch | None = None  # conversation and session items (None in some tools)
    weights: FusionWeights = field(default_factory=FusionWeights)
    feed: ChangeFeed | None = None  # wakes the workers on any process's commit (see start())
    # large scopes' own vector indexes (catalog.search.scope_index): kept every this many seconds
    scope_index_interval: float = 600.0
    worker: EmbeddingWorker = field(init=False)  # the corpora's vectors
    _scopes_task: asyncio.Task[None] | None = None
    _stopping: bool = False
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    # where the full-text calls of each corpus run: on the loop while they are short
    _placements: dict[tuple[str, str], Placement] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.worker = EmbeddingWorker(self.pool, self.embedder, tuple(self.corpora))

    @classmethod
    def create(
        cls,
        pool: asyncpg.Pool,
        embedder: Embedder,
        index_root: Path,
        *,
        scope_index_min: int = 0,
        scope_index_interval: float = 600.0,
        shared_slot: int | None = None,
    ) -> SearchEngine:
        """An engine over both corpora, each with its index under `index_root` (in slot
        `shared_slot` shared with other processes, else a slot of its own); scopes of at least
        `scope_index_min` entries get a vector index of their own (0: none)."""
        return cls(
            pool,
            embedder,
            Indexer(pool, index_root, shared_slot=shared_slot),
            VectorSearch(pool, scope_index_min=scope_index_min),
            CorpusSearch(
                Indexer(pool, index_root, corpus=TRANSCRIPTS, shared_slot=shared_slot),
                VectorSearch(pool, corpus=TRANSCRIPTS),
            ),
            scope_index_interval=scope_index_interval,
        )

    @property
    def corpora(self) -> dict[Corpus, CorpusSearch]:
        parts = {ENTRIES: CorpusSearch(self.indexer, self.vectors)}
        if self.transcripts is not None:
            parts[TRANSCRIPTS] = self.transcripts
        return parts

    def part(self, corpus: Corpus) -> CorpusSearch:
        try:
            return self.corpora[corpus]
        except KeyError:
            raise RuntimeError(f"this search engine does not hold the {corpus.name} corpus") from None

    async def start(self) -> None:
        self.embedder.start()
        self.feed = ChangeFeed(self.pool)
        for part in self.corpora.values():
            part.indexer.listen(self.feed)
        for corpus in self.corpora:  # the worker's pass then claims in the corpus written only
            self.feed.subscribe(functools.partial(self.worker.wake, corpus), corpus.changes)
        self.feed.start()
        for part in self.corpora.values():
            await part.indexer.start()
        self.worker.start(self.feed)
        if self.vectors.scope_index_min:
            self._scopes_task = asyncio.create_task(self._scope_index_loop(), name="scope-indexes")

    async def close(self) -> None:
        self._stopping = True
        self._stop.set()
        self.worker.request_stop()
        for part in self.corpora.values():  # every worker winds down at once
            part.indexer.request_stop()
        if self.feed is not None:
            await self.feed.close()
        if self._scopes_task is not None:  # a build cut short leaves an invalid index: rebuilt later
            self._scopes_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scopes_task
        await self.worker.stop()
        for part in self.corpora.values():
            await part.indexer.close()
        await self.embedder.close()

    def written(self, corpus: Corpus | None = None) -> None:
        """A write to `corpus` committed (None: to any): index and embed it soon. (Each indexer
        is also woken by its own change log's notifications, from any process.)"""
        for c, part in self.corpora.items():
            if corpus is None or c is corpus:
                part.indexer.notify()
        self.worker.wake(corpus)

    # the embedding worker's, named here for the tools and tests that drive the engine
    @property
    def passes(self) -> Passes:
        return self.worker.passes

    @property
    def embedding_health(self) -> Health:
        return self.worker.health

    @property
    def embedded_total(self) -> int:
        return self.worker.embedded_total

    @property
    def embedded_on_demand(self) -> int:
        return self.worker.embedded_on_demand

    async def embed_pass(self, limit: int = EMBED_BATCH, corpus: Corpus = ENTRIES) -> int:
        """Embed up to `limit` rows of the corpus lacking their vector now (`catalog reindex`)."""
        return await self.worker.embed_pass(limit, corpus)

    async def status(self) -> SearchStatus:
        """Each worker's health, lag and last failure (a few small queries)."""
        index = await self.indexer.status()
        others = tuple([await part.indexer.status() for c, part in self.corpora.items() if c is not ENTRIES])
        backlog = sum([await repo.count_unembedded(self.pool, corpus) for corpus in self.corpora])
        embeddings = self.worker.health.status(backlog)
        if self.worker.stopped:
            stopped = "the embedding worker has stopped"
            embeddings = dataclasses.replace(embeddings, healthy=False, reason=stopped)
        return SearchStatus(index=index, embeddings=embeddings, other_indexes=others)

    # --- large scopes' own vector indexes ---------------------------------------------------------

    async def maintain_scope_indexes(self) -> scope_index.Maintained:
        """Build the vector indexes large scopes lack, drop those no longer needed, now."""
        return await scope_index.maintain(self.pool, self.vectors.scope_index_min)

    async def _scope_index_loop(self) -> None:
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.scope_index_interval)
            if self._stopping:
                return
            try:
                done = await self.maintain_scope_indexes()
            except Exception as exc:  # tried again at the next interval; searches scan as before
                log.warning("keeping the large scopes' vector indexes failed: %s", exc)
            else:
                if done.built or done.dropped:
                    log.info(
                        "large scopes' vector indexes kept",
                        extra={"built": len(done.built), "dropped": len(done.dropped)},
                    )

    # --- ranking ------------------------------------------------------------------------------------

    def embed_query(self, text: str) -> asyncio.Future[np.ndarray]:
        """Start computing a query's vector now, so that it runs while the caller does other
        work first (authorizing the request); hand it to `rank` as `Query.vector`, or cancel it."""

        async def vector() -> np.ndarray:
            return (await self.embedder.embed([text], query=True))[0]

        task = asyncio.ensure_future(vector())
        # a request refused before `rank` never awaits it: its failure must not be logged as lost
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        return task

    async def rank(self, query: Query) -> Ranking:
        """(entry id, score in [0, 1]), best first, from the query's store and scopes only; each
        mode waits for its derived state to hold every write committed before the call
        (read-your-writes), and a leg whose derived state is failing or still behind when the
        wait ends is searched as it is and named in `degraded`. Scores mean the same for every
        query (see `fusion`): keyword ranks BM25's candidates by their share of the query's term
        weight, semantic by cosine, hybrid by both and by context (with `Query.needed`, exactly so
        for the places the caller reads first). The caller re-reads the hits from PostgreSQL (a
        hit may have changed since)."""
        if query.mode == "semantic":
            (_, _, hits, complete), ms = await _timed(self._semantic(query))
            scores, details = fuse(
                "semantic",
                keyword=(),
                semantic=[doc for doc, _ in hits],
                covered={},
                cosine=dict(hits),
                weights=self.weights,
                explain=query.explain,
            )
            runs: tuple[LegRun, ...] = (LegRun("semantic", len(hits), ms, complete),)
            explained = Explained(details, runs) if query.explain else None
            return Ranking(scores, () if complete else ("semantic",), explained)
        if query.mode == "keyword":
            (coverage, keyword, fresh), ms = await _timed(self._keyword(query))
            scores, details = fuse(
                "keyword",
                keyword=[doc for doc, _ in keyword],
                semantic=(),
                covered=coverage.of,
                cosine={},
                bm25=dict(keyword),
                weights=self.weights,
                explain=query.explain,
            )
            runs = (LegRun("keyword", len(keyword), ms, fresh),)
            explained = Explained(details, runs) if query.explain else None
            return Ranking(scores, () if fresh else ("keyword",), explained)
        # the keyword leg runs beside the query's embedding; when it has answered by the time the
        # vector is ready (the usual case when the model runs on a lane: the model is the longer),
        # its candidates' cosines come with the nearest rows; else they are read after both legs
        keyword_leg = asyncio.ensure_future(_timed(self._keyword(query)))
        # a leg left behind when the other fails: its own failure must not be logged as lost
        keyword_leg.add_done_callback(lambda t: t.cancelled() or t.exception())

        def keyword_candidates() -> list[str] | None:
            if not keyword_leg.done() or keyword_leg.cancelled() or keyword_leg.exception() is not None:
                return None
            (_, found, _), _ = keyword_leg.result()
            return [doc for doc, _ in found]

        try:
            (vector, known, semantic, complete), semantic_ms = await _timed(
                self._semantic(query, keyword_candidates)
            )
            (coverage, keyword, fresh), keyword_ms = await keyword_leg
        finally:
            if not keyword_leg.done():
                keyword_leg.cancel()
        fusion_started = time.perf_counter()
        with telemetry.search_fusion():
            candidates = list(dict.fromkeys([doc for doc, _ in keyword] + [doc for doc, _ in semantic]))
            uncovered = [doc for doc in candidates if doc not in coverage.of]  # by the vectors only
            cosine = {**(known or {}), **dict(semantic)}
            # found by BM25 only, when the nearest rows' statement could not bring their cosines
            unscored = [doc for doc in candidates if doc not in cosine] if known is None else []
            if unscored and vector is not None:
                # their statement first: PostgreSQL runs it while the keyword leg's count of the
                # other candidates' terms runs here (on the event loop, when its index is small)
                more_cosine, more_covered = await asyncio.gather(
                    repo.similarities(self.pool, query.store_id, unscored, vector, query.corpus),
                    self._more_coverage(query, coverage, uncovered),
                )
                cosine.update(more_cosine)
            else:
                more_covered = await self._more_coverage(query, coverage, uncovered)
            covered = {**coverage.of, **more_covered}
            own = own_scores(candidates, covered, cosine, self.weights)
            # the neighbours only of the candidates that can lift an entry into the places the
            # caller reads (`fusion.lifting`): a session's turns, an index probe each
            near = await neighbours.neighbours(
                self.pool,
                query.store_id,
                lifting(own, query.needed),
                query.path_prefix,
                query.corpus,
                include_inactive=query.include_inactive,
            )
            scores, details = fuse(
                "hybrid",
                keyword=[doc for doc, _ in keyword],
                semantic=[doc for doc, _ in semantic],
                covered=covered,
                cosine=cosine,
                near=near,
                bm25=dict(keyword),
                weights=self.weights,
                explain=query.explain,
                own=own,
            )
        legs: tuple[tuple[SearchLeg, bool], ...] = (("keyword", fresh), ("semantic", complete))
        degraded = tuple(leg for leg, ok in legs if not ok)
        if not query.explain:
            return Ranking(scores, degraded)
        runs = (
            LegRun("keyword", len(keyword), keyword_ms, fresh),
            LegRun("semantic", len(semantic), semantic_ms, complete),
        )
        fusion_ms = (time.perf_counter() - fusion_started) * 1000
        return Ranking(scores, degraded, Explained(details, runs, fusion_ms))

    async def rank_given(self, query: Query, rows: Sequence[Given]) -> Ranking:
        """Rank `rows` (the versions alive at a time) for the query, exactly and by the same
        scores as `rank`: the keyword score from each row's share of the query's term weight
        (idf among the given rows), the semantic score from the cosine of its version's vector (the
        stored one where the entry is still at that version, else computed now, at most
        `GIVEN_EMBED`), hybrid fusion and numbered neighbours among the given rows. Every row
        holding a query term is a keyword candidate; the `limit` nearest are the semantic ones."""
        runs: list[LegRun] = []
        covered: dict[str, float] = {}
        keyword: list[str] = []
        if query.mode != "semantic":
            index = self.part(query.corpus).indexer.index
            assert index is not None
            started = time.perf_counter()
            covered = await asyncio.to_thread(_coverage_of, index, query.text, rows)
            keyword = [doc for doc, share in ranked(covered) if share > 0]
            runs.append(LegRun("keyword", len(keyword), (time.perf_counter() - started) * 1000, True))
        cosine: dict[str, float] = {}
        semantic: list[str] = []
        complete = True
        if query.mode != "keyword":
            started = time.perf_counter()
            try:
                vector = await (query.vector if query.vector is not None else self.embed_query(query.text))
                vectors, complete = await self._vectors_given(query.store_id, rows, query.corpus)
            except Exception as exc:  # the model failed: the keyword leg answers alone
                log.warning("an as-of search could not embed: %s", exc)
                vectors, complete = {}, False
                vector = None
            if vector is not None:
                # each version's cosine, less its length's penalty (as `VectorSearch` ranks rows)
                lengths = {r.id: len(passages(r.contents or "", VECTOR)) for r in rows}
                cosine = {doc: float(np.dot(v, vector)) - penalty(lengths[doc]) for doc, v in vectors.items()}
            semantic = [doc for doc, _ in ranked(cosine)][: query.limit]
            runs.append(LegRun("semantic", len(semantic), (time.perf_counter() - started) * 1000, complete))
        degraded: tuple[SearchLeg, ...] = () if complete else ("semantic",)
        scores, details = fuse(
            query.mode,
            keyword=keyword,
            semantic=semantic,
            covered=covered,
            cosine=cosine,
            # neighbours lift hybrid scores only
            near=_given_neighbours(rows, list(dict.fromkeys(keyword + semantic)))
            if query.mode == "hybrid"
            else None,
            weights=self.weights,
            explain=query.explain,
        )
        explained = Explained(details, tuple(runs)) if query.explain else None
        return Ranking(scores, degraded, explained)

    async def _vectors_given(
        self, store_id: str, rows: Sequence[Given], corpus: Corpus
    ) -> tuple[dict[str, np.ndarray], bool]:
        """Each given row's vector: stored, or computed now (at most GIVEN_EMBED); and whether
        every row has one."""
        stored = await repo.vectors_at(self.pool, store_id, [(r.id, r.version) for r in rows], corpus)
        missing = [r for r in rows if r.id not in stored]
        now = missing[:GIVEN_EMBED]
        if now:
            made = await embed_rows(self.embedder, [(r.contents, r.description) for r in now])
            stored.update({r.id: v for r, (v, _) in zip(now, made, strict=True)})
        return stored, len(missing) <= GIVEN_EMBED

    @telemetry.search_leg("keyword")
    async def _keyword(self, query: Query) -> tuple[Coverage, list[tuple[str, float]], bool]:
        """Each of BM25's candidates' share of the query's term weight (`Coverage`), the
        candidates, and whether the index held every write committed before the call (a leg
        answers its candidates then whether it is complete last: `telemetry.search_leg`)."""
        index, fresh = await self._index(query)
        hits, coverage = await self._placement(query.corpus, "search").run(
            index.search,
            query.store_id,
            list(query.scopes),
            query.text,
            query.limit,
            session_id=query.session_id,
            path_prefix=query.path_prefix,
            where=query.where,
            within=await self._within(query),
            include_inactive=query.include_inactive,
        )
        return coverage, hits, fresh

    def _placement(self, corpus: Corpus, call: str) -> Placement:
        key = (corpus.name, call)
        placement = self._placements.get(key)
        if placement is None:
            placement = self._placements[key] = Placement()
        return placement

    async def _within(self, query: Query) -> list[str] | None:
        """The ids a path prefix admits, when it is too long for the full-text index to filter
        by it itself (read from PostgreSQL after the index caught up: the same writes)."""
        if query.path_prefix is None or prefix_fits(query.path_prefix):
            return None
        return await repo.ids_under_prefix(
            self.pool, query.store_id, query.scopes, query.session_id, query.path_prefix, query.corpus
        )

    async def _index(self, query: Query) -> tuple[FullTextIndex, bool]:
        """The corpus's index once it holds every write committed before the call (True), or as
        it is when it is failing or still behind after the wait (False)."""
        indexer = self.part(query.corpus).indexer
        if query.changes is not None and indexer.holds(query.changes):
            assert indexer.index is not None
            return indexer.index, True  # no pass to wait for: it holds the request's head already
        try:
            fresh = await indexer.wait_fresh(SEARCH_WAIT, query.changes)
        except TimeoutError:
            log.warning("full-text index of %s is behind; searching what it holds", query.corpus.name)
            fresh = False
        index = indexer.index
        assert index is not None
        return index, fresh

    async def _more_coverage(self, query: Query, coverage: Coverage, ids: list[str]) -> dict[str, float]:
        """The share of the query's term weight of candidates the keyword leg did not find, as
        that leg reckoned its own (its view of the index, its terms and weights)."""
        index = self.part(query.corpus).indexer.index
        if index is None or not ids:
            return dict.fromkeys(ids, 0.0)
        return await self._placement(query.corpus, "coverage").run(index.more_coverage, coverage, ids)

    @telemetry.search_leg("semantic")
    async def _semantic(
        self, query: Query, also: Callable[[], list[str] | None] | None = None
    ) -> tuple[np.ndarray | None, dict[str, float] | None, list[tuple[str, float]], bool]:
        """The query's vector, the cosines of the rows `also` names when the vector is ready
        (None when it names none then: a hybrid search's keyword candidates, read in the same
        statement), (id, cosine similarity) best first, and whether every row of the scopes
        committed before the call had its vector (those lacking one are embedded here,
        `embed_pending`). A model that fails on the query leaves the leg empty (no vector, not
        complete): the search answers what the other leg found."""
        embedding = query.vector if query.vector is not None else self.embed_query(query.text)
        if query.unembedded is False:  # every row committed before the request has its vector
            pending: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            pending.set_result(True)
        else:
            pending = asyncio.ensure_future(
                self.worker.embed_pending(query.store_id, query.scopes, query.corpus, SEARCH_WAIT)
            )
        try:
            vector = await embedding
        except Exception as exc:  # the model failed (it is reported by /healthz when it lasts)
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pending
            log.warning("the query could not be embedded; searching without vectors: %s", exc)
            return None, None, [], False
        complete = await pending
        named = also() if also is not None else None
        hits, cosines = await self.part(query.corpus).vectors.search(
            query.store_id,
            list(query.scopes),
            vector,
            query.limit,
            session_id=query.session_id,
            path_prefix=query.path_prefix,
            where=query.where,
            include_inactive=query.include_inactive,
            also=named or (),
        )
        return vector, (cosines if named is not None else None), hits, complete
