"""Backup and restore (catalog/backup), against `catalog serve` (the real embedding model) and
PostgreSQL: `catalog export` writes a store's archive, `catalog import` restores it, and what
comes back is the same store (entries, versions, expiry, legal hold, grants, conversations,
sessions, lineage, search results); archives cut short, altered, of another version, or aimed at
a store that holds something are refused with 400 and change nothing; an import without MANAGE is
403 and audited. The whole-server recipe (pg_dump, pg_restore into a fresh database, `catalog
reindex`) is run too."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import asyncpg
import httpx
import pytest
from rest import UC

from catalog.auth import mint_dev_token
from catalog.client import CatalogError, Client
from catalog.runtime import with_database
from catalog.settings import Settings

AGENTS = "/api/2.0/agents"
CONVERSATIONS = "/ai-gateway/mlflow/v1/conversations"
STORE = "main.default.notes"
SESSIONS = "main.default.chats"
SCOPES = ("alice", "bob")
QUERIES = ("which tea does alice drink", "travel plans for the summer", "project deadline")
REPO = Path(__file__).resolve().parents[1]


def _token(server, sub: str = "admin") -> str:
    return mint_dev_token(Settings(data_dir=server.data_dir), sub)


def _client(server, sub: str = "admin") -> Client:
    return Client(server.url, _token(server, sub), timeout=60)


def _cli(
    server, *args: str, sub: str = "admin", stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    env = {**server.env, "CATALOG_URL": server.url, "CATALOG_TOKEN": _token(server, sub)}
    return subprocess.run(
        [sys.executable, "-m", "catalog", *args],
        env=env,
        input=stdin,
        capture_output=True,
        cwd=REPO,
        timeout=120,
    )


# --- what a store holds, as the API answers it ------------------------------------------------------


def _state(client: Client, store: str, conversation: str | None = None) -> dict:
    """Everything the API says of the store: definition, grants, every entry with its history,
    keyword and hybrid searches, lineage, the conversation's items; who imported each entry and
    version apart (`imported`: an import records its own importer)."""
    info = client.request("GET", f"{UC}/memory-stores/{store}")
    definition = {
        k: info.get(k)
        for k in ("description", "properties", "owner", "scope_binding", "shared_scopes", "legal_hold")
    }
    definition["default_ttl_seconds"] = info.get("default_ttl_seconds")
    grants = client.request("GET", f"{UC}/permissions/memory_store/{store}")["privilege_assignments"]
    entries, histories = {}, {}
    handle = client.store(store)
    for scope in SCOPES:
        listed = client.request(  # superseded and merged entries too
            "GET",
            f"{UC}/memory-stores/{store}/entries",
            params={"scope": scope, "include_superseded": "true"},
        )["entries"]
        for summary in listed:
            got = client.request(
                "GET",
                f"{UC}/memory-stores/{store}/entries:get",
                params={"scope": scope, "path": summary["path"]},
            )
            entries[(scope, summary["path"])] = got
            histories[(scope, summary["path"])] = client.request(
                "GET",
                f"{UC}/memory-stores/{store}/entries:history",
                params={"scope": scope, "path": summary["path"]},
            )["versions"]
    imported = {
        key: (entry.pop("imported_by", None), [v.pop("imported_by", None) for v in histories[key]])
        for key, entry in entries.items()
    }
    searches = {}
    for query in QUERIES:
        for mode in ("keyword", "hybrid"):
            hits = handle.search(list(SCOPES), query, mode=mode, top_k=10)
            searches[(query, mode)] = [(h.entry.scope, h.entry.path, round(h.score, 4)) for h in hits]
    lineage = client.lineage.get(store)
    edges = sorted(
        (e.source.scope, e.source.path, e.target.scope, e.target.path, e.source.memory_store == store)
        for e in lineage.edges
    )
    items = None
    if conversation is not None:
        items = client.request("GET", f"{CONVERSATIONS}/{conversation}/items", params={"order": "asc"})[
            "data"
        ]
    return {
        "definition": definition,
        "grants": grants,
        "entries": entries,
        "histories": histories,
        "searches": searches,
        "lineage": edges,
        "items": items,
        "imported": imported,
    }


@pytest.fixture(scope="module")
def server(live):
    return live


@pytest.fixture(scope="module")
def written(server):
    """A store with entries in two scopes (metadata, several versions, an expiry), a derived
    entry, grants, a conversation with items, under legal hold; and a session store with a session."""
    with _client(server) as c:
        c.memory_stores.create(
            STORE, description="what the assistant learned", properties={"team": "support"}
        )
        notes = c.store(STORE)
        notes.write("alice", "/tea.md", "Alice drinks green tea.", metadata={"topic": "food", "rank": 1})
        notes.write("alice", "/tea.md", "Alice drinks green tea, no sugar.", write_mode="OVERWRITE")
        notes.edit("alice", "/tea.md", append="She likes jasmine tea too.")
        notes.write(
            "alice", "/travel.md", "Alice plans a summer trip to Lisbon.", metadata={"topic": "travel"}
        )
        notes.write("alice", "/work/deadline.md", "The project deadline is March 3.", ttl_seconds=864000)
        notes.write("bob", "/tea.md", "Bob drinks black coffee, never tea.", description="bob's drinks")
        notes.write("bob", "/travel.md", "Bob travels to Kyoto in the summer.", metadata={"topic": "travel"})
        notes.write(
            "bob",
            "/summary.md",
            "Both plan summer travel.",
            derived_from=[
                {"memory_store": STORE, "scope": "alice", "path": "/travel.md"},
                {"memory_store": STORE, "scope": "bob", "path": "/travel.md"},
            ],
        )
        notes.write("bob", "/gone.md", "to be deleted")
        notes.delete("bob", "/gone.md")  # its history stays
        c.request(  # a consolidated entry: its state and the entry replacing it are archived
            "POST",
            f"{UC}/memory-stores/{STORE}/entries:setState",
            json={
                "scope": "bob",
                "path": "/tea.md",
                "state": "merged",
                "superseded_by": {"path": "/travel.md"},
            },
        )
        c.request(  # a redacted version: the redaction is archived with it
            "POST",
            f"{UC}/memory-stores/{STORE}/entries:redact",
            json={"scope": "alice", "path": "/tea.md", "etag": "1", "reason": "said by mistake"},
        )
        c.grants.update("memory_store", STORE, "reader", add=["READ_MEMORY_STORE"])
        c.grants.update("memory_store", STORE, "mallory", add=["READ_MEMORY_STORE", "WRITE_MEMORY_STORE"])
        # a grant limited to scopes comes back limited (an archive that widened it would leak)
        c.request(
            "PATCH",
            f"{UC}/permissions/memory_store/{STORE}",
            json={
                "changes": [{"principal": "team-app", "add": ["READ_MEMORY_STORE"], "scopes": ["t", "t:*"]}]
            },
        )
        conversation = c.request(
            "POST",
            CONVERSATIONS,
            json={
                "memory_store": {"name": STORE},
                "scope": {"kind": "user", "value": "alice"},
                "items": [
                    {"role": "user", "content": "Remember that I drink green tea."},
                    {"role": "assistant", "content": "Noted: green tea."},
                ],
            },
        )["id"]
        c.memory_stores.update(STORE, legal_hold=True)
        c.request("POST", f"{AGENTS}/session-stores", params={"session_store_name": "chats"}, json={})
        c.request(
            "POST",
            f"{AGENTS}/session-stores/chats/sessions",
            params={"session_id": "s-1"},
            json={"actor_id": "alice"},
        )
        c.request(
            "POST",
            f"{AGENTS}/session-stores/chats/sessions/s-1/items:append",
            json={"items": [{"data": {"role": "user", "content": "hello"}}, {"data": {"note": [1, 2]}}]},
        )
    return {"conversation": conversation}


@pytest.fixture(scope="module")
def archive(server, written, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("archives") / "notes.jsonl"
    done = _cli(server, "export", STORE, "--output", str(path))
    assert done.returncode == 0, done.stderr
    return path


def _lines(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.splitlines()]


def _reseal(lines: list[dict]) -> bytes:
    """An archive of these lines (the last, the manifest, is written anew): what an archive
    altered by someone who knows the format looks like."""
    import hashlib

    body = b"".join(json.dumps(line, separators=(",", ":")).encode() + b"\n" for line in lines[:-1])
    manifest = {**lines[-1], "lines": len(lines) - 1, "sha256": hashlib.sha256(body).hexdigest()}
    return body + json.dumps(manifest).encode() + b"\n"


# --- the tests --------------------------------------------------------------------------------------


def test_the_archive_is_versioned_json_lines_with_a_manifest(archive, server):
    lines = _lines(archive.read_bytes())
    header, store, manifest = lines[0], lines[1], lines[-1]
    assert header["kind"] == "header" and header["format"] == "memory-catalog-store-archive"
    assert header["version"] == 1 and header["memory_store"] == STORE and header["scope"] is None
    assert header["embedding_model"].startswith("sha256:")
    assert (
        store["kind"] == "store"
        and store["legal_hold"] is True
        and store["properties"] == {"team": "support"}
    )
    kinds = [line["kind"] for line in lines]
    assert manifest["kind"] == "manifest" and manifest["lines"] == len(lines) - 1
    for kind in ("grant", "entry", "entry_version", "conversation", "conversation_item", "lineage"):
        assert manifest["counts"][kind] == kinds.count(kind) > 0, kind
    entries = [line for line in lines if line["kind"] == "entry"]
    assert len(entries) == 6 and all(e["embedding_model"] == header["embedding_model"] for e in entries)
    tea = next(e for e in entries if e["scope"] == "alice" and e["path"] == "/tea.md")
    assert tea["version"] == 3 and tea["metadata"] == {"topic": "food", "rank": 1}
    assert next(e for e in entries if e["path"] == "/work/deadline.md")["expires_at"] is not None
    versions = [line for line in lines if line["kind"] == "entry_version" and line["path"] == "/gone.md"]
    assert [v["operation"] for v in versions] == ["create", "delete"]  # history outlives the entry
    tea = [line for line in lines if line["kind"] == "entry_version" and line["path"] == "/tea.md"]
    first = next(v for v in tea if v["scope"] == "alice" and v["version"] == 1)
    assert first["contents"] is None and first["redaction_reason"] == "said by mistake", first


def test_round_trip_after_the_store_is_dropped(server, written, archive):
    with _client(server) as c:
        before = _state(c, STORE, written["conversation"])
        c.memory_stores.update(STORE, legal_hold=False)  # a held store cannot be deleted
        c.memory_stores.delete(STORE)
        with pytest.raises(CatalogError) as gone:
            c.memory_stores.get(STORE)
        assert gone.value.status == 404
        done = _cli(server, "import", str(archive))
        assert done.returncode == 0, done.stderr
        out = done.stdout.decode()
        assert out.startswith(f"imported {STORE} into {STORE} (a new store): ") and "6 entries" in out
        after = _state(c, STORE, written["conversation"])
    assert after["definition"] == before["definition"] and after["definition"]["legal_hold"] is True
    assert after["grants"] == before["grants"]
    assert after["entries"] == before["entries"]
    merged = after["entries"][("bob", "/tea.md")]
    assert merged["state"] == "merged" and merged["superseded_by"] == {"scope": "bob", "path": "/travel.md"}
    assert after["histories"] == before["histories"]
    assert after["imported"] == {  # the import recorded its importer on every entry and version
        key: ("admin", ["admin"] * len(versions)) for key, (_, versions) in before["imported"].items()
    }
    assert after["lineage"] == before["lineage"] and len(after["lineage"]) == 2
    assert after["items"] == before["items"] and len(after["items"]) == 2
    for key, hits in before["searches"].items():
        assert hits, key
        assert after["searches"][key] == hits, key


def test_import_into_another_name(server, written, archive):
    into = f"main.default.copy_{uuid.uuid4().hex[:6]}"
    with _client(server) as c:
        answer = c.memory_stores.import_archive(into, archive.read_bytes())
        assert answer["memory_store"] == into and answer["created"] is True and answer["source"] == STORE
        assert answer["reembedded"] == 0  # the same model made every vector
        assert answer["conversations_renamed"] == 1  # the original still has its id
        original, copy = _state(c, STORE), _state(c, into)
    assert copy["entries"] == original["entries"] and copy["histories"] == original["histories"]
    assert copy["grants"] == original["grants"]
    limited = {
        "principal": "team-app",
        "privileges": ["READ_MEMORY_STORE"],
        "scopes": {"READ_MEMORY_STORE": ["t", "t:*"]},
    }
    assert limited in copy["grants"]
    assert {k: [hit[:2] for hit in v] for k, v in copy["searches"].items()} == {
        k: [hit[:2] for hit in v] for k, v in original["searches"].items()
    }
    assert all(edge[4] for edge in copy["lineage"]) and len(copy["lineage"]) == 2  # sources in the copy


def test_a_session_store_round_trip(server, written):
    with _client(server) as c:
        chunks = b"".join(c.memory_stores.export(SESSIONS))
        lines = _lines(chunks)
        assert [line["kind"] for line in lines].count("session_item") == 2
        session = f"{AGENTS}/session-stores/chats/sessions/s-1"
        before = c.request("GET", f"{session}/items")
        c.request("DELETE", f"{AGENTS}/session-stores/chats")
        answer = c.memory_stores.import_archive(SESSIONS, chunks)
        assert answer["created"] is True and answer["counts"]["session"] == 1
        assert c.request("GET", f"{session}/items") == before
        assert c.request("GET", session)["actor_id"] == "alice"
        other = f"main.other_{uuid.uuid4().hex[:6]}"
        c.schemas.create(other)
        with pytest.raises(CatalogError) as elsewhere:  # a session store lives in the agents schema
            c.memory_stores.import_archive(f"{other}.chats", chunks)
        assert elsewhere.value.status == 400 and "agents schema main.default" in elsewhere.value.message


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ("truncated", "truncated"),
        ("flipped", "corrupt: the sha256"),
        ("version", "archive version 2 is not supported"),
        ("empty", "empty"),
    ],
)
def test_a_broken_archive_is_refused_and_changes_nothing(server, archive, damage, says):
    data = archive.read_bytes()
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "flipped":
        at = data.index(b"green tea")
        data = data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]
    elif damage == "version":
        lines = _lines(data)
        data = _reseal([{**lines[0], "version": 2}, *lines[1:]])
    else:
        data = b""
    into = f"main.default.broken_{damage}"
    with _client(server) as c:
        with pytest.raises(CatalogError) as refused:
            c.memory_stores.import_archive(into, data)
        assert refused.value.status == 400 and refused.value.error_code == "INVALID_PARAMETER_VALUE"
        assert says in refused.value.message, refused.value.message
        with pytest.raises(CatalogError) as missing:
            c.memory_stores.get(into)
        assert missing.value.status == 404  # nothing was created


def test_an_archive_with_another_model_is_embedded_anew(server, archive):
    lines = _lines(archive.read_bytes())
    lines = [
        {**line, "embedding_model": "sha256:another"} if line["kind"] == "entry" else line for line in lines
    ]
    into = f"main.default.remodelled_{uuid.uuid4().hex[:6]}"
    with _client(server) as c:
        answer = c.memory_stores.import_archive(into, _reseal(lines))
        assert answer["reembedded"] >= 6
        hits = c.store(into).search(list(SCOPES), "which tea does alice drink", mode="semantic")
        assert hits and hits[0].entry.path == "/tea.md"  # the worker embedded them with this model


def test_a_store_that_holds_something_is_refused(server, archive):
    with _client(server) as c:
        listed = sorted(e.path for e in c.store(STORE).list("alice"))
        done = _cli(server, "import", str(archive))  # into the store it came from, which is full
        assert done.returncode == 1
        assert done.stderr.decode().startswith(
            "error: INVALID_PARAMETER_VALUE: memory store main.default.notes"
        )
        assert "is not empty" in done.stderr.decode()
        assert sorted(e.path for e in c.store(STORE).list("alice")) == listed


def test_without_manage_an_import_or_export_is_refused_and_audited(server, written, archive):
    # mallory reads and writes the store, but does not manage it
    done = _cli(server, "import", str(archive), sub="mallory")
    assert done.returncode == 1 and done.stderr.decode().startswith("error: PERMISSION_DENIED:")
    with _client(server, "mallory") as m, pytest.raises(CatalogError) as refused:
        b"".join(m.memory_stores.export(STORE))
    assert refused.value.status == 403
    with _client(server) as c:
        events = list(c.audit.events(principal="mallory", limit=20))
    imports = [e for e in events if e.action_name == "memory_store.import"]
    exports = [e for e in events if e.action_name == "memory_store.export"]
    assert imports and imports[0].decision == "deny" and imports[0].status_code == 403
    assert exports and exports[0].decision == "deny" and exports[0].status_code == 403


def _import(server, sub: str, into: str, data: bytes) -> httpx.Response:
    return httpx.post(
        f"{server.url}{UC}/memory-stores/{into}/import",
        headers={"Authorization": f"Bearer {_token(server, sub)}", "Content-Type": "application/x-ndjson"},
        content=data,
        timeout=120,
    )


def _held(server, store: str) -> dict:
    """What the store holds of the archive's keys: each one's history, or the 404 of none."""
    held = {}
    for scope in SCOPES:
        for path in ("/tea.md", "/travel.md", "/gone.md"):
            r = httpx.get(
                f"{server.url}{UC}/memory-stores/{store}/entries:history",
                headers={"Authorization": f"Bearer {_token(server)}"},
                params={"scope": scope, "path": path},
            )
            held[(scope, path)] = r.json()["versions"] if r.status_code == 200 else r.status_code
    return held


def test_an_import_writes_only_the_scopes_its_importer_may_write(server, written, archive):
    """Importing entries is writing them: MANAGE on the store is not enough, WRITE is needed in
    every scope the archive holds (a grant limited to some scopes refuses the others), and nothing
    is written before the whole import is allowed."""
    into = f"main.default.restored_{uuid.uuid4().hex[:6]}"
    importer = f"restorer-{uuid.uuid4().hex[:6]}"
    permissions = f"{UC}/permissions/memory_store/{into}"
    data = archive.read_bytes()
    with _client(server) as c:
        c.memory_stores.create(into)
        c.grants.update("memory_store", into, importer, add=["MANAGE"])
        nothing = _held(server, into)
        assert set(nothing.values()) == {404}

        refused = _import(server, importer, into, data)  # MANAGE only: no scope may be written
        assert refused.status_code == 403, refused.text
        assert refused.json()["error_code"] == "PERMISSION_DENIED"
        assert "the import writes scope 'alice'" in refused.json()["message"], refused.text
        assert "WRITE_MEMORY_STORE" in refused.json()["message"]
        assert _held(server, into) == nothing

        limited = {"principal": importer, "add": ["WRITE_MEMORY_STORE"], "scopes": ["alice"]}
        c.request("PATCH", permissions, json={"changes": [limited]})
        refused = _import(server, importer, into, data)  # alice may be written, bob may not
        assert refused.status_code == 403, refused.text
        assert "in scope 'bob'" in refused.json()["message"], refused.text
        assert _held(server, into) == nothing  # not half of it either

        events = list(c.audit.events(principal=importer, limit=10))
        denied = [e for e in events if e.action_name == "entries.write" and e.decision == "deny"]
        assert len(denied) == 2 and all(e.securable_full_name == into for e in denied)
        assert all(e.status_code == 403 for e in denied)

        everywhere = {"principal": importer, "add": ["WRITE_MEMORY_STORE"]}
        c.request("PATCH", permissions, json={"changes": [everywhere]})
        done = _import(server, importer, into, data)
        assert done.status_code == 200, done.text
        assert done.json()["counts"]["entry"] == 6
        (event,) = [e for e in c.audit.events(principal=importer, limit=10) if e.decision == "allow"]
        assert (event.action_name, event.securable_full_name, event.result_count) == (
            "memory_store.import",
            into,
            6,
        )


def test_imported_versions_keep_their_author_and_record_the_importer(server, written, archive):
    """The archive's authors stay the original authors; every entry and version the import wrote
    names its importer, in the API's answers and in the next export (a re-import records its own
    importer); an archive made before the field imports as well."""
    into = f"main.default.imported_{uuid.uuid4().hex[:6]}"
    importer = f"importer-{uuid.uuid4().hex[:6]}"
    lines = _lines(archive.read_bytes())
    old = [{k: v for k, v in line.items() if k != "imported_by"} for line in lines]  # before the field
    with _client(server) as c:
        c.memory_stores.create(into)
        c.grants.update("memory_store", into, importer, add=["MANAGE", "WRITE_MEMORY_STORE"])
        done = _import(server, importer, into, _reseal(old))
        assert done.status_code == 200, done.text
        original = _state(c, STORE)
        copy = _state(c, into)
        assert len(copy["entries"]) == 6 and copy["entries"].keys() == original["entries"].keys()
        for key, entry in copy["entries"].items():
            assert entry["created_by"] == original["entries"][key]["created_by"] == "admin", key
            assert entry["updated_by"] == original["entries"][key]["updated_by"], key
        for key, versions in copy["histories"].items():
            assert [v["updated_by"] for v in versions] == [
                v["updated_by"] for v in original["histories"][key]
            ], key
        assert copy["imported"] == {
            key: (importer, [importer] * len(versions)) for key, versions in copy["histories"].items()
        }

        # what is written after the import is not imported; the entry still came by the import
        c.store(into).edit("alice", "/tea.md", append="Now oolong too.")  # under the archive's hold
        tea = {"scope": "alice", "path": "/tea.md"}
        got = c.request("GET", f"{UC}/memory-stores/{into}/entries:get", params=tea)
        assert (got["created_by"], got["updated_by"], got["imported_by"]) == ("admin", "admin", importer)
        newest, *before = c.request("GET", f"{UC}/memory-stores/{into}/entries:history", params=tea)[
            "versions"
        ]
        assert "imported_by" not in newest and {v["imported_by"] for v in before} == {importer}

        data = b"".join(c.memory_stores.export(into))
        exported = _lines(data)
        rows = [line for line in exported if line["kind"] in ("entry", "entry_version")]
        assert {line["imported_by"] for line in rows} == {importer, None}
        assert {line["imported_by"] for line in rows if line["kind"] == "entry"} == {importer}
        again = f"main.default.reimported_{uuid.uuid4().hex[:6]}"
        c.memory_stores.import_archive(again, data)  # by the admin
        reimported = _lines(b"".join(c.memory_stores.export(again)))
    rows = [line for line in reimported if line["kind"] in ("entry", "entry_version")]
    assert rows and {line["imported_by"] for line in rows} == {"admin"}
    assert [line.get("changed_by", line.get("created_by")) for line in rows] == [
        line.get("changed_by", line.get("created_by"))
        for line in exported
        if line["kind"] in ("entry", "entry_version")
    ]


def test_export_with_scope_holds_only_that_scope(server, written):
    done = _cli(server, "export", STORE, "--scope", "bob")
    assert done.returncode == 0, done.stderr
    lines = _lines(done.stdout)
    assert lines[0]["scope"] == "bob"
    scoped = [line for line in lines if "scope" in line and line["kind"] not in ("header",)]
    assert scoped and {line["scope"] for line in scoped} == {"bob"}
    assert {line["kind"] for line in lines} >= {"entry", "entry_version", "lineage", "grant"}
    assert not [line for line in lines if line["kind"] in ("conversation", "conversation_item")]
    said = done.stderr.decode()
    assert said.startswith("exported main.default.notes: 4 grants, 3 entries, "), said


# --- the whole-server recipe -------------------------------------------------------------------------


def _pg_bin(name: str) -> str:
    from catalog.db.embedded import bin_dir

    return str(bin_dir() / name)


def _admin(url: str, statement: str) -> None:
    async def run() -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(run())


def _embedded(url: str, seconds: float = 60.0) -> None:
    """Wait until the server has embedded every row (the dump then holds every vector)."""
    import time

    async def behind() -> int:
        conn = await asyncpg.connect(url)
        try:
            return int(
                await conn.fetchval(
                    "SELECT (SELECT count(*) FROM entries WHERE embedded_version IS DISTINCT FROM version) + "
                    "(SELECT count(*) FROM transcript_items WHERE embedded_version IS DISTINCT FROM version)"
                )
            )
        finally:
            await conn.close()

    deadline = time.monotonic() + seconds
    while asyncio.run(behind()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert asyncio.run(behind()) == 0


def test_whole_server_recipe_pg_dump_restore_reindex(
    server, written, database_url, pg_server_url, live_server, tmp_path
):
    with _client(server) as c:
        expected = _state(c, STORE)["searches"]
    _embedded(database_url)
    dump = tmp_path / "catalog.dump"
    subprocess.run(
        [_pg_bin("pg_dump"), "--format=custom", f"--file={dump}", database_url], check=True, timeout=120
    )
    fresh = f"restored_{uuid.uuid4().hex[:8]}"
    _admin(pg_server_url, f'CREATE DATABASE "{fresh}"')
    fresh_url = with_database(pg_server_url, fresh)
    try:
        subprocess.run(
            [_pg_bin("pg_restore"), "--no-owner", "--exit-on-error", f"--dbname={fresh_url}", str(dump)],
            check=True,
            timeout=120,
        )
        # one vector as if another model had made it: `reindex --embeddings` re-embeds that one only
        _admin(
            fresh_url,
            "UPDATE entries SET embedding_model = 'sha256:another' "
            "WHERE path = '/travel.md' AND scope = 'bob' AND store_id = "
            "(SELECT id FROM memory_stores WHERE name = 'notes')",
        )
        data_dir = tmp_path / "restored"
        env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
        env.update(CATALOG_DATABASE_URL=fresh_url, CATALOG_DATA_DIR=str(data_dir))
        for args, embedded in (
            (["reindex"], "embedded: 0 entries"),
            (["reindex", "--embeddings"], "embedded: 1 entries"),
        ):
            done = subprocess.run(
                [sys.executable, "-m", "catalog", *args],
                env=env,
                capture_output=True,
                text=True,
                cwd=REPO,
                timeout=180,
            )
            assert done.returncode == 0, done.stderr
            assert embedded in done.stdout, (done.stdout, done.stderr)
        restored = live_server(data_dir, env={"CATALOG_DATABASE_URL": fresh_url})
        try:
            with Client(restored.url, mint_dev_token(Settings(data_dir=data_dir), "admin"), timeout=60) as c:
                assert _state(c, STORE)["searches"] == expected
        finally:
            restored.stop()
    finally:
        _admin(pg_server_url, f'DROP DATABASE IF EXISTS "{fresh}" WITH (FORCE)')


def test_the_export_route_streams_json_lines(server, written):
    with httpx.stream(
        "GET",
        f"{server.url}{UC}/memory-stores/{STORE}/export",
        headers={"Authorization": f"Bearer {_token(server)}"},
        timeout=60,
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        body = response.read()
    assert _lines(body)[-1]["kind"] == "manifest"


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ("unknown field", "line 3: Object contains unknown field `surprise`"),
        ("out of order", "a grant line after a entry line"),
        ("no store", "line 2: a grant line where the store's definition"),
        ("bad scope", "scope must not contain control characters"),
    ],
)
def test_a_malformed_line_is_named_and_changes_nothing(server, archive, change, says):
    """The archive's lines are inputs like any request body: every kind forbids unknown fields,
    the kinds come in order, and keys follow the API's rules, all checked before any write."""
    lines = _lines(archive.read_bytes())
    grant = next(i for i, line in enumerate(lines) if line["kind"] == "grant")
    entry = next(i for i, line in enumerate(lines) if line["kind"] == "entry")
    if change == "unknown field":
        lines[grant] = {**lines[grant], "surprise": 1}
    elif change == "out of order":
        lines.insert(entry + 1, lines.pop(grant))
    elif change == "no store":
        del lines[1]
    else:
        lines[entry + 1] = {**lines[entry + 1], "scope": "a\u0007b"}
    into = f"main.default.malformed_{uuid.uuid4().hex[:6]}"
    with _client(server) as c:
        with pytest.raises(CatalogError) as refused:
            c.memory_stores.import_archive(into, _reseal(lines))
        assert refused.value.status == 400 and says in refused.value.message, refused.value.message
        with pytest.raises(CatalogError) as missing:
            c.memory_stores.get(into)
        assert missing.value.status == 404


def test_the_slices_parts_hold_every_kind_of_line_in_archive_order():
    """Each slice reads its own rows for an export (`catalog.backup.export.PARTS`): together they
    name every kind of line between the store's definition and the manifest, in archive order."""
    from catalog.backup.export import PARTS
    from catalog.backup.schemas import ORDER

    assert [kind for part in PARTS for kind in part.KINDS] == list(ORDER[2:-1])
