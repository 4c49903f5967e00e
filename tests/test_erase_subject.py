"""Erasing a data subject: the scope `subject` and every scope `subject:...`, in every store, with
history, conversations, sessions and lineage; afterwards no table holds the subject's scopes or
paths in clear text, the audit chain verifies and auditors' searches by its scopes find nothing.
A store under legal hold keeps what it holds, and then the subject's audit key is kept too."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
from stores import make_store

UC = "/api/2.1/unity-catalog"
SUBJECT = "zqsubj"
SECRET = "zq-path"


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


def test_erasing_a_subject_leaves_nothing_that_names_it(client, token, settings):
    a = make_store(client, token, "es-a")
    b = make_store(client, token, "es-b")
    write(client, token, a, SUBJECT, f"/{SECRET}-1.md", "first")
    r = client.patch(
        f"{a}/entries",
        headers=token(),
        json={"scope": SUBJECT, "path": f"/{SECRET}-1.md", "append": {"text": "second"}},
    )
    assert r.status_code == 200, r.text  # history: two versions
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
    sessions = "/api/2.0/agents/session-stores"
    assert (
        client.post(
            sessions, headers=token(), params={"session_store_name": "es-sessions"}, json={}
        ).status_code
        == 200
    )
    r = client.post(
        f"{sessions}/es-sessions/sessions",
        headers=token(),
        params={"session_id": "s1"},
        json={"actor_id": SUBJECT},
    )
    assert r.status_code == 200, r.text
    r = client.post(
        f"{sessions}/es-sessions/sessions/s1/items:append",
        headers=token(),
        json={"items": [{"data": {"role": "user", "content": f"the {SECRET} again"}}]},
    )
    assert r.status_code == 200, r.text
    r = client.get(f"{a}/entries:get", headers=token(), params={"scope": SUBJECT, "path": f"/{SECRET}-1.md"})
    assert r.status_code == 200
    client.post(
        f"{b}/entries:search",
        headers=token(),
        json={"scopes": [f"{SUBJECT}:proj", "zqsub"], "query": "notes"},
    )

    # before: the events are found by scope, and hold pseudonyms, never the scope or path itself
    events = audit(client, token, SUBJECT)
    assert events and all(SUBJECT not in str(e) and SECRET not in str(e) for e in events)
    assert audit(client, token, f"{SUBJECT}:proj")

    before = asyncio.run(tables_holding(settings.database_url, [SUBJECT, SECRET]))
    assert {"public.entries.scope", "public.entry_versions.path", "public.transcript_items.contents"} <= set(
        before
    )
    assert not any(place.startswith("public.audit_events") for place in before)  # pseudonyms only

    r = client.post(f"{UC}/system/erase-subject", headers=token("someone"), json={"subject": SUBJECT})
    assert r.status_code == 403
    r = client.post(f"{UC}/system/erase-subject", headers=token(), json={"subject": f"{SUBJECT}:proj"})
    assert r.status_code == 400 and "subject" in r.json()["message"]
    r = client.post(f"{UC}/system/erase-subject", headers=token(), json={"subject": SUBJECT})
    assert r.status_code == 200, r.text
    assert r.json() == {
        "subject": SUBJECT,
        "erased": {"main.default.es-a": 1, "main.default.es-b": 1},
        "held": [],
        "also_deleted": {"conversations": 1, "sessions": 1},
        "audit_key_destroyed": True,
    }

    assert asyncio.run(tables_holding(settings.database_url, [SUBJECT, SECRET])) == []
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


def test_a_filter_in_an_event_without_a_scope_is_not_kept(client, token):
    """A filter that reaches the audit log with no scope to key it by (a refused request) is
    kept as `[redacted]`, never in clear text."""
    store = make_store(client, token, "es-nofilter")
    r = client.get(f"{store}/entries", headers=token(), params={"filter": json.dumps({"owner": "zqnobody"})})
    assert r.status_code == 400  # no scope
    r = client.get(f"{UC}/system/audit", headers=token(), params={"page_size": 1})
    event = r.json()["events"][0]
    assert event["request_params"]["filter"] == "[redacted]", event
