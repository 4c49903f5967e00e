"""SQL for the database's own keys: the page-token key (table `page_token_key`, created once by
migration 0010), with which every process on the database signs and checks page tokens."""

from __future__ import annotations

import asyncpg


async def page_token_key(pool: asyncpg.Pool) -> bytes:
    """The database's page-token signing key (one short query)."""
    key = await pool.fetchval("SELECT key FROM page_token_key")
    if key is None:
        raise RuntimeError("page_token_key is empty: the migrations have not run")
    return bytes(key)
