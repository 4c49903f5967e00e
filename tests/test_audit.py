"""The audit log: an event for every request, nothing secret in it, READ_AUDIT, and a hash chain
that names the first broken event after tampering by a superuser."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest
from rest import UC
from stores import make_store

from catalog.recorder.pseudonyms import KeyCache

AUDIT = f"{UC}/system/audit"
SECRET = "zanzibar-7781-confidential"


def sql(url: str, statement: str, *args):  # type: ignore[no-untyped-def]
    async def run():  # type: ignore[no-untyped-def]
        conn = await asyncpg.connect(url)
        try:
            return await conn.fetch(statement, *args)
        finally:
            await conn.close()

    return asyncio.run(run())


def event_for(client, token, request_id):  # type: ignore[no-untyped-def]
    events = client.get(AUDIT, headers=token(), params={"page_size": 50}).json()["events"]
    return next(e for e in events if e["request_id"] == request_id)


def create_store(client, token, name: str) -> str:
    r = client.post(
        f"{UC}/memory-stores",
        headers=token(),
        json={"name": name, "catalog_name": "main", "schema_name": "default"},
    )
    assert r.status_code == 200, r.text
    return f"main.default.{name}"


@pytest.fixture(scope="module")
def aud(client, token) -> str:  # type: ignore[no-untyped-def]
    """Store `main.default.aud`, empty: tests write entries of their own scopes into it."""
    return create_store(client, token, "aud")


def test_every_outcome_is_one_event(client, token, aud):
    cases = [
        (client.get(f"{UC}/memory-stores/main.default.aud", headers=token()), "allow", "memory_store.get"),
        (
            client.get(f"{UC}/memory-stores/main.default.aud", headers=token("eve")),
            "deny",
            "memory_store.get",
        ),
        (client.get(f"{UC}/memory-stores/main.default.aud"), "unauthenticated", None),
        (client.get(f"{UC}/memory-stores/main.default.nope", headers=token()), "allow", "memory_store.get"),
        (client.post(f"{UC}/catalogs", headers=token(), json={"name": "bad name"}), "allow", None),
    ]
    for response, decision, action_name in cases:
        event = event_for(client, token, response.headers["x-request-id"])
        assert event["decision"] == decision, event
        assert event["status_code"] == response.status_code
        assert event["action_name"], event
        if action_name:
            assert event["action_name"] == action_name
    denied = event_for(client, token, cases[1][0].headers["x-request-id"])
    assert denied["principal"] == "eve" and "requires" in denied["reason"]
    assert denied["securable_full_name"] == "main.default.aud" and denied["error_code"] == "PERMISSION_DENIED"
    assert event_for(client, token, cases[2][0].headers["x-request-id"])["principal"] is None


def test_no_contents_or_tokens_in_the_log(client, token, aud, database_url):
    headers = token()
    written = client.post(
        f"{UC}/memory-stores/main.default.aud/entries",
        headers=headers,
        params={"scope": "u-secret"},
        json={"path": "/s.md", "contents": SECRET, "description": SECRET},
    )
    assert written.status_code == 200, written.text
    found = client.post(
        f"{UC}/memory-stores/main.default.aud/entries:search",
        headers=headers,
        json={"scope": "u-secret", "query": SECRET, "mode": "keyword"},
    )
    assert found.status_code == 200 and len(found.json()["results"]) == 1, found.text
    # both requests are in the log, but neither the text nor the token
    for r in (written, found):
        assert event_for(client, token, r.headers["x-request-id"])["status_code"] == 200
    jwt = headers["Authorization"].split()[1]
    for needle in (SECRET, jwt[:40]):
        rows = sql(
            database_url,
            "SELECT count(*) FROM audit_events WHERE audit_events::text LIKE '%' || $1 || '%'",
            needle,
        )
        assert rows[0][0] == 0, needle


def test_read_audit_is_needed(client, token):
    assert client.get(AUDIT, headers=token("auditor")).status_code == 403
    denied = client.post(f"{UC}/catalogs", headers=token("nosy"), json={"name": "nosy_catalog"})
    assert denied.status_code == 403
    ms = client.get(f"{UC}/metastore_summary", headers=token()).json()["metastore_id"]
    r = client.patch(
        f"{UC}/permissions/metastore/{ms}",
        headers=token(),
        json={"changes": [{"principal": "auditor", "add": ["READ_AUDIT"]}]},
    )
    assert r.status_code == 200, r.text
    r = client.get(AUDIT, headers=token("auditor"), params={"principal": "nosy", "decision": "deny"})
    assert r.status_code == 200
    assert [e["request_id"] for e in r.json()["events"]] == [denied.headers["x-request-id"]]
    assert client.get(f"{AUDIT}:verify", headers=token("auditor")).json()["ok"] is True


def test_pagination_and_order(client, token):
    # a fresh database holds the first start's system events; a few requests make sure of 12
    for _ in range(12):
        assert client.get(f"{UC}/catalogs/main", headers=token()).status_code == 200
    seen, page_token = [], None
    for _ in range(3):
        params = {"page_size": 4, "order": "asc", **({"page_token": page_token} if page_token else {})}
        body = client.get(AUDIT, headers=token(), params=params).json()
        seen += [e["seq"] for e in body["events"]]
        page_token = body["next_page_token"]
    assert seen == list(range(1, 13))
    newest = client.get(AUDIT, headers=token(), params={"page_size": 2}).json()["events"]
    assert newest[0]["seq"] > newest[1]["seq"]
    assert client.get(AUDIT, headers=token(), params={"decision": "maybe"}).status_code == 400


def test_system_events_are_chained_too(client, token):
    first = client.get(AUDIT, headers=token(), params={"order": "asc", "page_size": 1}).json()["events"][0]
    assert first["seq"] == 1 and first["action_name"] == "system.migrate" and first["decision"] == "system"
    assert first["prev_hash"] == "0" * 64


def test_the_app_cannot_change_the_log(database_url):
    with pytest.raises(asyncpg.PostgresError, match="append-only"):
        sql(database_url, "UPDATE audit_events SET reason = 'x' WHERE seq = 1")
    with pytest.raises(asyncpg.PostgresError, match="append-only"):
        sql(database_url, "DELETE FROM audit_events WHERE seq = 1")


def _verify_cli(settings, database_url):  # type: ignore[no-untyped-def]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    env.update(CATALOG_DATA_DIR=str(settings.data_dir), CATALOG_DATABASE_URL=database_url)
    return subprocess.run(
        [sys.executable, "-m", "catalog", "audit", "verify"],
        env=env,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        timeout=60,
    )


def test_tampering_by_a_superuser_is_named(client, token, settings, database_url):
    ok = _verify_cli(settings, database_url)
    assert ok.returncode == 0 and ok.stdout.startswith("ok ") and ok.stdout.strip().endswith("events")

    def tamper(statement: str, *args) -> int:  # type: ignore[no-untyped-def]
        sql(database_url, "ALTER TABLE audit_events DISABLE TRIGGER audit_events_no_change")
        try:
            sql(database_url, statement, *args)
        finally:
            sql(database_url, "ALTER TABLE audit_events ENABLE TRIGGER audit_events_no_change")
        return client.get(f"{AUDIT}:verify", headers=token()).json()

    original = sql(database_url, "SELECT reason FROM audit_events WHERE seq = 5")[0][0]
    result = tamper("UPDATE audit_events SET reason = 'nothing to see' WHERE seq = 5")
    assert result["ok"] is False and result["first_broken_seq"] == 5
    broken = _verify_cli(settings, database_url)
    assert broken.returncode == 1 and "seq 5" in broken.stdout
    assert tamper("UPDATE audit_events SET reason = $1 WHERE seq = 5", original)["ok"] is True

    saved = sql(database_url, "SELECT * FROM audit_events WHERE seq = 7")[0]
    assert tamper("DELETE FROM audit_events WHERE seq = 7")["first_broken_seq"] == 7
    columns = list(saved.keys())
    placeholders = ", ".join(f"${i + 1}" for i in range(len(columns)))
    assert tamper(
        f"INSERT INTO audit_events ({', '.join(columns)}) VALUES ({placeholders})", *saved.values()
    )["ok"]

    # swap the contents of two events (keeping their numbers), then swap them back
    swap = """
        UPDATE audit_events a SET action_name = b.action_name, request_id = b.request_id
        FROM audit_events b WHERE (a.seq, b.seq) IN ((3, 4), (4, 3))
    """
    assert tamper(swap)["first_broken_seq"] == 3
    assert tamper(swap)["ok"] is True


def test_the_auditor_role_reads_the_views_and_nothing_else(client, token, database_url):
    from catalog.cli import with_role

    auditor = with_role(database_url, "catalog_auditor")
    store = create_store(client, token, "aud_lineage")
    r = client.post(
        f"{UC}/memory-stores/{store}/entries",
        headers=token(),
        params={"scope": "u"},
        json={"path": "/l.md", "contents": "one entry"},
    )
    assert r.status_code == 200, r.text
    r = client.get(f"{UC}/memory-stores/{store}/entries", headers=token(), params={"scope": "u"})
    assert r.status_code == 200 and len(r.json()["entries"]) == 1
    total = client.get(f"{AUDIT}:verify", headers=token()).json()["checked"]
    assert sql(auditor, "SELECT count(*) FROM system.audit")[0][0] >= total > 10
    lineage = sql(
        auditor,
        "SELECT direction, entry_count FROM system.lineage WHERE memory_store = $1 ORDER BY event_seq",
        store,
    )
    assert [tuple(r) for r in lineage] == [("write", 1), ("read", 1)]
    for table in ("entries", "grants", "audit_events", "group_members"):
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            sql(auditor, f"SELECT * FROM public.{table} LIMIT 1")
    with pytest.raises(asyncpg.PostgresError):
        sql(auditor, "DELETE FROM system.audit")


def test_one_chain_across_two_processes_and_a_restart(client, token, database_url, tmp_path, live_server):
    import httpx

    other = live_server(tmp_path / "second", env={"CATALOG_DATABASE_URL": database_url})
    try:
        headers = {"Authorization": f"Bearer {other.cli('token', '--sub', 'admin').stdout.strip()}"}
        for _ in range(5):
            assert httpx.get(f"{other.url}{UC}/catalogs/main", headers=headers).status_code == 200
            assert client.get(f"{UC}/catalogs/main", headers=token()).status_code == 200
    finally:
        other.stop()
    again = live_server(tmp_path / "second", env={"CATALOG_DATABASE_URL": database_url})
    try:
        headers = {"Authorization": f"Bearer {again.cli('token', '--sub', 'admin').stdout.strip()}"}
        assert httpx.get(f"{again.url}{UC}/catalogs/main", headers=headers).status_code == 200
    finally:
        again.stop()
    rows = sql(database_url, "SELECT seq FROM audit_events ORDER BY seq")
    assert [r[0] for r in rows] == list(range(1, len(rows) + 1))
    verified = client.get(f"{AUDIT}:verify", headers=token()).json()
    assert verified["ok"] is True and verified["checked"] >= len(rows)


def test_a_change_commits_with_its_event_or_not_at_all(client, token, aud, monkeypatch):
    import catalog.recorder.writer as writer

    original = writer.append_on

    async def failing(conn, events, **kw):  # type: ignore[no-untyped-def]
        if any(e.get("action_name") == "entries.write" and e.get("status_code") == 200 for e in events):
            raise RuntimeError("the audit log is unavailable")
        return await original(conn, events, **kw)

    monkeypatch.setattr(writer, "append_on", failing)
    r = client.post(
        f"{UC}/memory-stores/main.default.aud/entries",
        headers=token(),
        params={"scope": "tx"},
        json={"path": "/lost.md", "contents": "never committed"},
    )
    assert r.status_code == 500
    monkeypatch.setattr(writer, "append_on", original)
    r = client.get(
        f"{UC}/memory-stores/main.default.aud/entries:get",
        headers=token(),
        params={"scope": "tx", "path": "/lost.md"},
    )
    assert r.status_code == 404  # the change rolled back with its event
    ok = client.post(
        f"{UC}/memory-stores/main.default.aud/entries",
        headers=token(),
        params={"scope": "tx"},
        json={"path": "/kept.md", "contents": "committed"},
    )
    event = event_for(client, token, ok.headers["x-request-id"])
    assert (
        event["action_name"] == "entries.write" and event["status_code"] == 200 and event["result_count"] == 1
    )


def test_nul_characters_are_refused_and_still_audited(client, token, aud):
    """PostgreSQL text cannot hold NUL: such input is a 400 naming where it was, and its event
    (with U+FFFD in place of the NUL) is written like any other."""
    store = f"{UC}/memory-stores/main.default.aud"
    r = client.get(f"{store}/entries:get", headers=token(), params={"scope": "s\x00", "path": "/a.md"})
    assert r.status_code == 400 and "`scope`" in r.json()["message"], r.text
    event = event_for(client, token, r.headers["x-request-id"])
    # the scope is kept as its pseudonym (of "s\ufffd": the NUL replaced)
    assert event["status_code"] == 400 and event["request_params"]["scope"].startswith("ps_")
    r = client.get(f"{UC}/catalogs/ma%00in", headers=token())
    assert r.status_code == 400 and "`path`" in r.json()["message"], r.text
    assert event_for(client, token, r.headers["x-request-id"])["error_code"] == "INVALID_PARAMETER_VALUE"
    r = client.post(
        f"{store}/entries",
        headers=token(),
        params={"scope": "s"},
        json={"path": "/n.md", "contents": "a\u0000b"},
    )
    assert r.status_code == 400 and "NUL" in r.json()["message"], r.text
    assert event_for(client, token, r.headers["x-request-id"])["status_code"] == 400
    r = client.get(f"{store}/entries:get", headers=token(), params={"scope": "s", "path": "/n.md"})
    assert r.status_code == 404  # nothing was written


def test_a_batch_is_numbered_and_hashed_in_order(client, database_url):
    """The writer's batches go through `audit_append()` as one statement: consecutive seqs in the
    given order, and the database's hashes are the ones `verify` recomputes."""
    from catalog.db import create_pool
    from catalog.recorder.chain import verify
    from catalog.recorder.writer import append, complete

    async def run():  # type: ignore[no-untyped-def]
        pool = await create_pool(database_url, min_size=1, max_size=1)
        try:
            before = await pool.fetchval("SELECT coalesce(max(seq), 0) FROM audit_events")
            events = [
                complete(
                    {
                        "request_id": f"batch-{i}",
                        "action_name": "test.batch",
                        "decision": "allow",
                        "request_params": {"name": f"ü\"{i}'"},  # a parameter kept in clear
                    }
                )
                for i in range(3)
            ]
            await append(pool, events)
            return before, await pool.fetch("SELECT * FROM audit_events ORDER BY seq")
        finally:
            await pool.close()

    before, rows = asyncio.run(run())
    added = [r for r in rows if r["seq"] > before]
    assert [r["request_id"] for r in added] == ["batch-0", "batch-1", "batch-2"]
    assert [r["seq"] for r in added] == [before + 1, before + 2, before + 3]
    assert added[2]["request_params"] == {"name": "ü\"2'"}
    result = verify(rows)
    assert result.ok and result.checked == len(rows)


