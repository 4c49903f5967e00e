"""A data dir of an earlier release, whose embedded PostgreSQL was 16 (the `pgserver` package):

- `catalog serve` (and every command that would start the embedded server) refuses it, changes
  nothing, and says exactly what to run: `catalog upgrade --data-dir D`, after installing the old
  binaries where they are missing;
- `catalog upgrade` moves it to this release's PostgreSQL (18, pgvector 0.8): every row of every
  table, every vector and the audit chain are there after it, the HNSW index answers, `catalog
  serve` starts on it and reads the entries, and the old data dir is kept beside it;
- an upgrade interrupted between its two renames is finished by the next `catalog upgrade`, and
  meanwhile no fresh data dir is made in the missing one's place.

The real case makes its data dir with pgserver's PostgreSQL 16, as the earlier release did (a dev
dependency; the test is skipped without it). catalog/db/upgrade.py says how the upgrade goes.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest
from fake_embedder import HashEncoder
from litestar.testing import TestClient
from rest import UC

from catalog.app import create_app
from catalog.auth import mint_dev_token
from catalog.db.embedded import UPGRADING_SUFFIX, bundled_major, running_url
from catalog.db.upgrade import DONE_MARKER, old_binaries
from catalog.runtime import with_database
from catalog.settings import Settings

REPO = Path(__file__).resolve().parents[1]
STORE = "main.default.kept"


def _catalog(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    return subprocess.run(
        [sys.executable, "-m", "catalog", *args],
        env={**inherited, **(env or {})},
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )


def _fake_data_dir(data_dir: Path, major: str) -> Path:
    """A data dir whose PostgreSQL says it is `major` (all the refusal reads)."""
    pgdata = data_dir / "postgres"
    pgdata.mkdir(parents=True)
    (pgdata / "PG_VERSION").write_text(f"{major}\n")
    return pgdata


def _hidden_pgserver(tmp_path: Path) -> dict[str, str]:
    """An environment in which `pgserver` is a package without binaries (as where it is not
    installed, and no Debian PostgreSQL 16 exists either)."""
    stub = tmp_path / "stub" / "pgserver"
    stub.mkdir(parents=True, exist_ok=True)
    (stub / "__init__.py").write_text("")
    return {"PYTHONPATH": str(stub.parent)}


def test_a_data_dir_of_postgresql_16_is_refused_with_what_to_run(tmp_path):
    data_dir = tmp_path / "data"
    pgdata = _fake_data_dir(data_dir, "16")
    upgrade_line = f"    catalog upgrade --data-dir {data_dir.resolve()}"
    for command in (["serve", "--port", "0"], ["db-url"], ["reindex"], ["audit", "verify"]):
        refused = _catalog(*command, "--data-dir", str(data_dir))
        assert refused.returncode == 2, (command, refused.stdout, refused.stderr)
        said = refused.stderr
        assert said.startswith(f"catalog: the embedded PostgreSQL data in {pgdata} was made by PostgreSQL 16")
        assert f"this release runs PostgreSQL {bundled_major()} and does not start it" in said
        assert "Nothing was changed." in said
        if old_binaries(16) is not None:
            assert said.rstrip().endswith(upgrade_line), said  # nothing to install first
    # where the old binaries are missing, the first line to run installs them
    refused = _catalog("serve", "--data-dir", str(data_dir), env=_hidden_pgserver(tmp_path))
    assert refused.returncode == 2
    lines = refused.stderr.rstrip().splitlines()
    assert lines[-2:] == [f"    {sys.executable} -m pip install 'pgserver==0.1.4'", upgrade_line], lines
    # nothing was changed nor made
    assert sorted(p.name for p in data_dir.iterdir()) == ["postgres"]
    assert sorted(p.name for p in pgdata.iterdir()) == ["PG_VERSION"]
    # and `catalog upgrade` itself says what is missing, changing nothing either
    missing = _catalog("upgrade", "--data-dir", str(data_dir), env=_hidden_pgserver(tmp_path))
    assert missing.returncode == 1
    assert missing.stderr.rstrip().endswith(
        f"first run:\n    {sys.executable} -m pip install 'pgserver==0.1.4'"
    )
    assert sorted(p.name for p in data_dir.iterdir()) == ["postgres"]


def test_a_data_dir_of_a_newer_postgresql_is_refused(tmp_path):
    data_dir = tmp_path / "data"
    _fake_data_dir(data_dir, str(bundled_major() + 1))
    refused = _catalog("serve", "--data-dir", str(data_dir))
    assert refused.returncode == 2
    assert "run the release that made it. Nothing was changed." in refused.stderr


def test_an_upgrade_interrupted_before_its_renames_is_finished_by_the_next(tmp_path):
    data_dir = tmp_path / "data"
    pgdata = _fake_data_dir(data_dir, "16")
    new = Path(f"{pgdata}{UPGRADING_SUFFIX}")
    new.mkdir()
    (new / "PG_VERSION").write_text(f"{bundled_major()}\n")
    (new / DONE_MARKER).write_text("16 -> 18\n")
    # interrupted after the first rename: the old data dir aside, the new one not in place yet
    pgdata.rename(data_dir / "postgres-pg16")
    refused = _catalog("serve", "--data-dir", str(data_dir))
    assert refused.returncode == 2, refused.stderr
    assert "did not finish" in refused.stderr and "catalog upgrade --data-dir" in refused.stderr
    assert not pgdata.exists()  # no fresh, empty data dir made in its place
    done = _catalog("upgrade", "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stderr
    assert (pgdata / "PG_VERSION").read_text().strip() == str(bundled_major())
    assert not (pgdata / DONE_MARKER).exists() and not new.exists()
    assert (data_dir / "postgres-pg16" / "PG_VERSION").read_text().strip() == "16"


# --- the real thing: a data dir made by the earlier release's PostgreSQL 16 ----------------------------

old_release = pytest.mark.skipif(
    importlib.util.find_spec("pgserver") is None, reason="pgserver (the old PostgreSQL 16) is not installed"
)

_SNAPSHOT = {
    "entries": "SELECT count(*) FROM entries",
    "versions": "SELECT count(*) FROM entry_versions",
    "events": "SELECT count(*) FROM audit_events",
    "vectors": "SELECT md5(string_agg(path || '=' || embedding::text, ',' ORDER BY path)) FROM entries",
    "chain": "SELECT md5(string_agg(hash::text, ',' ORDER BY seq)) FROM audit_events",
}


async def _fetch(url: str, query: str) -> object:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(query)
    finally:
        await conn.close()


async def _snapshot(url: str) -> dict[str, object]:
    conn = await asyncpg.connect(url)
    try:
        return {name: await conn.fetchval(query) for name, query in _SNAPSHOT.items()}
    finally:
        await conn.close()


def _previous_release(data_dir: Path) -> dict[str, object]:
    """Serve on a data dir as the earlier release did (its embedded PostgreSQL 16 in
    `<data dir>/postgres`, the database `catalog`), write entries through the API, stop; returns
    what the database held."""
    import pgserver

    data_dir.mkdir(parents=True)
    server = pgserver.get_server(data_dir / "postgres", cleanup_mode="stop")
    try:
        url = server.get_uri()
        server.psql("CREATE DATABASE catalog;")
        settings = Settings(data_dir=data_dir, database_url=with_database(url, "catalog"), admin="admin")
        headers = {"Authorization": f"Bearer {mint_dev_token(settings, 'admin')}"}
        with TestClient(create_app(settings, encoder=HashEncoder())) as client:
            r = client.post(
                f"{UC}/memory-stores",
                headers=headers,
                json={"name": "kept", "catalog_name": "main", "schema_name": "default"},
            )
            assert r.status_code == 200, r.text
            for i in range(24):
                r = client.post(
                    f"{UC}/memory-stores/{STORE}/entries",
                    headers=headers,
                    params={"scope": f"user-{i % 3}"},
                    json={"path": f"/notes/{i}.md", "contents": f"note {i}: the {i}th thing to keep"},
                )
                assert r.status_code == 200, r.text
            r = client.post(
                f"{UC}/memory-stores/{STORE}/entries",
                headers=headers,
                params={"scope": "user-0"},
                json={"path": "/notes/0.md", "contents": "note 0, written again", "write_mode": "OVERWRITE"},
            )
            assert r.status_code == 200, r.text
            # every vector written before the stop
            unembedded = "SELECT count(*) FROM entries WHERE embedded_version IS DISTINCT FROM version"
            deadline = time.monotonic() + 60
            while (
                asyncio.run(_fetch(with_database(url, "catalog"), unembedded)) and time.monotonic() < deadline
            ):
                time.sleep(0.2)
        assert server.psql("SHOW server_version;").split("\n")[2].strip().startswith("16.")
        return asyncio.run(_snapshot(with_database(url, "catalog")))
    finally:
        server.cleanup()


@pytest.fixture
def own_root() -> Iterator[Path]:
    """A directory outside pytest's own (another pytest starting meanwhile makes that one
    unreadable to PostgreSQL's user again), removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="catup"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@old_release
