"""Transcripts as episodic memory: the messages of a memory store's conversations and of a session
store's sessions are searchable (keyword, semantic, hybrid) by scope or actor, with the privileges
of reading them; every change of the items (append, delete, pop, clear, fork, erasure) shows in
the next search."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from rest import UC

CONV = "/ai-gateway/mlflow/v1/conversations"
SESSIONS = "/api/2.0/agents/session-stores"


def memory_store(client, token, name: str, binding: str = "caller") -> str:
    r = client.post(
        f"{UC}/memory-stores",
        headers=token(),
        json={"name": name, "catalog_name": "main", "schema_name": "default", "scope_binding": binding},
    )
    assert r.status_code == 200, r.text
    return f"main.default.{name}"


def grant(client, token, full_name: str, principal: str, *privileges: str) -> None:
    r = client.patch(
        f"{UC}/permissions/memory_store/{full_name}",
        headers=token(),
        json={"changes": [{"principal": principal, "add": list(privileges)}]},
    )
    assert r.status_code == 200, r.text


def conversation(client, headers, store: str, scope: str, *items: dict) -> str:
    r = client.post(
        CONV,
        headers=headers,
        json={
            "items": list(items),
            "memory_store": {"name": store},
            "scope": {"kind": "user", "value": scope},
        },
    )
    assert r.status_code == 200, r.text
    return r.json()["id"]


def say(role: str, text: str) -> dict:
    return {"type": "message", "role": role, "content": text}


def search(client, headers, store: str, **body) -> list[dict]:
    r = client.post(f"{UC}/memory-stores/{store}/conversations:search", headers=headers, json=body)
    assert r.status_code == 200, r.text
    return [hit["conversation_item"] for hit in r.json()["results"]]


def texts(hits: list[dict]) -> list[str]:
    return [hit["text"] for hit in hits]


def test_conversation_messages_are_found_by_keyword_and_meaning(client, token):
    store = memory_store(client, token, "episodes")
    conv = conversation(
        client,
        token(),
        store,
        "ann",
        say("user", "I am allergic to peanuts, keep them out of every recipe."),
        {
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Noted: no peanuts.", "annotations": []}],
        },
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "save_memory",
            "arguments": '{"peanuts": "allergy"}',
        },
        say("user", "Book the train to Lyon for Friday."),
    )
    conversation(client, token(), store, "bob", say("user", "Peanuts are my favourite snack."))

    for mode in ("keyword", "semantic", "hybrid"):
        hits = search(client, token(), store, scope="ann", query="peanuts", mode=mode, top_k=10)
        found = texts(hits)
        assert "I am allergic to peanuts, keep them out of every recipe." in found, mode
        assert not any("favourite" in t for t in found), mode  # bob's scope is not ann's
        assert all(hit["scope"] == "ann" and hit["conversation_id"] == conv for hit in hits)
    top = search(client, token(), store, scope="ann", query="allergic to peanuts", mode="keyword")[0]
    assert top["role"] == "user" and top["item_id"].startswith("msg_") and top["created_at"] > 0
    # a function call is not a message: its arguments are not transcript text
    assert search(client, token(), store, scope="ann", query="save_memory", mode="keyword") == []
    # filters: role, conversation, several scopes
    assert texts(search(client, token(), store, scope="ann", query="peanuts", role="assistant")) == [
        "Noted: no peanuts."
    ]
    assert search(client, token(), store, scope="ann", query="peanuts", conversation_id="conv_0" * 2) == []
    both = search(client, token(), store, scopes=["ann", "bob"], query="peanuts", mode="keyword", top_k=10)
    assert {hit["scope"] for hit in both} == {"ann", "bob"}


def test_deleted_items_and_conversations_leave_the_search(client, token):
    store = memory_store(client, token, "episodes-del")
    conv = conversation(client, token(), store, "ann", say("user", "the walrus is called Wally"))
    other = conversation(client, token(), store, "ann", say("user", "a second walrus named Molly"))
    hits = search(client, token(), store, scope="ann", query="walrus", mode="keyword")
    assert sorted(texts(hits)) == ["a second walrus named Molly", "the walrus is called Wally"]
    wally = next(hit for hit in hits if hit["conversation_id"] == conv)
    assert client.delete(f"{CONV}/{conv}/items/{wally['item_id']}", headers=token()).status_code == 200
    assert texts(search(client, token(), store, scope="ann", query="walrus")) == [
        "a second walrus named Molly"
    ]
    assert client.delete(f"{CONV}/{other}", headers=token()).status_code == 200
    for mode in ("keyword", "semantic"):
        assert search(client, token(), store, scope="ann", query="walrus", mode=mode) == []


def test_search_needs_read_and_keeps_to_the_scope_binding(client, token):
    store = memory_store(client, token, "episodes-acl")
    bound = memory_store(client, token, "episodes-bound", binding="end_user")
    grant(client, token, store, "rita", "READ_MEMORY_STORE")
    grant(client, token, bound, "chat-app", "READ_MEMORY_STORE", "WRITE_MEMORY_STORE")
    conversation(client, token(), store, "ann", say("user", "the vault code is 4711"))
    conversation(
        client, token("chat-app", on_behalf_of="ann"), bound, "ann", say("user", "ann's vault is blue")
    )

    assert texts(search(client, token("rita"), store, scope="ann", query="vault")) == [
        "the vault code is 4711"
    ]
    r = client.post(
        f"{UC}/memory-stores/{store}/conversations:search",
        headers=token("stranger"),
        json={"scope": "ann", "query": "vault"},
    )
    assert r.status_code == 403 and r.json()["error_code"] == "PERMISSION_DENIED"
    r = client.post(
        f"{UC}/memory-stores/main.default.no-such-store/conversations:search",
        headers=token(),
        json={"scope": "ann", "query": "vault"},
    )
    assert r.status_code == 404 and r.json()["error_code"] == "NOT_FOUND"
    # a store bound to the end user: the app may search ann's scope on ann's behalf, not bob's
    assert texts(
        search(client, token("chat-app", on_behalf_of="ann"), bound, scope="ann", query="vault")
    ) == ["ann's vault is blue"]
    r = client.post(
        f"{UC}/memory-stores/{bound}/conversations:search",
        headers=token("chat-app", on_behalf_of="bob"),
        json={"scope": "ann", "query": "vault"},
    )
    assert r.status_code == 403

    events = client.get(
        f"{UC}/system/audit",
        headers=token(),
        params={"securable_full_name": store, "action_name": "transcripts.search", "page_size": 50},
    ).json()["events"]
    assert {(e["principal"], e["decision"]) for e in events} >= {("rita", "allow"), ("stranger", "deny")}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": "x"}, "scope"),
        ({"scope": "ann", "query": "   "}, "query"),
        ({"scope": "ann", "query": "x", "top_k": 0}, "top_k"),
        ({"scope": "ann", "query": "x", "role": "robot"}, "role"),
        ({"scope": "ann", "query": "x", "mode": "fuzzy"}, "mode"),
        ({"scope": "ann", "query": "x", "scopes": ["ok", ""]}, "scopes[1]"),
        ({"scope": "ann", "query": "x", "surprise": 1}, "surprise"),
    ],
)
def test_bad_searches_are_400_naming_the_field(client, token, body, field):
    store = "main.default.episodes-input"
    if client.get(f"{UC}/memory-stores/{store}", headers=token()).status_code == 404:
        memory_store(client, token, "episodes-input")
    r = client.post(f"{UC}/memory-stores/{store}/conversations:search", headers=token(), json=body)
    assert r.status_code == 400, r.text
    assert field in r.json()["message"]


# --- session stores --------------------------------------------------------------------------------


def session_store(client, token, name: str) -> None:
    r = client.post(SESSIONS, headers=token(), params={"session_store_name": name}, json={})
    assert r.status_code == 200, r.text


def session(client, token, store: str, actor: str, sid: str) -> None:
    r = client.post(
        f"{SESSIONS}/{store}/sessions", headers=token(), params={"session_id": sid}, json={"actor_id": actor}
    )
    assert r.status_code == 200, r.text


def append(client, token, store: str, sid: str, *data: object) -> None:
    r = client.post(
        f"{SESSIONS}/{store}/sessions/{sid}/items:append",
        headers=token(),
        json={"items": [{"data": d} for d in data]},
    )
    assert r.status_code == 200, r.text


def session_search(client, headers, store: str, **body) -> list[dict]:
    r = client.post(f"{SESSIONS}/{store}/items:search", headers=headers, json=body)
    assert r.status_code == 200, r.text
    return [hit["session_item"] for hit in r.json()["results"]]


def test_session_messages_are_searchable_and_follow_pop_clear_fork_and_erasure(client, token):
    session_store(client, token, "episodic")
    session(client, token, "episodic", "tara", "trip")
    session(client, token, "episodic", "bob", "other")
    append(
        client,
        token,
        "episodic",
        "trip",
        {"role": "user", "content": "Plan my trip to Kyoto in April."},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Kyoto in April: cherry blossoms."}],
        },
        {"type": "function_call", "call_id": "c", "name": "book", "arguments": '{"city": "Kyoto"}'},
        {"checkpoint": {"channel_values": {"note": "Kyoto"}}},  # not a message (a LangGraph checkpoint)
    )
    append(client, token, "episodic", "other", {"role": "user", "content": "Kyoto is too far for me."})

    hits = session_search(client, token(), "episodic", actor_id="tara", query="Kyoto", mode="keyword")
    assert sorted(texts(hits)) == ["Kyoto in April: cherry blossoms.", "Plan my trip to Kyoto in April."]
    assert {(h["session_id"], h["actor_id"]) for h in hits} == {("trip", "tara")}
    assert hits[0]["create_time"].endswith("Z")
    semantic = session_search(
        client, token(), "episodic", actor_id="tara", query="Kyoto trip", mode="semantic"
    )
    assert semantic and all(h["actor_id"] == "tara" for h in semantic)
    assert (
        texts(
            session_search(client, token(), "episodic", actor_ids=["tara", "bob"], query="Kyoto", role="user")
        )
        != []
    )

    # a fork copies the items, and so the hits; the filter keeps to one session
    r = client.post(
        f"{SESSIONS}/episodic/sessions:fork",
        headers=token(),
        json={"source_session_id": "trip", "actor_id": "tara", "session_id": "trip-2"},
    )
    assert r.status_code == 200, r.text
    forked = session_search(
        client, token(), "episodic", actor_id="tara", query="Kyoto", session_id="trip-2", mode="keyword"
    )
    assert len(forked) == 2 and {h["session_id"] for h in forked} == {"trip-2"}

    # pop removes the last item (the checkpoint, then the function call, then the answer)
    for _ in range(3):
        assert (
            client.post(f"{SESSIONS}/episodic/sessions/trip/items:pop", headers=token(), json={}).status_code
            == 200
        )
    assert texts(
        session_search(client, token(), "episodic", actor_id="tara", query="Kyoto", session_id="trip")
    ) == ["Plan my trip to Kyoto in April."]
    assert (
        client.post(f"{SESSIONS}/episodic/sessions/trip/items:clear", headers=token(), json={}).status_code
        == 200
    )
    assert (
        session_search(client, token(), "episodic", actor_id="tara", query="Kyoto", session_id="trip") == []
    )

    # erasing the actor removes its sessions, and with them every hit
    r = client.post(f"{UC}/system/erase-scope", headers=token(), json={"scope": "tara"})
    assert r.status_code == 200, r.text
    assert r.json()["also_deleted"]["sessions"] == 2  # trip and its fork
    for mode in ("keyword", "semantic"):
        assert session_search(client, token(), "episodic", actor_id="tara", query="Kyoto", mode=mode) == []
    assert texts(session_search(client, token(), "episodic", actor_id="bob", query="Kyoto")) == [
        "Kyoto is too far for me."
    ]


def test_session_search_is_governed_like_reading_items(client, token):
    session_store(client, token, "episodic-acl")
    session(client, token, "episodic-acl", "ann", "s1")
    append(client, token, "episodic-acl", "s1", {"role": "user", "content": "my locker is number 12"})
    r = client.post(
        f"{SESSIONS}/episodic-acl/items:search",
        headers=token("stranger"),
        json={"actor_id": "ann", "query": "locker"},
    )
    assert r.status_code == 403
    r = client.post(
        f"{SESSIONS}/episodic-acl/permissions:grant",
        headers=token(),
        json={"principal": {"name": "rita"}, "permission": "READ"},
    )
    assert r.status_code == 200, r.text
    assert texts(session_search(client, token("rita"), "episodic-acl", actor_id="ann", query="locker")) == [
        "my locker is number 12"
    ]
    r = client.post(
        f"{SESSIONS}/no-such-store/items:search", headers=token(), json={"actor_id": "ann", "query": "x"}
    )
    assert r.status_code == 404 and r.json()["error_code"] == "NOT_FOUND"
    r = client.post(f"{SESSIONS}/episodic-acl/items:search", headers=token(), json={"query": "locker"})
    assert r.status_code == 400 and "actor_id" in r.json()["message"]
    # a memory store is not a session store, and the reverse
    r = client.post(
        f"{UC}/memory-stores/main.default.episodic-acl/conversations:search",
        headers=token(),
        json={"scope": "ann", "query": "x"},
    )
    assert r.status_code == 404


def test_items_appended_before_the_migration_are_backfilled(client, token, settings):
    """Migration 0015 fills `transcript_items` from the items already there; re-running its
    backfill adds nothing twice."""
    store = memory_store(client, token, "episodes-backfill")
    conversation(client, token(), store, "ann", say("user", "the otter sleeps at noon"))

    async def rerun() -> tuple[int, int]:
        conn = await asyncpg.connect(settings.database_url)
        try:
            count = "SELECT count(*) FROM transcript_items WHERE contents LIKE '%otter%'"
            before = await conn.fetchval(count)
            await conn.execute("DELETE FROM transcript_items WHERE contents LIKE '%otter%'")
            from catalog.db.migrate import load_migrations

            sql = next(m for m in load_migrations() if m.name == "transcripts").sql
            # only the backfill: re-creating the triggers would take locks that deadlock with the
            # app's background workers on this database
            backfill = sql[sql.index("-- what was appended before this migration") :]
            await conn.execute(backfill)
            await conn.execute(backfill)  # idempotent
            return before, await conn.fetchval(count)
        finally:
            await conn.close()

    assert asyncio.run(rerun()) == (1, 1)
    assert texts(search(client, token(), store, scope="ann", query="otter", mode="keyword")) == [
        "the otter sleeps at noon"
    ]