def test_an_agents_store_update_is_one_change_with_its_event(client, token, monkeypatch):
    """display_name and description change in one transaction, the one carrying the event."""
    import catalog.governance.namespace.service as namespace

    agents = "/api/2.0/agents/memory-stores"
    r = client.post(agents, headers=token(), params={"managed_memory_store_id": "one-change"}, json={})
    assert r.status_code == 200, r.text
    transactions = []
    original = namespace.audited

    def counting(pool):  # type: ignore[no-untyped-def]
        transactions.append(pool)
        return original(pool)

    monkeypatch.setattr(namespace, "audited", counting)
    r = client.patch(
        f"{agents}/one-change",
        headers=token(),
        params={"update_mask": "display_name,description"},
        json={"display_name": "One change", "description": "both fields"},
    )
    assert r.status_code == 200, r.text
    assert (r.json()["display_name"], r.json()["description"]) == ("One change", "both fields")
    assert len(transactions) == 1
    event = event_for(client, token, r.headers["x-request-id"])
    assert event["action_name"] == "memory_store.update" and event["status_code"] == 200


def test_a_parameter_no_one_declared_is_kept_redacted_and_named(client, database_url):
    """A new personal field under a new key is never stored in clear: what catalog.event_params
    does not declare is kept as `[redacted]`, and named for the suite to fail on."""
    from catalog import event_params
    from catalog.db import create_pool
    from catalog.recorder.writer import append, complete

    async def run():  # type: ignore[no-untyped-def]
        pool = await create_pool(database_url, min_size=1, max_size=1)
        try:
            event = complete(
                {
                    "request_id": "undeclared-1",
                    "action_name": "test.undeclared",
                    "decision": "allow",
                    "request_params": {"nickname": "Carol", "name": "kept", "scope": "carol"},
                }
            )
            await append(pool, [event])
            return await pool.fetchrow("SELECT * FROM audit_events WHERE request_id = 'undeclared-1'")
        finally:
            await pool.close()

    row = asyncio.run(run())
    params = row["request_params"]
    assert params["nickname"] == "[redacted]" and params["name"] == "kept", params
    assert params["scope"].startswith("ps_"), params
    assert event_params.undeclared() == {"nickname"}


