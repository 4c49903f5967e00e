"""Search: local embeddings, the Tantivy index and pgvector, fused into one ranking.

Writes are answered once PostgreSQL has committed them; two background workers then bring the
derived state up to date: the indexer (Tantivy) and the embedding worker (the `embedding` column,
in large batches). Searches wait for both to have passed everything committed before them, so a
search sent after a write's response sees that write (read-your-writes).

Neither worker ever marks as done what it did not do. An embedding pass claims its rows inside a
transaction and writes their vectors in it: a model or database error rolls it back and the rows
stay stale, to be retried with backoff. While a worker fails, searches use what there is instead
of waiting, and `status()` (behind `/healthz` and `/metrics`) reports the lag and the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import asyncpg

from catalog.search import repo
from catalog.search.embedder import Embedder
from catalog.search.fusion import FusionWeights, fuse
from catalog.search.health import Health, WorkerStatus
from catalog.search.indexer import Indexer
from catalog.search.passes import Passes
from catalog.search.repo import VectorSearch

log = logging.getLogger("catalog.search")

EMBED_BATCH = 256
# two passes at once: while one writes its vectors (PostgreSQL maintains the HNSW graph), the
# other keeps the model busy
EMBED_LANES = 2
FRESH_TIMEOUT = 10.0
# how long a stopping server lets an embedding pass finish before abandoning it (a pass of 256
# long entries can take many seconds on a small machine; an abandoned one is redone later)
EMBED_STOP_GRACE = 2.0


def embedding_text(contents: str | None, description: str | None) -> str:
    """What an entry's vector is computed from: its description, then its contents."""
    parts = [p.strip() for p in (description, contents) if p and p.strip()]
    return "\n".join(parts) if parts else ""


@dataclass(frozen=True)
class SearchStatus:
    index: WorkerStatus
    embeddings: WorkerStatus

    @property
    def reasons(self) -> list[str]:
        """Why derived state is not keeping up; empty when all is well."""
        return [f"{w.name}: {w.reason}" for w in (self.index, self.embeddings) if not w.healthy]


@dataclass(frozen=True)
class Query:
    """What to rank: a store's entries in some scopes (optionally one session, a path prefix)."""

    store_id: str
    scopes: tuple[str, ...]
    text: str
    limit: int  # candidates taken from each mode
    mode: str = "hybrid"  # hybrid, keyword or semantic
    session_id: str | None = None
    path_prefix: str | None = None


