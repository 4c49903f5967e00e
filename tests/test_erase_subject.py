"""Erasing a data subject: the scope `subject` and every scope `subject:...`, in every store, with
history, conversations, sessions and lineage, and everywhere else that names its scopes: the scope
patterns of grants limited to scopes (a grant left with none is revoked) and the policy log's
history of them, the stores' shared scopes, and the reports and errors of memory pipelines' runs.
Afterwards no table holds the subject's scopes or paths in clear text, nor does a store's export;
the policy log replays to the grants there are; the audit chain verifies and auditors' searches by
its scopes find nothing. Audit events hold every scope and path (a tool call's `by` too, and the
scopes and patterns a reason names) as pseudonyms from the start. A store under legal hold keeps
what it holds, and then the subject's audit key is kept too. What stays in PostgreSQL's files
until `VACUUM FULL` is measured, as docs/audit/erasure.md states it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import pytest
from rest import UC
from scripted_llm import Call, Fail, Reply
from stores import make_store

from catalog.access import repo as policy_repo
from catalog.access.policy import PolicyState
from catalog.recorder import repo as recorder_repo
from catalog.settings import Settings

AGENTS = "/api/2.0/agents"
SUBJECT = "zqsubj"
SECRET = "zq-path"
DEADLINE = 90.0  # seconds a pipeline run may take before the test gives up (no timing is asserted)


@pytest.fixture(scope="module")
def settings(database_url, data_dir, llm) -> Settings:
    """The module's app, with the scripted upstream model (a memory pipeline's runs)."""
    return Settings(
        data_dir=data_dir,
        database_url=database_url,
        admin="admin",
        page_default=5,
        page_cap=20,
        llm_base_url=llm.url,
        llm_max_retries=0,
    )


def write(client, token, store: str, scope: str, path: str, contents: str, **extra) -> None:
    r = client.post(
        f"{store}/entries",
        headers=token(),
        params={"scope": scope},
        json={"path": path, "contents": contents, **extra},
    )
    assert r.status_code == 200, r.text


def audit(client, token, scope: str) -> list[dict]:
    r = client.get(f"{UC}/system/audit", headers=token(), params={"scope": scope, "page_size": 200})
    assert r.status_code == 200, r.text
    return r.json()["events"]


async def tables_holding(url: str, needles: list[str]) -> list[str]:
    """`table.column` of every row of every table whose text holds one of the needles."""
    conn = await asyncpg.connect(url)
    try:
        columns = await conn.fetch(
            "SELECT c.table_schema, c.table_name, c.column_name FROM information_schema.columns c "
            "JOIN information_schema.tables t "
            "ON t.table_schema = c.table_schema AND t.table_name = c.table_name "
            "WHERE c.table_schema IN ('public', 'system') "
            "AND c.data_type IN ('text', 'character varying', 'jsonb', 'json', 'ARRAY')"
        )
        found = []
        for row in columns:
            name = f'"{row["table_schema"]}"."{row["table_name"]}"'
            condition = " OR ".join(
                f"\"{row['column_name']}\"::text LIKE '%' || ${i + 1} || '%'" for i in range(len(needles))
            )
            if await conn.fetchval(f"SELECT count(*) FROM {name} WHERE {condition}", *needles):
                found.append(f"{row['table_schema']}.{row['table_name']}.{row['column_name']}")
        return found
    finally:
        await conn.close()


def change_grants(client, token, kind: str, name: str, *changes: dict) -> None:
    r = client.patch(f"{UC}/permissions/{kind}/{name}", headers=token(), json={"changes": list(changes)})
    assert r.status_code == 200, r.text


def grants_on(client, token, kind: str, name: str) -> dict[str, dict]:
    r = client.get(f"{UC}/permissions/{kind}/{name}", headers=token(), params={"max_results": 20})
    assert r.status_code == 200, r.text
    return {a["principal"]: a for a in r.json()["privilege_assignments"]}


def exported(client, token, store: str) -> str:
    r = client.get(f"{store}/export", headers=token())
    assert r.status_code == 200, r.text
    return r.text


def read_as(client, token, who: str, store: str, scope: str, path: str):  # type: ignore[no-untyped-def]
    return client.get(f"{store}/entries:get", headers=token(who), params={"scope": scope, "path": path})


def session(client, token, session_id: str, actor: str, text: str) -> None:
    stores = f"{AGENTS}/session-stores"
    r = client.post(
        f"{stores}/es-sessions/sessions",
        headers=token(),
        params={"session_id": session_id},
        json={"actor_id": actor},
    )
    assert r.status_code == 200, r.text
    r = client.post(
        f"{stores}/es-sessions/sessions/{session_id}/items:append",
        headers=token(),
        json={"items": [{"data": {"role": "user", "content": text}}]},
    )
    assert r.status_code == 200, r.text


def run_with_maintenance(client, token, llm) -> tuple[str, dict]:
    """A memory pipeline from es-sessions into es-a, run once with its maintenance step: both
    sessions are extracted (nothing to save), the subject's memories are reviewed (the old city is
    superseded by the new one), and the review of its project scope fails upstream. (The run's
    name, the run as answered.)"""
    llm.reset()
    llm.script(
        Reply("nothing to extract"),  # session s1
        Reply("nothing to extract"),  # session s2
        Call("supersede_memory", {"path": f"/{SECRET}-old.md", "by": f"/{SECRET}-new.md"}),
        Reply("superseded the old city"),
        Fail(500, "upstream exploded"),  # the review of zqsubj:proj
    )
    body = {
        "session_store": "es-sessions",
        "memory_store": "es-a",
        "dreamer_policy": {"model": "distiller", "maintain": True},
    }
    r = client.post(f"{AGENTS}/memory-pipelines", headers=token(), json=body)
    assert r.status_code == 200, r.text
    r = client.post(f"{AGENTS}/{r.json()['name']}/run", headers=token(), json={})
    assert r.status_code == 200, r.text
    name = r.json()["name"]
    deadline = time.monotonic() + DEADLINE
    while True:
        got = client.get(f"{AGENTS}/{name}", headers=token()).json()
        if got.get("state") in ("SUCCEEDED", "FAILED"):
            return name, got
        assert time.monotonic() < deadline, (got, llm.requests)
        time.sleep(0.1)


async def policy_replayed(url: str) -> tuple[PolicyState, PolicyState]:
    """The policy loaded from the tables, and the policy replayed from the whole `policy_log`."""
    pool = await asyncpg.create_pool(url, min_size=1, max_size=1)
    try:
        loaded, replayed = PolicyState(), PolicyState()
        for row in (await policy_repo.load_policy(pool)).grants:
            loaded.apply("grant", "add", row[0], row[1], row[2], row[3])
        for row in await policy_repo.policy_changes(pool, 0, 1_000_000):
            replayed.apply(row["kind"], row["op"], row["a"], row["b"], row["c"], row["d"])
        return loaded, replayed
    finally:
        await pool.close()


def test_erasing_a_subject_leaves_nothing_that_names_it(client, token, settings, llm):
    a = make_store(client, token, "es-a")
    b = make_store(client, token, "es-b")
    write(client, token, a, SUBJECT, f"/{SECRET}-1.md", "first")
    r = client.patch(
        f"{a}/entries",
        headers=token(),
        json={"scope": SUBJECT, "path": f"/{SECRET}-1.md", "append": {"text": "second"}},
    )
    assert r.status_code == 200, r.text  # history: two versions
    write(client, token, a, SUBJECT, f"/{SECRET}-old.md", "lives in Paris")
    write(client, token, a, SUBJECT, f"/{SECRET}-new.md", "moved to Berlin in May")
    write(client, token, a, f"{SUBJECT}:proj", f"/{SECRET}-plan.md", "the project's plan")
    write(client, token, b, f"{SUBJECT}:proj", f"/{SECRET}-2.md", "project notes")
    # another subject whose name is a prefix of this one stays, with an edge from the erased entry
    write(
        client,
        token,
        a,
        "zqsub",
        "/keep.md",
        "kept",
        derived_from=[{"memory_store": "main.default.es-a", "scope": SUBJECT, "path": f"/{SECRET}-1.md"}],
    )
    conversation = client.post(
        "/v1/conversations",
        headers=token(),
        json={
            "memory_store": {"name": "main.default.es-b"},
            "scope": {"kind": "user", "value": f"{SUBJECT}:proj"},
            "items": [{"role": "user", "content": f"my {SECRET} is private"}],
        },
    )
    assert conversation.status_code == 200, conversation.text
    r = client.post(
        f"{AGENTS}/session-stores", headers=token(), params={"session_store_name": "es-sessions"}, json={}
    )
    assert r.status_code == 200, r.text
    session(client, token, "s1", SUBJECT, f"the {SECRET} again")
    session(client, token, "s2", f"{SUBJECT}:proj", "about the project")
    r = client.get(f"{a}/entries:get", headers=token(), params={"scope": SUBJECT, "path": f"/{SECRET}-1.md"})
    assert r.status_code == 200
    client.post(
        f"{b}/entries:search",
        headers=token(),
        json={"scopes": [f"{SUBJECT}:proj", "zqsub"], "query": "notes"},
    )
    # grants limited to the subject's scopes (on the store, and on the schema above it), and one
    # that also names another subject's scope and a prefix of several subjects (`zqsub*`)
    change_grants(
        client,
        token,
        "memory_store",
        "main.default.es-a",
        {"principal": "es-reader", "add": ["READ_MEMORY_STORE"], "scopes": [SUBJECT, f"{SUBJECT}:*"]},
        {
            "principal": "es-mixed",
            "add": ["READ_MEMORY_STORE"],
            "scopes": [f"{SUBJECT}:proj", "zqsub", "zqsub*"],
        },
    )
    change_grants(
        client,
        token,
        "schema",
        "main.default",
        {"principal": "es-reader", "add": ["USE_SCHEMA"]},
        {"principal": "es-mixed", "add": ["USE_SCHEMA"]},
        {"principal": "es-writer", "add": ["USE_SCHEMA"]},
        {"principal": "es-writer", "add": ["WRITE_MEMORY_STORE"], "scopes": [f"{SUBJECT}:*"]},
    )
    change_grants(
        client,
        token,
        "catalog",
        "main",
        {"principal": "es-reader", "add": ["USE_CATALOG"]},
        {"principal": "es-mixed", "add": ["USE_CATALOG"]},
        {"principal": "es-writer", "add": ["USE_CATALOG"]},
    )
    r = client.patch(
        f"{UC}/memory-stores/main.default.es-a",
        headers=token(),
        json={"shared_scopes": [f"{SUBJECT}:team", "team-es"]},
    )
    assert r.status_code == 200, r.text
    # reads through the limited grants: their events' reasons name the patterns and the scopes
    assert read_as(client, token, "es-reader", a, SUBJECT, f"/{SECRET}-1.md").status_code == 200
    refused = read_as(client, token, "es-reader", a, "zqsub", "/keep.md")
    assert refused.status_code == 403 and f"{SUBJECT}:*" in refused.json()["message"], refused.text
    assert read_as(client, token, "es-mixed", a, "zqsub", "/keep.md").status_code == 200
    # a limited grant never allows what reaches every scope: the refusal names its patterns
    body = {"session_store": "es-sessions", "memory_store": "es-a"}
    refused = client.post(f"{AGENTS}/memory-pipelines", headers=token("es-writer"), json=body)
    assert refused.status_code == 403 and f"{SUBJECT}:*" in refused.json()["message"], refused.text
    run_name, run = run_with_maintenance(client, token, llm)
    report = run.get("maintenance") or {}
    assert (run["state"], report.get("superseded"), report.get("failed_scopes")) == ("SUCCEEDED", 1, 1), (
        run,
        llm.requests,
    )
    assert report["actions"] == [
        {
            "scope": SUBJECT,
            "action": "superseded",
            "sources": [f"/{SECRET}-old.md"],
            "into": f"/{SECRET}-new.md",
        }
    ]
    assert report["error"].startswith(f"scope {SUBJECT}:proj: ")

    # before: the events are found by scope, and hold pseudonyms, never the scope or path itself:
    # the tool call's `by`, the reasons naming grants' patterns and the step's failed scope too
    events = audit(client, token, SUBJECT)
    assert events and all(SUBJECT not in str(e) and SECRET not in str(e) for e in events)
    proj = audit(client, token, f"{SUBJECT}:proj")
    maintained = [e for e in proj if e["request_params"].get("phase") == "maintain"]
    assert len(maintained) == 1 and maintained[0]["reason"].startswith("scope ps_"), proj
    r = client.get(
        f"{UC}/system/audit",
        headers=token(),
        params={"securable_full_name": "main.default.es-a", "page_size": 500},
    )
    by_tool = [e for e in r.json()["events"] if e["request_params"].get("tool") == "supersede_memory"]
    assert len(by_tool) == 1, by_tool
    kept = by_tool[0]["request_params"]
    assert kept["step"] == "maintenance" and kept["by"].startswith("ps_") and kept["path"].startswith("ps_")
    assert kept["by"] != kept["path"]
    r = client.get(f"{UC}/system/audit", headers=token(), params={"principal": "es-reader"})
    reasons = [e["reason"] for e in r.json()["events"] if e["action_name"] == "entries.read"]
    assert len(reasons) == 2 and all("for scopes ps_" in reason for reason in reasons), reasons
    r = client.get(f"{UC}/system/audit", headers=token(), params={"principal": "es-writer"})
    (created,) = [e for e in r.json()["events"] if e["action_name"] == "pipelines.create"]
    assert created["reason"].endswith("; this reaches every scope") and "for scopes ps_" in created["reason"]

    before = asyncio.run(tables_holding(settings.database_url, [SUBJECT, SECRET]))
    assert {
        "public.entries.scope",
        "public.entry_versions.path",
        "public.transcript_items.contents",
        "public.grants.scopes",
        "public.policy_log.d",
        "public.memory_stores.shared_scopes",
        "public.pipeline_runs.reports",
    } <= set(before), before
    assert not any(place.startswith("public.audit_events") for place in before)  # pseudonyms only
    assert SUBJECT in exported(client, token, a)

    r = client.post(f"{UC}/system/erase-subject", headers=token("someone"), json={"subject": SUBJECT})
    assert r.status_code == 403
    r = client.post(f"{UC}/system/erase-subject", headers=token(), json={"subject": f"{SUBJECT}:proj"})
    assert r.status_code == 400 and "subject" in r.json()["message"]
    r = client.post(f"{UC}/system/erase-subject", headers=token(), json={"subject": SUBJECT})
    assert r.status_code == 200, r.text
    assert r.json() == {
        "subject": SUBJECT,
        "erased": {"main.default.es-a": 4, "main.default.es-b": 1},
        "held": [],
        "also_deleted": {"conversations": 1, "sessions": 2},
        "audit_key_destroyed": True,
    }

    assert asyncio.run(tables_holding(settings.database_url, [SUBJECT, SECRET])) == []
    archive = exported(client, token, a)
    assert SUBJECT not in archive and SECRET not in archive
    # the grants: one left with no pattern is revoked (not widened to every scope), one keeps the
    # patterns of others; and every process applies it (the policy log replays to the tables)
    on_store = grants_on(client, token, "memory_store", "main.default.es-a")
    assert "es-reader" not in on_store
    assert on_store["es-mixed"]["scopes"] == {"READ_MEMORY_STORE": ["zqsub", "zqsub*"]}
    assert grants_on(client, token, "schema", "main.default")["es-writer"]["privileges"] == ["USE_SCHEMA"]
    refused = read_as(client, token, "es-reader", a, "zqsub", "/keep.md")
    assert refused.status_code == 403 and "requires READ_MEMORY_STORE" in refused.json()["message"], (
        refused.text
    )
    assert read_as(client, token, "es-mixed", a, "zqsub", "/keep.md").status_code == 200
    loaded, replayed = asyncio.run(policy_replayed(settings.database_url))
    assert (replayed.grants, replayed.grant_scopes) == (loaded.grants, loaded.grant_scopes)
    r = client.get(f"{UC}/memory-stores/main.default.es-a", headers=token())
    assert r.json()["shared_scopes"] == ["team-es"]
    # the run's report keeps its counts; the actions in the subject's scopes and its error go
    report = client.get(f"{AGENTS}/{run_name}", headers=token()).json()["maintenance"]
    assert (report["superseded"], report["failed_scopes"], report["actions"]) == (1, 1, [])
    assert report["error"] == "[erased]"

    assert client.get(f"{UC}/system/audit:verify", headers=token()).json()["ok"] is True
    env = {k: v for k, v in os.environ.items() if not k.startswith("CATALOG_")}
    env.update(CATALOG_DATA_DIR=str(settings.data_dir), CATALOG_DATABASE_URL=settings.database_url)
    verified = subprocess.run(  # and `catalog audit verify`, on the database itself
        [sys.executable, "-m", "catalog", "audit", "verify"],
        env=env,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        timeout=120,
    )
    assert verified.returncode == 0 and verified.stdout.startswith("ok "), verified.stdout + verified.stderr
    assert audit(client, token, SUBJECT) == [] and audit(client, token, f"{SUBJECT}:proj") == []
    r = client.get(f"{a}/entries:get", headers=token(), params={"scope": "zqsub", "path": "/keep.md"})
    assert r.status_code == 200  # the other subject's entry stays
    assert audit(client, token, "zqsub")  # and its events are still found


def test_a_held_store_keeps_the_subject_and_its_audit_key(client, token):
    held = make_store(client, token, "es-held")
    free = make_store(client, token, "es-free")
    for store in (held, free):
        write(client, token, store, "zqh:case", "/evidence.md", "kept for the court")
    assert (
        client.patch(
            f"{UC}/memory-stores/main.default.es-held", headers=token(), json={"legal_hold": True}
        ).status_code
        == 200
    )
    r = client.post(f"{UC}/system/erase-subject", headers=token(), json={"subject": "zqh"})
    assert r.status_code == 200, r.text
    assert r.json()["held"] == ["main.default.es-held"] and r.json()["erased"] == {"main.default.es-free": 1}
    assert r.json()["audit_key_destroyed"] is False
    r = client.get(
        f"{held}/entries:get", headers=token(), params={"scope": "zqh:case", "path": "/evidence.md"}
    )
    assert r.status_code == 200
    assert audit(client, token, "zqh:case")  # still found by auditors while the hold keeps the data


async def _count(url: str, sql: str) -> int:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval(sql))
    finally:
        await conn.close()


def test_every_form_of_a_scope_or_a_filter_in_the_audit_log_goes_with_its_subject(client, token, settings):
    """Scopes given once in `scopes`, several `scopes`, an actor id, a metadata filter naming the
    subject: none is kept in clear text in the audit log, nor is the subject in the key table;
    after the erasure an auditor looking for the subject leaves nothing that names it."""
    subject = "zqforms"
    store = make_store(client, token, "es-forms")
    write(client, token, store, subject, "/profile.md", "likes tea", metadata={"owner": subject})
    write(client, token, store, f"{subject}:work", "/desk.md", "standing desk")
    queries = [
        {"scopes": subject},  # given once: a string in the event, not a list
        [("scopes", subject), ("scopes", f"{subject}:work")],
        {"scopes": f"{subject}:work,{subject}:home"},  # one scope with a comma in it
        {"scope": subject, "filter": json.dumps({"owner": subject})},
        {"scopes": subject, "filter": json.dumps({"owner": subject})},
    ]
    for params in queries:
        r = client.get(f"{store}/entries", headers=token(), params=params)
        assert r.status_code == 200, r.text
    r = client.get(
        "/api/2.0/agents/memory-stores/es-forms/entries", headers=token(), params={"actor_id": subject}
    )
    assert r.status_code == 200, r.text
    r = client.get(f"{UC}/system/audit", headers=token(), params={"scope": f"{subject}:work"})
    assert r.status_code == 200 and r.json()["events"], r.text

    before = asyncio.run(tables_holding(settings.database_url, [subject]))
    assert "public.entries.scope" in before
    assert not any(place.startswith(("public.audit_events", "public.subject_keys")) for place in before), (
        before
    )

    r = client.post(f"{UC}/system/erase-subject", headers=token(), json={"subject": subject})
    assert r.status_code == 200, r.text
    assert r.json()["audit_key_destroyed"] is True
    keys = asyncio.run(_count(settings.database_url, "SELECT count(*) FROM subject_keys"))
    # an auditor looks for the erased subject: nothing is found, and the search creates no key
    for scope in (subject, f"{subject}:work"):
        assert audit(client, token, scope) == []
    assert asyncio.run(_count(settings.database_url, "SELECT count(*) FROM subject_keys")) == keys
    assert asyncio.run(tables_holding(settings.database_url, [subject])) == []
    assert client.get(f"{UC}/system/audit:verify", headers=token()).json()["ok"] is True


def test_a_filter_or_a_path_in_an_event_without_a_scope_is_not_kept(client, token):
    """A filter or a path that reaches the audit log with no scope to key it by (a refused
    request) is kept as `[redacted]`, never in clear text."""
    store = make_store(client, token, "es-nofilter")
    r = client.get(f"{store}/entries", headers=token(), params={"filter": json.dumps({"owner": "zqnobody"})})
    assert r.status_code == 400  # no scope
    r = client.get(f"{UC}/system/audit", headers=token(), params={"page_size": 1})
    event = r.json()["events"][0]
    assert event["request_params"]["filter"] == "[redacted]", event
    r = client.get(f"{store}/entries:get", headers=token(), params={"path": "/zqnobody.md"})
    assert r.status_code == 400  # no scope
    r = client.get(f"{UC}/system/audit", headers=token(), params={"page_size": 1})
    event = r.json()["events"][0]
    assert event["request_params"]["path"] == "[redacted]", event


async def _sql(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


async def _keys(url: str) -> set[bytes]:
    conn = await asyncpg.connect(url)
    try:
        return {bytes(row[0]) for row in await conn.fetch("SELECT key FROM subject_keys")}
    finally:
        await conn.close()


async def files_holding(url: str, needles: list[bytes]) -> list[str]:
    """The relations of the database (tables, TOAST, indexes, system catalogs) whose files hold
    one of the needles, once a checkpoint wrote every page; skips the test when the database's
    files are not on this machine, or it may not read where they are."""
    conn = await asyncpg.connect(url)
    try:
        try:
            await conn.execute("CHECKPOINT")
            data = Path(await conn.fetchval("SHOW data_directory"))
        except asyncpg.InsufficientPrivilegeError:
            pytest.skip("reading the database's files needs a superuser")
        oid = await conn.fetchval("SELECT oid FROM pg_database WHERE datname = current_database()")
        folder = data / "base" / str(oid)
        if not folder.is_dir():
            pytest.skip("the database's files are not on this machine")
        names = {
            Path(row["path"]).name: row["relname"]
            for row in await conn.fetch(
                "SELECT relname, pg_relation_filepath(oid) AS path FROM pg_class "
                "WHERE pg_relation_filepath(oid) IS NOT NULL"
            )
        }
    finally:
        await conn.close()
    found = set()
    for file in folder.iterdir():
        if file.is_file() and any(needle in file.read_bytes() for needle in needles):
            # a relation's files: its node, then `.1`, `.2`... and `_fsm`, `_vm`
            found.add(names.get(file.name.split(".")[0].split("_")[0], file.name))
    return sorted(found)


def test_what_an_erasure_leaves_in_the_files_until_vacuum_full(own_client, own_token, own_settings):
    """An erasure deletes rows; PostgreSQL leaves their bytes in the files (the tables, their
    indexes, the planner's statistics, the destroyed audit key) until the space is reused or the
    files are rewritten. What docs/audit/erasure.md says to run, `ANALYZE` then `VACUUM FULL`,
    leaves no file of the database holding the subject's scopes or paths, or its audit key."""
    client, token, url = own_client, own_token, own_settings.database_url
    store = make_store(client, token, "es-files")
    write(client, token, store, "zqfiles", "/zqfiles-diary.md", "zqfiles wrote this, " + "long " * 2000)
    r = client.patch(
        f"{store}/entries",
        headers=token(),
        json={"scope": "zqfiles", "path": "/zqfiles-diary.md", "append": {"text": "and this"}},
    )
    assert r.status_code == 200, r.text
    write(client, token, store, "zqfiles:work", "/zqfiles-desk.md", "a standing desk")
    for i in range(50):  # the pages hold other rows, which stay
        write(client, token, store, f"other-{i % 5}", f"/note-{i}.md", f"note {i}")
    asyncio.run(_sql(url, "ANALYZE"))  # the statistics sample the scopes, as autovacuum's do
    keys = asyncio.run(_keys(url))
    r = client.post(f"{UC}/system/erase-subject", headers=token(), json={"subject": "zqfiles"})
    assert r.status_code == 200 and r.json()["audit_key_destroyed"] is True, r.text
    destroyed = keys - asyncio.run(_keys(url))
    assert len(destroyed) == 1
    needles = [b"zqfiles", *destroyed]

    left = asyncio.run(files_holding(url, needles))
    assert "entries" in left, left  # deleted rows stay in the files: what the scan here looks for
    asyncio.run(_sql(url, "ANALYZE", "VACUUM FULL"))
    assert asyncio.run(files_holding(url, needles)) == []


def test_the_audit_writer_keys_from_memory_until_the_key_is_erased(client, token, monkeypatch):
    """A read's or a search's event finds its subject's key without a statement once the audit
    writer has used it; erasing the subject moves the keys' epoch on in the database, so the
    writer's next append with the erased key is refused and its events are keyed again: they get
    the subject's new key, never the erased one."""
    store = make_store(client, token, "es-keys")
    subject = "zqkeys"
    read: list[list[str]] = []
    create_keys = recorder_repo.create_keys

    async def counted(conn, subjects, fresh):  # type: ignore[no-untyped-def]
        read.append(list(subjects))
        return await create_keys(conn, subjects, fresh)

    monkeypatch.setattr(recorder_repo, "create_keys", counted)
    write(client, token, store, subject, "/a.md", "alpha beta")

    def search() -> None:
        r = client.post(f"{store}/entries:search", headers=token(), json={"scope": subject, "query": "alpha"})
        assert r.status_code == 200, r.text

    for _ in range(3):
        search()
    # read in the write's own transaction (a change), then by the writer for the first search: the
    # two searches after it found the key in memory
    assert [s for s in read if subject in s] == [[subject], [subject]]
    # the searches name their scope in the body: their events keep it (a pseudonym) all the same
    events = audit(client, token, subject)
    searched = [e["request_params"]["scopes"] for e in events if e["action_name"] == "entries.read"]
    assert len(searched) == 3 and all(len(s) == 1 for s in searched), events
    (written,) = [e["request_params"]["scope"] for e in events if e["action_name"] == "entries.write"]
    (erased,) = {s[0] for s in searched} | {written}  # the key read and the key held agree

    r = client.post(f"{UC}/system/erase-subject", headers=token(), json={"subject": subject})
    assert r.status_code == 200 and r.json()["audit_key_destroyed"] is True, r.text
    search()  # the writer still holds the erased key: its append is refused, the event keyed anew
    assert [s for s in read if subject in s] == [[subject], [subject], [subject]]
    after = audit(client, token, subject)  # found with the subject's new key
    assert [e["action_name"] for e in after] == ["entries.read"], after
    (kept,) = after[0]["request_params"]["scopes"]
    assert kept.startswith("ps_") and kept != erased
    assert client.get(f"{UC}/system/audit:verify", headers=token()).json()["ok"] is True
