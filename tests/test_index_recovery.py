"""The full-text index is derived state: behind PostgreSQL after a crash, missing, or corrupt, it
is caught up or rebuilt at start; `catalog reindex` rebuilds it with the same results."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest
import tantivy
from fake_embedder import HashEncoder
from litestar.testing import TestClient
from rest import UC, bearer

from catalog.app import create_app
from catalog.settings import Settings

STORE = f"{UC}/memory-stores/main.default.rec"


@pytest.fixture
def own(own_settings: Settings) -> Settings:
    """A database and a data dir of the test's own: these tests count every entry and every
    index slot there is."""
    return own_settings


def create_store(client, settings) -> None:  # type: ignore[no-untyped-def]
    r = client.post(
        f"{UC}/memory-stores",
        headers=bearer(settings),
        json={"name": "rec", "catalog_name": "main", "schema_name": "default"},
    )
    assert r.status_code == 200, r.text


def app_client(settings):
    return TestClient(create_app(settings, encoder=HashEncoder()), raise_server_exceptions=False)


def keyword(client, settings, query):
    r = client.post(
        f"{STORE}/entries:search",
        headers=bearer(settings),
        json={"scope": "u", "query": query, "mode": "keyword", "top_k": 50},
    )
    assert r.status_code == 200, r.text
    return sorted(x["memory_entry"]["path"] for x in r.json()["results"])


def said(client, settings, query):
    """The conversation messages of scope u that a keyword search finds."""
    r = client.post(
        f"{STORE}/conversations:search",
        headers=bearer(settings),
        json={"scope": "u", "query": query, "mode": "keyword"},
    )
    assert r.status_code == 200, r.text
    return [x["conversation_item"]["text"] for x in r.json()["results"]]


def sql(url: str, statement: str) -> None:
    async def run() -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(run())


async def _fetch(url: str, statement: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetch(statement)
    finally:
        await conn.close()


def test_index_catches_up_rebuilds_and_reindexes(own):
    settings, database_url = own, own.database_url
    with app_client(settings) as c:
        create_store(c, settings)
        for i in range(5):
            r = c.post(
                f"{STORE}/entries",
                headers=bearer(settings),
                params={"scope": "u"},
                json={"path": f"/before/{i}.md", "contents": f"walrus fact {i}"},
            )
            assert r.status_code == 200
        assert keyword(c, settings, "walrus") == [f"/before/{i}.md" for i in range(5)]
        r = c.post(
            "/v1/conversations",
            headers=bearer(settings),
            json={
                "items": [{"role": "user", "content": "a walrus in the harbour"}],
                "memory_store": {"name": "main.default.rec"},
                "scope": {"kind": "user", "value": "u"},
            },
        )
        assert r.status_code == 200, r.text
        assert said(c, settings, "walrus") == ["a walrus in the harbour"]

    # committed in PostgreSQL while no server ran: the index never saw these (a crash between the
    # database commit and the index commit looks the same)
    sql(
        database_url,
        """
        INSERT INTO entries (store_id, scope, path, contents, created_by, updated_by)
        SELECT id, 'u', '/after/' || n || '.md', 'walrus sighting ' || n, 'admin', 'admin'
        FROM memory_stores, generate_series(0, 2) AS n WHERE name = 'rec';
        DELETE FROM entries WHERE path = '/before/0.md';
    """,
    )
    expected = sorted([f"/before/{i}.md" for i in range(1, 5)] + [f"/after/{n}.md" for n in range(3)])
    with app_client(settings) as c:
        assert keyword(c, settings, "walrus") == expected  # caught up at start

    index_dir = settings.index_dir / "slot-0"
    # missing index → rebuilt at start
    for path in sorted(index_dir.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    index_dir.rmdir()
    transcripts_dir = settings.index_dir / "transcripts" / "slot-0"
    assert (transcripts_dir / "meta.json").exists()  # the transcripts' index, beside the entries'
    (transcripts_dir / "meta.json").write_text("{ not json")
    with app_client(settings) as c:
        assert keyword(c, settings, "walrus") == expected
        assert said(c, settings, "walrus") == ["a walrus in the harbour"]  # rebuilt too

    # corrupt index → moved aside and rebuilt
    (index_dir / "meta.json").write_text("{ not json")
    with app_client(settings) as c:
        assert keyword(c, settings, "walrus") == expected
    assert list(settings.index_dir.glob("slot-0.corrupt-*"))

    # catalog reindex (no server running) gives the same results
    env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    env.update(CATALOG_DATA_DIR=str(settings.data_dir), CATALOG_DATABASE_URL=database_url)
    done = subprocess.run(
        [sys.executable, "-m", "catalog", "reindex"],
        env=env,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "entries slot-0: 7 documents indexed" in done.stderr
    assert "transcripts slot-0: 1 documents indexed" in done.stderr
    assert "2 full-text index slot(s) rebuilt" in done.stdout
    reindexed = asyncio.run(
        _fetch(database_url, "SELECT decision FROM audit_events WHERE action_name = 'system.reindex'")
    )
    assert [r["decision"] for r in reindexed] == ["system"]  # the command is in the audit log
    with app_client(settings) as c:
        assert keyword(c, settings, "walrus") == expected
        assert said(c, settings, "walrus") == ["a walrus in the harbour"]
        # the rows written behind the server's back got vectors from the backfill or reindex
        r = c.post(
            f"{STORE}/entries:search",
            headers=bearer(settings),
            json={"scope": "u", "query": "walrus sighting 1", "mode": "semantic", "top_k": 1},
        )
        assert r.json()["results"][0]["memory_entry"]["path"] == "/after/1.md"


def test_two_processes_keep_their_own_index(own):
    settings = own
    # two servers on one data dir: the second takes its own index slot and sees every write
    with app_client(settings) as first, app_client(settings) as second:
        create_store(first, settings)
        r = first.post(
            f"{STORE}/entries",
            headers=bearer(settings),
            params={"scope": "u"},
            json={"path": "/shared.md", "contents": "narwhal tusk"},
        )
        assert r.status_code == 200
        assert keyword(second, settings, "narwhal") == ["/shared.md"]
    assert (settings.index_dir / "slot-1").is_dir()


def test_an_index_with_an_older_versions_fields_is_rebuilt_at_start(own):
    """An index written before entries had metadata lacks the field filters use: the server
    rebuilds it from PostgreSQL at start (it is not reported corrupt), and filters work."""
    settings = own
    with app_client(settings) as c:
        create_store(c, settings)
        for i in range(4):
            r = c.post(
                f"{STORE}/entries",
                headers=bearer(settings),
                params={"scope": "u"},
                json={"path": f"/{i}.md", "contents": f"walrus {i}", "metadata": {"odd": i % 2 == 1}},
            )
            assert r.status_code == 200, r.text
    index_dir = settings.index_dir / "slot-0"
    watermark = (index_dir / "catalog-watermark.json").read_text()
    shutil.rmtree(index_dir)
    # the fields of the index before metadata, holding nothing, with a watermark that says it
    # is up to date: only a rebuild can make the filtered search below right
    builder = tantivy.SchemaBuilder()
    for name in ("entry_id", "store_id", "scope", "session", "path"):
        builder.add_text_field(name, stored=name == "entry_id", tokenizer_name="raw", index_option="basic")
    for name in ("contents", "description", "path_words"):
        builder.add_text_field(name, stored=False, index_option="position")
    index_dir.mkdir()
    old = tantivy.Index(builder.build(), path=str(index_dir), reuse=True)
    writer = old.writer()
    writer.commit()
    writer.wait_merging_threads()
    del writer, old
    (index_dir / "catalog-watermark.json").write_text(watermark)
    with app_client(settings) as c:
        r = c.post(
            f"{STORE}/entries:search",
            headers=bearer(settings),
            json={"scope": "u", "query": "walrus", "mode": "keyword", "filter": {"odd": True}},
        )
        assert r.status_code == 200, r.text
        assert sorted(x["memory_entry"]["path"] for x in r.json()["results"]) == ["/1.md", "/3.md"]
    assert not list(settings.index_dir.glob("slot-0.corrupt-*"))