def test_a_page_token_is_never_kept(client, token, aud):
    """A page token holds a path, a scope and a session id (base64): the log keeps none of it."""
    r = client.get(
        f"{UC}/memory-stores/main.default.aud/entries",
        headers=token(),
        params={"scope": "u", "page_token": "ImNhcm9sIg.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"},
    )
    assert r.status_code == 400 and "page_token" in r.text, r.text
    event = event_for(client, token, r.headers["x-request-id"])
    assert event["request_params"]["page_token"] == "[redacted]", event


def test_the_writers_keys_go_with_a_newer_epoch_and_when_their_time_is_up():
    now = [1000.0]
    cache = KeyCache(clock=lambda: now[0])
    assert cache.get(["alice"]) is None and cache.left() is None
    cache.hold({"alice": b"a" * 32}, 3)
    assert cache.get(["alice"]) == {"alice": b"a" * 32} and cache.left() == KeyCache.TTL
    assert cache.get(["alice", "bob"]) is None  # all of them, or none
    cache.hold({"bob": b"b" * 32}, 3)
    assert cache.get(["alice", "bob"]) == {"alice": b"a" * 32, "bob": b"b" * 32}
    cache.hold({"carol": b"c" * 32}, 4)  # read after an erasure: what was read before it goes
    assert cache.get(["alice"]) is None and cache.get(["carol"]) == {"carol": b"c" * 32}
    now[0] += KeyCache.TTL / 2
    cache.expire()
    assert cache.get(["carol"]) is not None  # not yet
    now[0] += KeyCache.TTL / 2
    cache.expire()
    assert cache.keys == {} and cache.epoch is None and cache.left() is None


