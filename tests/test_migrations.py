"""The migration runner against a real PostgreSQL."""

from __future__ import annotations

import json
import re
from pathlib import Path

import asyncpg
import pytest
from fake_embedder import HashEncoder
from litestar.testing import TestClient
from rest import UC

from catalog.app import create_app
from catalog.auth import mint_dev_token
from catalog.db import MIGRATIONS_DIR, apply_migrations, load_migrations, locks, sharding
from catalog.governance.namespace import bootstrap
from catalog.settings import Settings

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
    assert found == {name: {key} for key, names in locks.IN_MIGRATIONS.items() for name in names}
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


# --- 0028 (shard keys): a database written before it upgrades and still reads ---------------------

SESSIONS = "/api/2.0/agents/session-stores"
CONVERSATIONS = "/ai-gateway/mlflow/v1/conversations"
# each of a store's tables, with what names its store: (table, parent table, how they join)
_STORE_OF = {
    "conversation_items": ("conversations", "p.id = t.conversation_id"),
    "session_items": ("agent_sessions", "p.id = t.session"),
    "extraction_marks": ("agent_sessions", "p.id = t.session"),
}


def _before(tmp_path: Path, version: int) -> Path:
    """A directory of the migrations up to `version`."""
    directory = tmp_path / f"migrations-{version}"
    directory.mkdir()
    for migration in MIGRATIONS_DIR.iterdir():
        if migration.name.endswith(".sql") and int(migration.name[:4]) <= version:
            (directory / migration.name).write_text(migration.read_text(encoding="utf-8"), encoding="utf-8")
    return directory


def _message(item_id: str, role: str, text: str) -> str:
    kind = "input_text" if role == "user" else "output_text"
    return json.dumps(
        {
            "id": item_id,
            "type": "message",
            "role": role,
            "status": "completed",
            "content": [{"type": kind, "text": text}],
        }
    )


async def _insert_store(conn: asyncpg.Connection, schema_id: object, name: str, kind: str) -> str:
    """A store row written straight into the table (as a database of an earlier version holds it)."""
    return str(
        await conn.fetchval(
            "INSERT INTO memory_stores (schema_id, name, owner, created_by, updated_by, kind) "
            "VALUES ($1, $2, 'admin', 'admin', 'admin', $3) RETURNING id",
            schema_id,
            name,
            kind,
        )
    )


