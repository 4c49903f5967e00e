"""The migration runner against a real PostgreSQL."""

from __future__ import annotations

import re
from pathlib import Path

import asyncpg
import pytest

from catalog.db import MIGRATIONS_DIR, apply_migrations, load_migrations, locks
from catalog.governance.namespace import bootstrap

REPO = Path(__file__).resolve().parents[1]
# any advisory lock function called with literal numbers: pg_advisory_xact_lock(1886350457)
_LOCK_CALL = re.compile(r"pg_(?:try_)?advisory_(?:xact_)?(?:un)?lock(?:_shared)?\s*\(\s*(\d[^)]*)\)")


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
    names = sorted(p.name for p in MIGRATIONS_DIR.iterdir() if p.name.endswith(".sql"))
    assert names and names[0] == "0001_extensions.sql"
    (tmp_path / "1_bad.sql").write_text("SELECT 1")
    with pytest.raises(ValueError, match="NNNN_name"):
        load_migrations(tmp_path)


def test_migrations_are_the_sql_directory_read_as_package_data():
    # read through importlib.resources from the package catalog.sql (the tree's sql/, mapped by
    # pyproject.toml), so an installed wheel finds them too
    assert Path(str(MIGRATIONS_DIR)) == REPO / "sql" / "migrations"
    assert [m.name for m in load_migrations()][:2] == ["extensions", "namespace"]


def test_lock_numbers_in_migration_sql_are_the_named_constants():
    keys = [locks.MIGRATIONS, locks.POLICY_LOG, locks.AUDIT_CHAIN]
    assert len(set(keys)) == len(keys)
    found: dict[str, set[int]] = {}
    for migration in MIGRATIONS_DIR.iterdir():
        if migration.name.endswith(".sql"):
            for args in _LOCK_CALL.findall(migration.read_text(encoding="utf-8")):
                numbers = {int(n) for n in re.split(r"\s*,\s*", args.strip())}
                found.setdefault(migration.name, set()).update(numbers)
    # every number SQL locks on is named in catalog/db/locks.py, in the migration named there,
    # and no migration takes a lock the application uses for something else
    assert found == {name: {key} for key, name in locks.IN_MIGRATIONS.items()}
    assert set(locks.IN_MIGRATIONS) == {locks.POLICY_LOG, locks.AUDIT_CHAIN}


def test_application_code_names_its_lock_numbers():
    # Python takes advisory locks only with a constant of catalog/db/locks.py bound as $1
    literal = re.compile(r"pg_\w*advisory\w*\(\s*\d")
    offenders = [
        str(path.relative_to(REPO))
        for path in (REPO / "catalog").rglob("*.py")
        if literal.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []
