"""What the indexer tests share (tests/test_indexer_watermark.py, tests/test_workers.py; fixtures
registered by tests/conftest.py's pytest_plugins): a fresh
memory store through the API, a pool of the test database, and entries inserted straight into the
table (as another process's writes are: the indexer finds them in the change log)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from rest import UC

from catalog.db import create_pool


@pytest.fixture
def store(client, token) -> str:  # type: ignore[no-untyped-def]
    name = f"w{uuid.uuid4().hex[:10]}"
    body = {"name": name, "catalog_name": "main", "schema_name": "default"}
    assert client.post(f"{UC}/memory-stores", headers=token(), json=body).status_code == 200
    return name


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    p = await create_pool(database_url, min_size=1, max_size=6)
    try:
        yield p
    finally:
        await p.close()


async def insert(pool: asyncpg.Pool, store: str, texts: dict[str, str]) -> None:
    await pool.executemany(
        "INSERT INTO entries (store_id, scope, path, contents, created_by, updated_by) "
        "SELECT id, 'u', $2, $3, 'admin', 'admin' FROM memory_stores WHERE name = $1",
        [(store, path, text) for path, text in texts.items()],
    )