async def _write_as_before(conn: asyncpg.Connection) -> dict[str, str]:
    """Rows in every table of a store's data, written by the statements of the code before 0028
    (ids without stores); what the reads after it look for."""
    schema_id = await conn.fetchval(
        "SELECT s.id FROM schemas s JOIN catalogs c ON c.id = s.catalog_id "
        "WHERE c.name = 'main' AND s.name = 'default'"
    )

    async def store(name: str, kind: str = "memory") -> str:
        return await _insert_store(conn, schema_id, name, kind)

    notes, chats, log = await store("up_notes"), await store("up_chats"), await store("up-log", "session")

    async def entry(scope: str, path: str, contents: str) -> str:
        return str(
            await conn.fetchval(
                "INSERT INTO entries (store_id, scope, session_id, path, contents, description, source_type, "
                "creation_reason, creation_source, metadata, created_by, updated_by) "
                "VALUES ($1, $2, '', $3, $4, NULL, NULL, NULL, NULL, $5::jsonb, 'admin', 'admin') "
                "RETURNING id",
                notes,
                scope,
                path,
                contents,
                json.dumps({"topic": "home"}),
            )
        )

    city = await entry("ann", "/city.md", "Lives in Paris")
    await conn.execute(  # an edit, as update_contents wrote it: by id alone
        "UPDATE entries SET contents = $3, description = $4, version = version + 1, "
        "metadata = coalesce($6::jsonb, metadata), updated_at = clock_timestamp(), updated_by = $5 "
        "WHERE id = $1 AND version = $2",
        city,
        1,
        "Lives in Lyon",
        None,
        "admin",
        None,
    )
    source = await entry("ann", "/chat.md", "I moved to Lyon")
    await conn.execute(
        "INSERT INTO entry_lineage (target_entry_id, target_store_id, target_scope, target_session_id, "
        "target_path, source_entry_id, source_store_id, source_scope, source_session_id, source_path, "
        "created_by) VALUES ($1, $2, 'ann', '', '/city.md', $3, $2, 'ann', '', '/chat.md', 'admin')",
        city,
        notes,
        source,
    )
    async with conn.transaction():  # a deletion: its history keeps it
        await conn.execute("SELECT set_config('catalog.principal', 'admin', true)")
        await conn.execute("DELETE FROM entries WHERE id = $1", source)
    await entry("erin", "/gone.md", "erased")
    async with conn.transaction():  # an erased scope: its history goes too
        await conn.execute("SELECT set_config('catalog.erasing', 'on', true)")
        await conn.execute("DELETE FROM entries WHERE store_id = $1 AND scope = 'erin'", notes)
        await conn.execute("DELETE FROM entry_versions WHERE store_id = $1 AND scope = 'erin'", notes)

    conv = "conv_" + "ab" * 16
    await conn.execute(
        "INSERT INTO conversations (id, store_id, scope, scope_kind, metadata, created_by) "
        "VALUES ($1, $2, 'ann', 'user', '{}'::jsonb, 'admin')",
        conv,
        chats,
    )
    texts = [
        ("msg_1", "user", "I moved to Lyon"),
        ("msg_2", "assistant", "Noted"),
        ("msg_3", "user", "drop me"),
    ]
    await conn.execute(
        "INSERT INTO conversation_items (conversation_id, position, id, type, item, text, created_by) "
        "SELECT $1, n, id, 'message', item::jsonb, text, 'admin' "
        "FROM unnest($2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS u(id, item, text, n)",
        conv,
        [i for i, _, _ in texts],
        [_message(i, role, text) for i, role, text in texts],
        [text for _, _, text in texts],
    )
    await conn.execute("UPDATE conversations SET last_position = 3 WHERE id = $1", conv)
    await conn.execute("DELETE FROM conversation_items WHERE conversation_id = $1 AND id = 'msg_3'", conv)

    session = str(
        await conn.fetchval(
            "INSERT INTO agent_sessions (store_id, session_id, actor_id, parent_session_id, root_session_id, "
            "metadata) VALUES ($1, 's1', 'ann', NULL, 's1', '{}'::jsonb) RETURNING id",
            log,
        )
    )
    await conn.execute("UPDATE agent_sessions SET next_position = 2 WHERE id = $1", session)
    await conn.execute(
        "INSERT INTO session_items (session, position, data) "
        "SELECT $1, n - 1, d::jsonb FROM unnest($2::text[]) WITH ORDINALITY AS t(d, n)",
        session,
        [
            json.dumps({"role": "user", "content": "book a flight to Lyon"}),
            json.dumps({"type": "checkpoint"}),
        ],
    )
    await conn.execute(
        "INSERT INTO transcript_lineage (target_entry_id, target_store_id, target_scope, target_session_id, "
        "target_path, source_kind, source_store_id, source_scope, source_thread_id, source_item_ids, "
        "created_by, updated_by) VALUES ($1, $2, 'ann', '', '/city.md', 'conversation', $3, 'ann', $4, "
        "ARRAY['msg_1'], 'admin', 'admin')",
        city,
        notes,
        chats,
        conv,
    )
    await conn.execute(
        "INSERT INTO extraction_marks (session, memory_store_id, items_digest, extracted_by) "
        "VALUES ($1, $2, 'digest', 'admin')",
        session,
        notes,
    )
    pipeline = await conn.fetchval(
        "INSERT INTO memory_pipelines (session_store_id, memory_store_id, creator) VALUES ($1, $2, 'admin') "
        "RETURNING id",
        log,
        notes,
    )
    run = await conn.fetchval(
        "INSERT INTO pipeline_runs (pipeline, run_number, trigger, requested_by) "
        "VALUES ($1, 1, 'MANUAL', 'admin') RETURNING id",
        pipeline,
    )
    await conn.execute(
        "INSERT INTO pipeline_run_sessions (run, ordinal, session, session_id) VALUES ($1, 0, $2, 's1')",
        run,
        session,
    )
    return {"notes": notes, "chats": chats, "log": log, "conversation": conv, "session": session}


async def test_a_database_written_before_the_shard_keys_upgrades_and_reads(empty_database_url, tmp_path):
    conn = await asyncpg.connect(empty_database_url)
    try:
        await apply_migrations(conn, _before(tmp_path, 27))  # type: ignore[arg-type]
        assert await bootstrap(conn, "admin") is True
        made = await _write_as_before(conn)
        tables = [
            row[0] for row in await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        ]
        counts = {t: await conn.fetchval(f'SELECT count(*) FROM "{t}"') for t in tables}
        # the change rows of the erased entry and of the deleted conversation item name rows gone
        # with their history: the upgrade drops them and raises the prune mark past them
        unresolved = {
            "entry_changes": await conn.fetch(
                "SELECT seq FROM entry_changes c "
                "WHERE NOT EXISTS (SELECT 1 FROM entries e WHERE e.id = c.entry_id) "
                "AND NOT EXISTS (SELECT 1 FROM entry_versions v WHERE v.entry_id = c.entry_id)"
            ),
            "transcript_changes": await conn.fetch(
                "SELECT seq FROM transcript_changes c "
                "WHERE NOT EXISTS (SELECT 1 FROM transcript_items t WHERE t.id = c.item_id)"
            ),
        }
        assert [len(rows) for rows in unresolved.values()] == [2, 2]  # insert and delete, each
        empty = [t for t in sharding.DISTRIBUTED if t != "conversation_stores" and counts[t] == 0]
        assert empty == []  # every table of a store's data holds rows

        assert [m.version for m in await apply_migrations(conn)][:1] == [28]  # 0028, then any later one

        for table, count in counts.items():
            if table in ("schema_migrations", "change_log_pruned"):  # one more, two more
                continue
            dropped = len(unresolved.get(table, []))
            assert await conn.fetchval(f'SELECT count(*) FROM "{table}"') == count - dropped, table
        for log, rows in unresolved.items():
            mark = await conn.fetchval("SELECT up_to FROM change_log_pruned WHERE changes = $1", log)
            assert mark == max(row["seq"] for row in rows), log
        for table, (parent, join) in _STORE_OF.items():
            wrong = await conn.fetchval(
                f"SELECT count(*) FROM {table} t LEFT JOIN {parent} p ON {join} "
                "WHERE p.store_id IS DISTINCT FROM t.store_id"
            )
            assert wrong == 0, table
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM entry_changes c JOIN entries e ON e.id = c.entry_id "
                "WHERE c.store_id <> e.store_id"
            )
            == 0
        )
        assert await conn.fetch("SELECT conversation_id, store_id::text FROM conversation_stores") == [
            (made["conversation"], made["chats"])
        ]
        # the file is idempotent: run again, it changes nothing
        schema = "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint ORDER BY 1, 2"
        before = await conn.fetch(schema)
        await conn.execute(next(m.sql for m in load_migrations() if m.version == 28))
        assert await conn.fetch(schema) == before
    finally:
        await conn.close()

    settings = Settings(data_dir=tmp_path / "data", database_url=empty_database_url, admin="admin")
    headers = {"Authorization": f"Bearer {mint_dev_token(settings, 'admin')}"}
    notes = f"{UC}/memory-stores/main.default.up_notes"
    with TestClient(create_app(settings, encoder=HashEncoder()), raise_server_exceptions=False) as client:
        r = client.get(f"{notes}/entries:get", headers=headers, params={"scope": "ann", "path": "/city.md"})
        assert r.status_code == 200 and r.json()["contents"] == "Lives in Lyon", r.text
        r = client.get(
            f"{notes}/entries:history", headers=headers, params={"scope": "ann", "path": "/city.md"}
        )
        assert [v["contents"] for v in r.json()["versions"]] == ["Lives in Lyon", "Lives in Paris"], r.text
        r = client.get(
            f"{notes}/entries:history", headers=headers, params={"scope": "ann", "path": "/chat.md"}
        )
        assert [v["operation"] for v in r.json()["versions"]] == ["delete", "create"], r.text
        r = client.post(f"{notes}/entries:search", headers=headers, json={"scope": "ann", "query": "Lyon"})
        assert [hit["memory_entry"]["path"] for hit in r.json()["results"]] == ["/city.md"], r.text
        r = client.get(
            f"{UC}/system/lineage",
            headers=headers,
            params={"securable_full_name": "main.default.up_notes", "scope": "ann", "path": "/city.md"},
        )
        found = r.json()
        assert [(e["source"]["path"], e["source"]["deleted"]) for e in found["edges"]] == [("/chat.md", True)]
        assert [o["source"]["conversation_id"] for o in found["origins"]] == [made["conversation"]]

        conv = f"{CONVERSATIONS}/{made['conversation']}"
        r = client.get(f"{conv}/items", headers=headers, params={"order": "asc"})
        assert [item["id"] for item in r.json()["data"]] == ["msg_1", "msg_2"], r.text
        r = client.post(
            f"{UC}/memory-stores/main.default.up_chats/conversations:search",
            headers=headers,
            json={"query": "moved", "scope": "ann"},
        )
        hits = [hit["conversation_item"]["item_id"] for hit in r.json()["results"]]
        assert hits[0] == "msg_1" and "msg_3" not in hits, r.text
        r = client.get(f"{SESSIONS}/up-log/sessions/s1/items", headers=headers)
        assert len(r.json()["session_items"]) == 2, r.text
        r = client.post(
            f"{SESSIONS}/up-log/items:search", headers=headers, json={"query": "flight", "actor_id": "ann"}
        )
        assert r.json()["results"][0]["session_item"]["text"] == "book a flight to Lyon", r.text

        # and writes on: a conversation's items go on after its last position
        r = client.post(
            f"{conv}/items",
            headers=headers,
            json={"items": [{"type": "message", "role": "user", "content": "hi"}]},
        )
        assert r.status_code == 200, r.text
        r = client.get(f"{conv}/items", headers=headers, params={"order": "asc"})
        assert len(r.json()["data"]) == 3
        r = client.post(
            f"{SESSIONS}/up-log/sessions/s1/items:append",
            headers=headers,
            json={"items": [{"data": {"role": "user", "content": "and back"}}]},
        )
        assert r.status_code == 200, r.text
        r = client.post(
            f"{notes}/entries",
            headers=headers,
            params={"scope": "ann"},
            json={"path": "/n.md", "contents": "x"},
        )
        assert r.status_code == 200, r.text
        assert client.delete(conv, headers=headers).status_code == 200
        assert client.get(conv, headers=headers).status_code == 404