def test_upgrade_of_a_data_dir_the_earlier_release_made(own_root, live_server):
    data_dir = own_root / "data"
    pgdata = data_dir / "postgres"
    before = _previous_release(data_dir)
    assert before["entries"] == 24 and before["versions"] == 25, before
    assert running_url(pgdata) is None and (pgdata / "PG_VERSION").read_text().strip() == "16"

    refused = _catalog("serve", "--data-dir", str(data_dir))
    assert refused.returncode == 2 and "catalog upgrade --data-dir" in refused.stderr, refused.stderr

    done = _catalog("upgrade", "--data-dir", str(data_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    summary = done.stdout.strip()
    assert summary.startswith(f"upgraded {pgdata} from PostgreSQL 16 to {bundled_major()} in "), summary
    assert "databases postgres, catalog;" in summary and f"kept at {data_dir}/postgres-pg16" in summary
    assert (pgdata / "PG_VERSION").read_text().strip() == str(bundled_major())
    assert (data_dir / "postgres-pg16" / "PG_VERSION").read_text().strip() == "16"  # kept as it was
    assert not Path(f"{pgdata}{UPGRADING_SUFFIX}").exists()

    again = _catalog("upgrade", "--data-dir", str(data_dir))
    assert again.returncode == 0 and again.stdout.startswith("nothing to upgrade"), again.stdout

    server = live_server(data_dir)
    try:
        url = with_database(running_url(pgdata), "catalog")
        assert asyncio.run(_snapshot(url)) == before  # every row, vector and audit hash
        settings = Settings(data_dir=data_dir)
        headers = {"Authorization": f"Bearer {mint_dev_token(settings, 'admin')}"}
        for i in (0, 7, 23):
            r = httpx.get(
                f"{server.url}{UC}/memory-stores/{STORE}/entries:get",
                headers=headers,
                params={"scope": f"user-{i % 3}", "path": f"/notes/{i}.md"},
            )
            expected = "note 0, written again" if i == 0 else f"note {i}: the {i}th thing to keep"
            assert r.status_code == 200 and r.json()["contents"] == expected, r.text
        r = httpx.post(
            f"{server.url}{UC}/memory-stores/{STORE}/entries:search",
            headers=headers,
            json={"scope": "user-1", "query": "the 7th thing", "mode": "keyword", "top_k": 3},
        )
        assert r.status_code == 200 and r.json()["results"][0]["memory_entry"]["path"] == "/notes/7.md", (
            r.text
        )
        assert asyncio.run(_vector_index_answers(url))
        verify = server.cli("audit", "verify")
        assert verify.returncode == 0 and verify.stdout.startswith("ok "), verify.stdout + verify.stderr
    finally:
        assert server.stop() == 0
    shutil.rmtree(data_dir / "postgres-pg16")  # the operator's step, once satisfied


async def _vector_index_answers(url: str) -> bool:
    """pgvector is 0.8 or later, and the HNSW index (rebuilt by the restore) finds each of a few
    entries as its own nearest neighbour. (The entries' scopes are small: their vectors were
    written outside the whole table's graph, and stay so through the upgrade; they are put in it
    here, which inserts them into the rebuilt index.)"""
    conn = await asyncpg.connect(url)
    try:
        version = await conn.fetchval("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        assert tuple(int(n) for n in version.split(".")[:2]) >= (0, 8), version
        assert await conn.fetchval("SELECT NOT bool_or(in_graph) AND count(*) = 24 FROM entries")
        await conn.execute("UPDATE entries SET in_graph = true")
        await conn.execute("SET enable_seqscan = off")
        plan = "\n".join(
            r[0]
            for r in await conn.fetch(
                "EXPLAIN SELECT id FROM entries WHERE in_graph ORDER BY embedding <=> (SELECT embedding "
                "FROM entries LIMIT 1) LIMIT 3"
            )
        )
        assert "hnsw" in plan.lower(), plan
        rows = await conn.fetch("SELECT path, embedding::text AS v FROM entries ORDER BY path LIMIT 5")
        for row in rows:
            nearest = await conn.fetchval(
                "SELECT path FROM entries WHERE in_graph ORDER BY embedding <=> $1::text::vector LIMIT 1",
                row["v"],
            )
            assert nearest == row["path"], (row["path"], nearest)
        return True
    finally:
        await conn.close()