def test_an_event_names_the_scopes_a_request_named_only_in_its_body(client, token):
    """A search's scopes and a write's scope sent in the body, not as parameters: the events keep
    them (pseudonyms, under `scopes`), and an auditor's `?scope=` finds each request by any."""
    store = make_store(client, token, "body-scopes")
    body = {"scope": "bsc-carol", "memory_entry": {"path": "/a.md", "contents": "kept"}}
    assert client.post(f"{store}/entries", headers=token(), json=body).status_code == 200
    search = {"scopes": ["bsc-alice", "bsc-bob:x"], "query": "kept"}
    assert client.post(f"{store}/entries:search", headers=token(), json=search).status_code == 200

    def found(scope: str) -> list[dict]:
        r = client.get(
            AUDIT, headers=token(), params={"scope": scope, "securable_full_name": "main.default.body-scopes"}
        )
        assert r.status_code == 200, r.text
        return r.json()["events"]

    (written,) = found("bsc-carol")
    assert written["action_name"] == "entries.write" and written["request_params"]["scopes"][0].startswith(
        "ps_"
    )
    for scope in ("bsc-alice", "bsc-bob:x"):
        (searched,) = found(scope)
        assert searched["action_name"] == "entries.read", searched
        assert len(searched["request_params"]["scopes"]) == 2
        assert all(p.startswith("ps_") for p in searched["request_params"]["scopes"])
    assert found("bsc-dave") == []


