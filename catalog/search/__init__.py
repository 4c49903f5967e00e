"""Search: local embeddings, the Tantivy index and pgvector, fused into one ranking.

Writes are answered once PostgreSQL has committed them; two background workers then bring the
derived state up to date: the indexer (Tantivy) and the embedding worker (the `embedding` column,
in large batches). Searches wait for both to have passed everything committed before them, so a
search sent after a write's response sees that write (read-your-writes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import asyncpg

from catalog.errors import is_unavailable
from catalog.search.embedder import Embedder
from catalog.search.fusion import FusionWeights
from catalog.search.indexer import Indexer
from catalog.search.passes import Passes
from catalog.search.repo import VectorSearch

log = logging.getLogger("catalog.search")

EMBED_BATCH = 256
# two passes at once: while one writes its vectors (PostgreSQL maintains the HNSW graph), the
# other keeps the model busy
EMBED_LANES = 2
FRESH_TIMEOUT = 10.0


def embedding_text(contents: str | None, description: str | None) -> str:
    """What an entry's vector is computed from: its description, then its contents."""
    parts = [p.strip() for p in (description, contents) if p and p.strip()]
    return "\n".join(parts) if parts else ""


@dataclass
class SearchEngine:
    pool: asyncpg.Pool
    embedder: Embedder
    indexer: Indexer
    vectors: VectorSearch
    weights: FusionWeights = field(default_factory=FusionWeights)
    passes: Passes = field(default_factory=Passes)
    _worker: asyncio.Task[None] | None = None
    _stopping: bool = False

    async def start(self) -> None:
        self.embedder.start()
        await self.indexer.start()
        self._worker = asyncio.create_task(self._embed_loop(), name="embedding-worker")
        self.passes.wake.set()

    async def close(self) -> None:
        self._stopping = True
        self.passes.wake.set()
        if self._worker is not None:
            try:
                await asyncio.wait_for(self._worker, 30)
            except TimeoutError:
                self._worker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._worker
        await self.indexer.close()
        await self.embedder.close()

    def written(self) -> None:
        """A write committed: index and embed it soon."""
        self.indexer.notify()
        self.passes.wake.set()

    # --- the embedding worker --------------------------------------------------------------------

    async def embed_pass(self, limit: int = EMBED_BATCH) -> int:
        """Embed up to `limit` entries whose vector is missing or older than their contents.
        The rows are claimed with SKIP LOCKED, so several processes share the work."""
        from catalog.entries import repo

        async with self.pool.acquire() as conn, conn.transaction():
            rows = await repo.claim_unembedded(conn, limit)
            if rows:
                texts = [embedding_text(r["contents"], r["description"]) for r in rows]
                vectors = await self.embedder.embed(texts, background=True)
                await repo.set_embeddings(
                    conn, [(r["id"], r["version"], v) for r, v in zip(rows, vectors, strict=True)]
                )
        return len(rows)

    async def _embed_loop(self) -> None:
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.passes.wake.wait(), 1.0)
            self.passes.wake.clear()
            if self._stopping:
                return
            number = self.passes.begin()
            try:
                await asyncio.gather(*(self._drain() for _ in range(EMBED_LANES)))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not is_unavailable(exc):  # an outage is reported once, by the database monitor
                    log.exception("embedding pass failed; retrying")
                await asyncio.sleep(1.0)
            finally:
                await self.passes.end(number)

    async def _drain(self) -> None:
        while await self.embed_pass() == EMBED_BATCH and not self._stopping:
            pass

    async def vectors_fresh(self, store_id: str, scopes: Sequence[str]) -> None:
        """Return once no entry of these scopes committed before the call lacks its vector."""
        from catalog.entries import repo

        deadline = time.monotonic() + FRESH_TIMEOUT
        while await repo.has_unembedded(self.pool, store_id, scopes):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.warning("embeddings are behind; searching the vectors there are")
                return
            try:
                await self.passes.wait_next(remaining)
            except TimeoutError:
                continue
            await asyncio.sleep(0.01)  # rows another process holds: give it a moment
