"""SQL of backup itself: the snapshot an export reads in (each slice reads and writes its own rows:
the `archive` of `catalog.entries`, `catalog.governance.permissions`, `catalog.governance.namespace`,
`catalog.dialects.conversations`, `catalog.dialects.sessions`, `catalog.search` and
`catalog.lineage`). An import writes in the caller's transaction (`catalog.recorder.audited`): all
of it, or nothing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg


@asynccontextmanager
async def snapshot(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
    """A connection in a read-only REPEATABLE READ transaction: every read sees one instant."""
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
        yield conn