def test_a_scope_parameter_does_not_hide_the_scopes_a_request_reached(client, token):
    """A `?scope=` the route does not read, sent beside a search's scopes in the body: the event
    keeps the parameter as given and every scope the search reached as well, so an auditor's
    `?scope=` finds the search by the scope it read (not only by the decoy)."""
    store = make_store(client, token, "decoy-scopes")
    body = {"scope": "dcy-alice", "memory_entry": {"path": "/a.md", "contents": "kept"}}
    assert client.post(f"{store}/entries", headers=token(), json=body).status_code == 200
    search = {"scopes": ["dcy-alice"], "query": "kept"}
    r = client.post(f"{store}/entries:search", headers=token(), params={"scope": "dcy-decoy"}, json=search)
    assert r.status_code == 200 and len(r.json()["results"]) == 1

    def searches(scope: str) -> list[dict]:
        params = {"scope": scope, "securable_full_name": "main.default.decoy-scopes"}
        r = client.get(AUDIT, headers=token(), params=params)
        assert r.status_code == 200, r.text
        return [e for e in r.json()["events"] if e["action_name"] == "entries.read"]

    (by_scope_read,) = searches("dcy-alice")
    (by_decoy,) = searches("dcy-decoy")
    assert by_scope_read["request_id"] == by_decoy["request_id"]
    kept = by_scope_read["request_params"]
    assert kept["scope"].startswith("ps_") and len(kept["scopes"]) == 1
    assert kept["scopes"][0].startswith("ps_")
    assert kept["scope"] != kept["scopes"][0]  # two subjects, two pseudonyms