@dataclass
class SearchEngine:
    pool: asyncpg.Pool
    embedder: Embedder
    indexer: Indexer
    vectors: VectorSearch
    weights: FusionWeights = field(default_factory=FusionWeights)
    passes: Passes = field(default_factory=Passes)
    embedding_health: Health = field(default_factory=lambda: Health("embeddings", log))
    embedded_total: int = 0  # vectors this process has written
    _worker: asyncio.Task[None] | None = None
    _stopping: bool = False
    _stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> None:
        self.embedder.start()
        await self.indexer.start()
        self._worker = asyncio.create_task(self._embed_loop(), name="embedding-worker")
        self.passes.wake.set()

    async def close(self) -> None:
        self._stopping = True
        self._stop.set()
        self.passes.wake.set()
        self.indexer.request_stop()  # both workers wind down at once
        if self._worker is not None:
            try:
                await asyncio.wait_for(self._worker, EMBED_STOP_GRACE)
            except TimeoutError:  # cancelled mid-pass: its transaction rolls back, the rows stay stale
                self._worker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._worker
        await self.indexer.close()
        await self.embedder.close()

    def written(self) -> None:
        """A write committed: index and embed it soon."""
        self.indexer.notify()
        self.passes.wake.set()

    async def status(self) -> SearchStatus:
        """Each worker's health, lag and last failure (two small queries)."""
        index = await self.indexer.status()
        backlog = await repo.count_unembedded(self.pool)
        embeddings = self.embedding_health.status(backlog)
        if self._worker is not None and self._worker.done() and not self._stopping:
            stopped = "the embedding worker has stopped"
            embeddings = dataclasses.replace(embeddings, healthy=False, reason=stopped)
        return SearchStatus(index=index, embeddings=embeddings)

    # --- the embedding worker --------------------------------------------------------------------

    async def embed_pass(self, limit: int = EMBED_BATCH) -> int:
        """Embed up to `limit` entries whose vector is missing or older than their contents.
        The rows are claimed with SKIP LOCKED, so several processes share the work."""
        async with self.pool.acquire() as conn, conn.transaction():
            rows = await repo.claim_unembedded(conn, limit)
            if rows:
                texts = [embedding_text(r["contents"], r["description"]) for r in rows]
                # a model error raises here and the transaction rolls back: the rows stay stale
                vectors = await self.embedder.embed(texts, background=True)
                if len(vectors) != len(rows):
                    raise RuntimeError(f"the model gave {len(vectors)} vectors for {len(rows)} texts")
                await repo.set_embeddings(
                    conn, [(r["id"], r["version"], v) for r, v in zip(rows, vectors, strict=True)]
                )
        self.embedded_total += len(rows)
        return len(rows)

    async def _embed_loop(self) -> None:
        delay = 0.0
        while not self._stopping:
            if delay:
                # backing off: a write or a search must not bring the retry forward
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.passes.wake.wait(), 1.0)
            self.passes.wake.clear()
            if self._stopping:
                return
            number = self.passes.begin()
            try:
                # every lane runs to its end before the next pass (none is left behind running)
                outcomes = await asyncio.gather(
                    *(self._drain() for _ in range(EMBED_LANES)), return_exceptions=True
                )
                failure = next((o for o in outcomes if isinstance(o, BaseException)), None)
                if isinstance(failure, asyncio.CancelledError):
                    raise failure
                if failure is not None:
                    delay = self.embedding_health.failed(failure, "embedding entries")
                else:
                    delay = 0.0
                    self.embedding_health.succeeded()
            finally:
                await self.passes.end(number)

    async def _drain(self) -> None:
        while True:
            done = await self.embed_pass()
            if done:  # healthy again once a batch is stored, not only once a long backlog is drained
                self.embedding_health.succeeded()
            if done < EMBED_BATCH or self._stopping:
                return

    # --- ranking ------------------------------------------------------------------------------------

    async def rank(self, query: Query) -> list[tuple[str, float]]:
        """(entry id, score), best first, from the query's store and scopes only; each mode waits
        for its derived state to hold every write committed before the call (read-your-writes).
        The caller re-reads the hits from PostgreSQL (a hit may have changed since)."""
        if query.mode == "keyword":
            return await self._keyword(query)
        if query.mode == "semantic":
            return await self._semantic(query)
        keyword, semantic = await asyncio.gather(self._keyword(query), self._semantic(query))
        return fuse(keyword, semantic, self.weights)

    async def _keyword(self, query: Query) -> list[tuple[str, float]]:
        try:
            await self.indexer.wait_fresh()
        except TimeoutError:
            log.warning("full-text index is behind; searching what it holds")
        index = self.indexer.index
        assert index is not None
        return await asyncio.to_thread(
            index.search,
            query.store_id,
            list(query.scopes),
            query.text,
            query.limit,
            session_id=query.session_id,
            path_prefix=query.path_prefix,
        )

    async def _semantic(self, query: Query) -> list[tuple[str, float]]:
        (vector,), _ = await asyncio.gather(
            self.embedder.embed([query.text]), self.vectors_fresh(query.store_id, query.scopes)
        )
        return await self.vectors.search(
            query.store_id,
            list(query.scopes),
            vector,
            query.limit,
            session_id=query.session_id,
            path_prefix=query.path_prefix,
        )

    async def vectors_fresh(self, store_id: str, scopes: Sequence[str]) -> None:
        """Return once no entry of these scopes committed before the call lacks its vector."""
        deadline = time.monotonic() + FRESH_TIMEOUT
        while await repo.has_unembedded(self.pool, store_id, scopes):
            if not self.embedding_health.healthy and not self.embedding_health.outage:
                return  # the worker is failing (see /healthz): search the vectors there are
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.warning("embeddings are behind; searching the vectors there are")
                return
            try:
                await self.passes.wait_next(remaining)
            except TimeoutError:
                continue
            await asyncio.sleep(0.01)  # rows another process holds: give it a moment
