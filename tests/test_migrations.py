"""The migration runner against a real PostgreSQL."""

from __future__ import annotations

import asyncpg
import pytest

from catalog.db import MIGRATIONS_DIR, apply_migrations, load_migrations
from catalog.namespace import bootstrap


async def test_migrations_apply_once_and_are_idempotent(empty_database_url):
    conn = await asyncpg.connect(empty_database_url)
    try:
        first = await apply_migrations(conn)
        assert [m.version for m in first] == [m.version for m in load_migrations()]
        assert first[0].sql.strip().splitlines()[-1].startswith("CREATE EXTENSION IF NOT EXISTS vector")
        assert await apply_migrations(conn) == []
        # the files themselves are idempotent too: running every one again changes nothing
        for migration in load_migrations():
            await conn.execute(migration.sql)
        recorded = await conn.fetch("SELECT version, name FROM schema_migrations ORDER BY version")
        assert [(r["version"], r["name"]) for r in recorded] == [(m.version, m.name) for m in first]
        assert await conn.fetchval("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        assert await bootstrap(conn, "root") is True
        assert await bootstrap(conn, "root") is False
        assert await conn.fetchval("SELECT count(*) FROM catalogs") == 1
    finally:
        await conn.close()


def test_migration_files_are_numbered(tmp_path):
    names = sorted(p.name for p in MIGRATIONS_DIR.glob("*.sql"))
    assert names and names[0] == "0001_extensions.sql"
    (tmp_path / "1_bad.sql").write_text("SELECT 1")
    with pytest.raises(ValueError, match="NNNN_name"):
        load_migrations(tmp_path)