def test_an_erasure_of_a_scope_is_found_by_the_scope(client, token):
    """`erase-scope` names its scope in the body: its event names it too (a pseudonym), so an
    auditor asking for the scope's events finds its erasure."""
    store = make_store(client, token, "erased-scope")
    body = {"scope": "ers-gone", "memory_entry": {"path": "/a.md", "contents": "soon gone"}}
    assert client.post(f"{store}/entries", headers=token(), json=body).status_code == 200
    r = client.post(f"{UC}/system/erase-scope", headers=token(), json={"scope": "ers-gone"})
    assert r.status_code == 200, r.text
    r = client.get(AUDIT, headers=token(), params={"scope": "ers-gone"})
    assert r.status_code == 200, r.text
    actions = [e["action_name"] for e in r.json()["events"]]
    assert actions.count("system.erase_scope") == 1 and actions.count("entries.write") == 1


@contextlib.asynccontextmanager
async def _writer(database_url: str):  # type: ignore[no-untyped-def]
    """An audit writer on a pool of its own, and a pool with the server's codecs for the rest."""
    from catalog.db import create_pool
    from catalog.recorder.writer import AuditWriter

    writer = AuditWriter(await create_pool(database_url, min_size=1, max_size=1))
    writer.start()
    others = await create_pool(database_url, min_size=1, max_size=2)
    try:
        yield writer, others
    finally:
        await writer.close()
        await others.close()


