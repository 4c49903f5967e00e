"""The migration runner: `sql/migrations/NNNN_name.sql`, applied in order, each once.

Each applied file is recorded in `schema_migrations` in the same transaction as its statements.
A session advisory lock serialises concurrent starts of several processes on one database. The
files themselves are written to be idempotent too, so running them twice changes nothing.

The files are package data of `catalog.sql` (the tree's `sql/`, mapped by pyproject.toml), read
through `importlib.resources`: an installed wheel finds them in site-packages, wherever the process
was started from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable

import asyncpg

from catalog.db import locks

MIGRATIONS_DIR: Traversable = files("catalog.sql") / "migrations"  # sql/migrations in the tree
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def load_migrations(directory: Traversable = MIGRATIONS_DIR) -> list[Migration]:
    migrations = []
    for path in sorted((p for p in directory.iterdir() if p.name.endswith(".sql")), key=lambda p: p.name):
        match = _FILE.match(path.name)
        if not match:
            raise ValueError(f"migration file name must be NNNN_name.sql: {path.name}")
        migrations.append(Migration(int(match[1]), match[2], path.read_text(encoding="utf-8")))
    versions = [m.version for m in migrations]
    if len(set(versions)) != len(versions):
        raise ValueError("two migrations share a version number")
    return migrations


async def apply_migrations(
    conn: asyncpg.Connection, directory: Traversable = MIGRATIONS_DIR
) -> list[Migration]:
    """Apply the pending migrations; returns the ones applied by this call."""
    applied: list[Migration] = []
    await conn.execute("SELECT pg_advisory_lock($1)", locks.MIGRATIONS)
    try:
        await conn.execute(_VERSION_TABLE)
        done = {row["version"] for row in await conn.fetch("SELECT version FROM schema_migrations")}
        for migration in load_migrations(directory):
            if migration.version in done:
                continue
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
                    migration.version,
                    migration.name,
                )
            applied.append(migration)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", locks.MIGRATIONS)
    return applied