async def test_the_maintenance_steps_columns_become_the_registrys(empty_database_url, tmp_path):
    """0039: a pipeline that maintained names the step, a run that maintained takes it with its
    dry_run, a report kept on a run is that step's report, and the step's own columns are gone
    (a copy of a report left there would be one that erasing a data subject does not reach)."""
    conn = await asyncpg.connect(empty_database_url)
    try:
        await apply_migrations(conn, _before(tmp_path, 38))  # type: ignore[arg-type]
        assert await bootstrap(conn, "admin") is True
        schema_id = await conn.fetchval("SELECT id FROM schemas WHERE name = 'default'")
        stores = [
            await _insert_store(conn, schema_id, name, kind)
            for name, kind in (("mx-notes", "memory"), ("mx-log", "session"), ("mx-other", "memory"))
        ]
        maintains, plain = [
            await conn.fetchval(
                "INSERT INTO memory_pipelines (session_store_id, memory_store_id, creator, maintain) "
                "VALUES ($1, $2, 'admin', $3) RETURNING id",
                stores[1],
                target,
                maintain,
            )
            for target, maintain in ((stores[0], True), (stores[2], False))
        ]
        report = {"dry_run": True, "scopes_reviewed": 1, "actions": [{"action": "split", "scope": "u"}]}
        runs = {
            name: await conn.fetchval(
                "INSERT INTO pipeline_runs (pipeline, run_number, trigger, requested_by, maintain, dry_run, "
                "maintenance, state) VALUES ($1, $2, 'MANUAL', 'admin', $3, $4, $5::jsonb, "
                "CASE WHEN $5::jsonb IS NULL THEN 'PENDING' ELSE 'SUCCEEDED' END) RETURNING id",
                pipeline,
                number,
                maintain,
                dry_run,
                None if kept is None else json.dumps(kept),
            )
            for name, (pipeline, number, maintain, dry_run, kept) in {
                "done": (maintains, 1, True, True, report),
                "pending": (maintains, 2, True, False, None),
                "without": (plain, 1, False, False, None),
            }.items()
        }

        assert [m.version for m in await apply_migrations(conn)][:1] == [39]

        steps = dict(await conn.fetch("SELECT id, steps FROM memory_pipelines"))
        assert steps == {maintains: ["maintain"], plain: []}
        kept = {
            row["id"]: (json.loads(row["steps"]), json.loads(row["reports"]))
            for row in await conn.fetch("SELECT id, steps::text, reports::text FROM pipeline_runs")
        }
        assert kept == {
            runs["done"]: ({"maintain": {"dry_run": True}}, {"maintain": report}),
            runs["pending"]: ({"maintain": {"dry_run": False}}, {}),
            runs["without"]: ({}, {}),
        }
        left = await conn.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_name IN "
            "('memory_pipelines', 'pipeline_runs') AND column_name IN ('maintain', 'dry_run', 'maintenance')"
        )
        assert left == []
    finally:
        await conn.close()