@contextlib.asynccontextmanager
async def _behind_the_chain(writer, others, event: dict[str, object]):  # type: ignore[no-untyped-def]
    """The writer records `event` while another transaction holds the chain's lock: the event
    waits until the block ends (the lock let go), then it is appended."""
    from catalog.db import locks

    async with others.acquire() as holder, holder.transaction():
        await holder.execute("SELECT pg_advisory_xact_lock($1)", locks.AUDIT_CHAIN)
        waiting = asyncio.ensure_future(writer.record(**event))
        await asyncio.sleep(0.3)
        assert not waiting.done()  # waiting for the lock
        yield
    await asyncio.wait_for(waiting, 10)


def _event(request_id: str, **params: str) -> dict[str, object]:
    return {
        "request_id": request_id,
        "action_name": "test.read",
        "decision": "allow",
        "request_params": dict(params),
    }


def test_a_batch_that_finds_the_chain_held_is_sent_as_a_changes_event_is(database_url):
    """A reads' batch asks for the chain's lock without waiting: while it is free the batch is one
    statement; found held (another process appending), the batch waits in a change's message (its
    lock let go before the flush), and so do the batches after it for a while, without asking
    first. Every event is appended once, in order, and the chain verifies."""
    from catalog.recorder.chain import verify
    from catalog.telemetry.seams import AUDIT_CHAIN_HELD

    def counted() -> float:  # catalog_audit_chain_held_total, as /metrics renders it
        return AUDIT_CHAIN_HELD.family().samples[0].value

    before = counted()

    async def run():  # type: ignore[no-untyped-def]
        async with _writer(database_url) as (writer, others):
            await writer.record(**_event("contended-free"))
            assert writer.contention.found_held == 0 and not writer.contention.lately
            async with _behind_the_chain(writer, others, _event("contended-held")):
                assert writer.contention.found_held == 1 and writer.contention.lately
            await writer.record(**_event("contended-after"))  # straight to the message: no second finding
            assert writer.contention.found_held == 1
            return await others.fetch("SELECT * FROM audit_events ORDER BY seq")

    rows = asyncio.run(run())
    mine = [r["request_id"] for r in rows if r["request_id"].startswith("contended-")]
    assert mine == ["contended-free", "contended-held", "contended-after"]
    assert verify(rows).ok
    assert counted() == before + 1


def test_a_key_erased_while_a_batch_waits_for_the_chain_is_not_used(database_url):
    """A batch sent as a change's message checks, under the chain's lock, that no key it was keyed
    with was erased since: a subject erased while the batch waited gets its events keyed again
    (with its new key), never appended with the erased one."""
    from catalog.recorder import repo
    from catalog.recorder.chain import verify
    from catalog.recorder.pseudonyms import subject_of

    scope = "zqwaits:notes"

    async def run():  # type: ignore[no-untyped-def]
        async with _writer(database_url) as (writer, others):
            await writer.record(**_event("erased-first", scope=scope))  # its key held by the writer
            writer.contention.held()  # other processes appending lately: batches go as changes' do
            erased_second = _event("erased-second", scope=scope)
            async with _behind_the_chain(writer, others, erased_second), others.acquire() as eraser:
                assert await repo.delete_subject_key(eraser, subject_of(scope))
            return await others.fetch("SELECT * FROM audit_events ORDER BY seq")

    rows = asyncio.run(run())
    first, second = (next(r for r in rows if r["request_id"] == f"erased-{n}") for n in ("first", "second"))
    assert first["request_params"]["scope"].startswith("ps_")
    assert second["request_params"]["scope"].startswith("ps_")
    assert second["request_params"]["scope"] != first["request_params"]["scope"]  # keyed anew
    assert verify(rows).ok
