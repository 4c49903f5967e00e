"""SQL on the server rather than on the catalog's database: creating that database."""

from __future__ import annotations

import contextlib

import asyncpg


async def create_database(server_url: str, database: str) -> None:
    """Create `database` on the server `server_url` reaches, unless it exists: several processes
    may start at once, and the one that loses the race finds it created."""
    conn = await asyncpg.connect(server_url)
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", database)
        if not exists:
            with contextlib.suppress(asyncpg.DuplicateDatabaseError):  # another process won the race
                await conn.execute(f'CREATE DATABASE "{database}"')
    finally:
        await conn.close()
