"""Search: local embeddings, the Tantivy index and pgvector, fused into one ranking."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field

import asyncpg

from catalog.search.embedder import Embedder
from catalog.search.fusion import FusionWeights
from catalog.search.indexer import Indexer
from catalog.search.repo import VectorSearch

log = logging.getLogger("catalog.search")


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
    _backfill: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.embedder.start()
        await self.indexer.start()
        await self.embed_missing()
        self._backfill = asyncio.create_task(self._backfill_loop(), name="embedding-backfill")

    async def close(self) -> None:
        if self._backfill is not None:
            self._backfill.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._backfill
        await self.indexer.close()
        await self.embedder.close()

    async def embed_missing(self, batch: int = 256) -> int:
        """Embed the entries whose vector is missing or older than their contents (a write that
        crashed between its commit and its embedding, or a `catalog reindex`)."""
        from catalog.entries import repo

        total = 0
        while True:
            rows = await repo.unembedded(self.pool, batch)
            if not rows:
                return total
            vectors = await self.embedder.embed(
                [embedding_text(r["contents"], r["description"]) for r in rows]
            )
            await repo.set_embeddings(
                self.pool, [(r["id"], r["version"], v) for r, v in zip(rows, vectors, strict=True)]
            )
            total += len(rows)
            if len(rows) < batch:
                return total

    async def _backfill_loop(self) -> None:
        while True:
            await asyncio.sleep(5.0)
            try:
                await self.embed_missing()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("embedding backfill failed; retrying")
