"""Vector search in PostgreSQL (pgvector), exact where the filter is selective.

pgvector 0.6 has no iterative index scans: an HNSW scan filtered by store and scope can return
fewer rows than asked, silently. So: inside scopes of at most `EXACT_LIMIT` entries the search is
an exact scan (fenced with OFFSET 0 so the planner cannot swap in the HNSW index); above that the
HNSW index is read with oversampling, and if the filtered result is short, the exact scan runs
after all. Results never go missing because of the filter.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import asyncpg
import numpy as np

EXACT_LIMIT = 20_000
_COUNT_TTL = 30.0

_FILTER = (
    "store_id = $1 AND scope = ANY($2::text[]) AND ($3::text IS NULL OR session_id = $3) "
    "AND ($4::text IS NULL OR starts_with(path, $4)) AND embedding IS NOT NULL"
)


class VectorSearch:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self._sizes: dict[tuple[str, tuple[str, ...]], tuple[float, int]] = {}
        self.fallbacks = 0

    async def _size(self, store_id: str, scopes: Sequence[str]) -> int:
        """How many entries the scopes hold, capped just above EXACT_LIMIT (cached briefly)."""
        key = (store_id, tuple(sorted(scopes)))
        cached = self._sizes.get(key)
        now = time.monotonic()
        if cached and now - cached[0] < _COUNT_TTL:
            return cached[1]
        size = int(
            await self.pool.fetchval(
                "SELECT count(*) FROM (SELECT 1 FROM entries WHERE store_id = $1 AND scope = ANY($2::text[]) "
                "LIMIT $3) capped",
                store_id,
                list(scopes),
                EXACT_LIMIT + 1,
            )
        )
        if len(self._sizes) > 50_000:
            self._sizes.clear()
        self._sizes[key] = (now, size)
        return size

    async def search(
        self,
        store_id: str,
        scopes: Sequence[str],
        vector: np.ndarray,
        limit: int,
        *,
        session_id: str | None = None,
        path_prefix: str | None = None,
    ) -> list[tuple[str, float]]:
        """(entry id, cosine similarity), best first."""
        args = (store_id, list(scopes), session_id, path_prefix, vector, limit)
        if await self._size(store_id, scopes) <= EXACT_LIMIT:
            return await self._exact(*args)
        candidates = max(limit * 40, 400)
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(f"SET LOCAL hnsw.ef_search = {min(candidates, 1000)}")
            rows = await conn.fetch(
                "SELECT id::text, 1 - d AS similarity FROM ("
                "  SELECT id, store_id, scope, session_id, path, embedding, embedding <=> $5 AS d "
                "  FROM entries "
                "  ORDER BY embedding <=> $5 LIMIT $7) nearest "
                f"WHERE {_FILTER} ORDER BY d LIMIT $6",
                *args,
                min(candidates, 1000),
            )
        if len(rows) >= limit:
            return [(row[0], float(row[1])) for row in rows]
        self.fallbacks += 1
        return await self._exact(*args)

    async def _exact(self, *args: object) -> list[tuple[str, float]]:
        rows = await self.pool.fetch(
            "SELECT id::text, 1 - d AS similarity FROM ("
            f"  SELECT id, embedding <=> $5 AS d FROM entries WHERE {_FILTER} OFFSET 0) scoped "
            "ORDER BY d LIMIT $6",
            *args,
        )
        return [(row[0], float(row[1])) for row in rows]
