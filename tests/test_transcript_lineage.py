"""Entry lineage from transcripts: a write or an edit made from a conversation's or a session's
items (`origin`) records an edge from that thread in its own transaction; the lineage API shows
it upstream of the entry (and of what was derived from it) and downstream of the thread's store;
the edges outlive the entry and the thread, and erasing a scope deletes them.

No route sets `origin` yet (the server's own code that holds a thread builds it), so the changes
here run through `catalog.entries.service` on the app's context, in the app's event loop."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import pytest
from rest import UC

from catalog.access import SecurableType
from catalog.auth import Principal
from catalog.cli import with_role
from catalog.entries import operations as ops
from catalog.entries import service
from catalog.errors import InvalidParameter

LINEAGE = f"{UC}/system/lineage"
CONVERSATIONS = "/ai-gateway/mlflow/v1/conversations"
SESSIONS = "/api/2.0/agents/session-stores"
NOTES = "main.default.tl_notes"  # where memory is written
CHATS = "main.default.tl_chats"  # the conversations' memory store
ADMIN = Principal("admin")


def _run(client, fn, *args):  # type: ignore[no-untyped-def]
    """Run a coroutine function in the app's event loop (its pool lives there)."""
    return client.blocking_portal.call(fn, *args)


def _ctx(client):  # type: ignore[no-untyped-def]
    return client.app.state.runtime.context


def store_id(client, full_name: str, kind: str = "memory") -> str:  # type: ignore[no-untyped-def]
    found = _run(client, _ctx(client).access.locate, SecurableType.MEMORY_STORE, full_name.split("."), kind)
    return str(found.node.id)


@pytest.fixture(scope="module")
def stores(client, token) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """The memory stores `tl_notes` and `tl_chats` and the session store `tl-log`: full name → id."""
    for name in ("tl_notes", "tl_chats"):
        r = client.post(
            f"{UC}/memory-stores",
            headers=token(),
            json={"name": name, "catalog_name": "main", "schema_name": "default"},
        )
        assert r.status_code == 200, r.text
    r = client.post(SESSIONS, headers=token(), params={"session_store_name": "tl-log"}, json={})
    assert r.status_code == 200, r.text
    return {
        NOTES: store_id(client, NOTES),
        CHATS: store_id(client, CHATS),
        "main.default.tl-log": store_id(client, "main.default.tl-log", "session"),
    }


def conversation(client, token, scope: str, *texts: str) -> tuple[str, list[str]]:  # type: ignore[no-untyped-def]
    """A new conversation of `scope` in tl_chats with one user message per text: (id, item ids)."""
    r = client.post(
        CONVERSATIONS,
        headers=token(),
        json={
            "memory_store": {"name": CHATS},
            "scope": {"kind": "user", "value": scope},
            "items": [{"type": "message", "role": "user", "content": text} for text in texts],
        },
    )
    assert r.status_code == 200, r.text
    conv = r.json()["id"]
    r = client.get(f"{CONVERSATIONS}/{conv}/items", headers=token(), params={"order": "asc"})
    assert r.status_code == 200, r.text
    return conv, [item["id"] for item in r.json()["data"]]


def session(client, token, actor: str, *data: Any) -> tuple[str, list[str]]:  # type: ignore[no-untyped-def]
    """A new session of `actor` in tl-log with these items: (session id, item ids)."""
    sid = f"s-{uuid.uuid4().hex[:8]}"
    r = client.post(
        f"{SESSIONS}/tl-log/sessions", headers=token(), params={"session_id": sid}, json={"actor_id": actor}
    )
    assert r.status_code == 200, r.text
    r = client.post(
        f"{SESSIONS}/tl-log/sessions/{sid}/items:append",
        headers=token(),
        json={"items": [{"data": d} for d in data]},
    )
    assert r.status_code == 200, r.text
    return sid, [item["item_id"] for item in r.json()["session_items"]]


def from_conversation(stores, scope: str, conv: str, *items: str) -> ops.TranscriptSource:  # type: ignore[no-untyped-def]
    return ops.TranscriptSource(
        kind="conversation", store=CHATS, store_id=stores[CHATS], scope=scope, thread_id=conv, item_ids=items
    )


def from_session(stores, actor: str, sid: str, *items: str) -> ops.TranscriptSource:  # type: ignore[no-untyped-def]
    name = "main.default.tl-log"
    return ops.TranscriptSource(
        kind="session", store=name, store_id=stores[name], scope=actor, thread_id=sid, item_ids=items
    )


def write(
    client, scope: str, path: str, contents: str, origin=None, mode="EXCLUSIVE", store=NOTES, sources=()
):  # type: ignore[no-untyped-def]
    op = ops.Write(
        store=store,
        key=ops.ByKey(scope=scope, path=path),
        contents=contents,
        mode=mode,
        origin=origin,
        derived_from=tuple(sources),
    )
    return _run(client, service.write, _ctx(client), ADMIN, op)


def edit(client, scope: str, path: str, origin=None, change=None, description=None):  # type: ignore[no-untyped-def]
    op = ops.Edit(
        store=NOTES,
        target=ops.ByKey(scope=scope, path=path),
        change=change,
        description=description,
        origin=origin,
    )
    return _run(client, service.edit, _ctx(client), ADMIN, op)


def lineage(client, token, store: str, direction: str = "upstream", **params: Any) -> dict:  # type: ignore[no-untyped-def]
    r = client.get(
        LINEAGE, headers=token(), params={"securable_full_name": store, "direction": direction, **params}
    )
    assert r.status_code == 200, r.text
    return r.json()


def origins_of(client, token, scope: str, path: str, store: str = NOTES) -> list[dict]:  # type: ignore[no-untyped-def]
    return lineage(client, token, store, scope=scope, path=path)["origins"]


def entry_exists(client, token, scope: str, path: str) -> bool:  # type: ignore[no-untyped-def]
    r = client.get(
        f"{UC}/memory-stores/{NOTES}/entries:get", headers=token(), params={"scope": scope, "path": path}
    )
    assert r.status_code in (200, 404), r.text
    return r.status_code == 200


def test_a_write_from_a_conversation_is_its_origin_upstream_and_downstream(client, token, stores):
    conv, items = conversation(client, token, "ana", "I moved to Lyon", "I work nights")
    write(client, "ana", "/city.md", "Lives in Lyon", from_conversation(stores, "ana", conv, items[0]))

    found = lineage(client, token, NOTES, scope="ana", path="/city.md")
    assert found["edges"] == []
    assert found["origins"] == [
        {
            "source": {
                "kind": "conversation",
                "memory_store": CHATS,
                "scope": "ana",
                "conversation_id": conv,
                "session_id": None,
                "item_ids": [items[0]],
                "deleted": False,
            },
            "target": {
                "memory_store": NOTES,
                "scope": "ana",
                "path": "/city.md",
                "session_id": None,
                "deleted": False,
            },
            "depth": 1,
        }
    ]
    # an entry derived from it has the conversation upstream one hop further
    write(
        client,
        "ana",
        "/profile.md",
        "Night worker in Lyon",
        sources=[ops.Source(store=NOTES, key=ops.ByKey(scope="ana", path="/city.md"))],
    )
    found = lineage(client, token, NOTES, scope="ana", path="/profile.md")
    assert [(e["source"]["path"], e["depth"]) for e in found["edges"]] == [("/city.md", 1)]
    assert [(o["source"]["conversation_id"], o["target"]["path"], o["depth"]) for o in found["origins"]] == [
        (conv, "/city.md", 2)
    ]
    # ... unless the walk stops before it
    assert lineage(client, token, NOTES, scope="ana", path="/profile.md", depth=1)["origins"] == []
    # the whole store upstream holds it
    whole = lineage(client, token, NOTES)["origins"]
    assert (conv, "/city.md", 1) in [
        (o["source"]["conversation_id"], o["target"]["path"], o["depth"]) for o in whole
    ]

    # downstream of the conversations' store: the entry written from it, then what was derived from that
    down = lineage(client, token, CHATS, "downstream")
    assert (conv, "/city.md", 1) in [
        (o["source"]["conversation_id"], o["target"]["path"], o["depth"]) for o in down["origins"]
    ]
    assert ("/city.md", "/profile.md", 2) in [
        (e["source"]["path"], e["target"]["path"], e["depth"]) for e in down["edges"]
    ]


def test_changes_from_the_same_thread_add_items_to_one_edge(client, token, stores):
    conv, items = conversation(client, token, "ben", "one", "two", "three")
    write(client, "ben", "/a.md", "first", from_conversation(stores, "ben", conv, items[0]))
    edit(
        client,
        "ben",
        "/a.md",
        from_conversation(stores, "ben", conv, items[1], items[0]),
        change=ops.Append(text="more"),
    )
    write(
        client,
        "ben",
        "/a.md",
        "again",
        from_conversation(stores, "ben", conv, items[2], items[2]),
        mode="APPEND",
    )
    (edge,) = origins_of(client, token, "ben", "/a.md")
    assert edge["source"]["item_ids"] == [items[0], items[1], items[2]]

    # a description-only edit from a session is a second edge; the whole conversation absorbs its items
    sid, session_items = session(client, token, "ben", {"role": "user", "text": "call me Benny"})
    edit(client, "ben", "/a.md", from_session(stores, "ben", sid, *session_items), description="nicknames")
    write(client, "ben", "/a.md", "rewritten", from_conversation(stores, "ben", conv), mode="OVERWRITE")
    edges = origins_of(client, token, "ben", "/a.md")
    assert [(e["source"]["kind"], e["source"]["item_ids"]) for e in edges] == [
        ("conversation", []),
        ("session", session_items),
    ]
    by_session = edges[1]["source"]
    assert (by_session["memory_store"], by_session["scope"], by_session["session_id"]) == (
        "main.default.tl-log",
        "ben",
        sid,
    )
    assert by_session["conversation_id"] is None and by_session["deleted"] is False
    # downstream of the session store: the entry written from its session
    down = lineage(client, token, "main.default.tl-log", "downstream")["origins"]
    assert [
        (o["source"]["session_id"], o["target"]["path"]) for o in down if o["source"]["scope"] == "ben"
    ] == [(sid, "/a.md")]


def test_a_change_without_origin_records_none(client, token, stores):
    conv, items = conversation(client, token, "cleo", "hello")
    write(client, "cleo", "/plain.md", "no origin")
    edit(client, "cleo", "/plain.md", change=ops.Append(text="still none"))
    assert origins_of(client, token, "cleo", "/plain.md") == []

    write(client, "cleo", "/kept.md", "from a chat", from_conversation(stores, "cleo", conv, items[0]))
    edit(client, "cleo", "/kept.md", change=ops.Append(text="by hand"))
    write(client, "cleo", "/kept.md", "by hand again", mode="OVERWRITE")
    (edge,) = origins_of(client, token, "cleo", "/kept.md")
    assert edge["source"]["item_ids"] == [items[0]]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"kind": "email"}, "origin.kind"),
        ({"store_id": "not-a-uuid"}, "origin.store_id"),
        ({"store_id": str(uuid.uuid4())}, "origin.store_id"),  # no such store
        ({"store": "main.default"}, "origin.store"),
        ({"store": "main.default.tl_notes"}, "origin.store"),  # another store than its id's
        ({"scope": ""}, "origin.scope"),
        ({"thread_id": ""}, "origin.thread_id"),
        ({"thread_id": "x" * 257}, "origin.thread_id"),
        ({"item_ids": ("ok", "bad\x00id")}, "origin.item_ids[1]"),
        ({"item_ids": tuple(f"i{n}" for n in range(1001))}, "origin.item_ids"),
    ],
)
def test_a_bad_origin_is_refused_naming_the_field_and_nothing_is_written(
    client, token, stores, change, field
):
    good = {
        "kind": "conversation",
        "store": CHATS,
        "store_id": stores[CHATS],
        "scope": "dora",
        "thread_id": "conv_0123",
        "item_ids": (),
    }
    origin = ops.TranscriptSource(**{**good, **change})  # type: ignore[arg-type]
    path = f"/bad-{uuid.uuid4().hex[:8]}.md"
    with pytest.raises(InvalidParameter) as refused:
        write(client, "dora", path, "x", origin)
    assert refused.value.details == [{"@type": "field_violation", "field": field}]
    assert not entry_exists(client, token, "dora", path)


def test_an_origin_of_the_wrong_kind_is_refused_and_the_edit_not_made(client, token, stores):
    write(client, "dora", "/kind.md", "before")
    wrong = ops.TranscriptSource(
        kind="session", store=CHATS, store_id=stores[CHATS], scope="dora", thread_id="s-1"
    )  # a memory store's id as a session store's
    with pytest.raises(InvalidParameter) as refused:
        edit(client, "dora", "/kind.md", wrong, change=ops.Append(text="after"))
    assert "origin.store_id" in refused.value.message
    r = client.get(
        f"{UC}/memory-stores/{NOTES}/entries:get",
        headers=token(),
        params={"scope": "dora", "path": "/kind.md"},
    )
    assert r.json()["contents"] == "before"


def test_deleted_ends_are_kept_and_shown_deleted(client, token, stores):
    conv, items = conversation(client, token, "eve", "remember this")
    write(client, "eve", "/gone.md", "remembered", from_conversation(stores, "eve", conv, *items))
    assert client.delete(f"{CONVERSATIONS}/{conv}", headers=token()).status_code == 200
    (edge,) = origins_of(client, token, "eve", "/gone.md")
    assert edge["source"]["deleted"] is True and edge["source"]["item_ids"] == items
    r = client.delete(
        f"{UC}/memory-stores/{NOTES}/entries", headers=token(), params={"scope": "eve", "path": "/gone.md"}
    )
    assert r.status_code == 200, r.text
    whole = lineage(client, token, NOTES)["origins"]
    (kept,) = [o for o in whole if o["source"]["conversation_id"] == conv]
    assert kept["target"] == {
        "memory_store": NOTES,
        "scope": "eve",
        "path": "/gone.md",
        "session_id": None,
        "deleted": True,
    }


def _transcript_edges(database_url: str, scope: str) -> list[tuple[str, str]]:
    """(target scope, source scope) of the stored edges with `scope` at either end."""
    return client_sql(
        database_url,
        "SELECT target_scope, source_scope FROM transcript_lineage "
        "WHERE target_scope = $1 OR source_scope = $1 "
        "UNION ALL SELECT target_scope, source_scope FROM entry_lineage "
        "WHERE target_scope = $1 OR source_scope = $1",
        scope,
    )


def client_sql(database_url: str, statement: str, *args: Any) -> list[tuple[Any, ...]]:
    import asyncio

    async def run() -> list[tuple[Any, ...]]:
        conn = await asyncpg.connect(database_url)
        try:
            return [tuple(r) for r in await conn.fetch(statement, *args)]
        finally:
            await conn.close()

    return asyncio.run(run())


def test_erasing_a_scope_deletes_its_edges_at_either_end(client, token, stores, database_url):
    conv, items = conversation(client, token, "finn", "my address is ...")
    sid, session_items = session(client, token, "finn", {"text": "my phone is ..."})
    write(client, "finn", "/own.md", "his", from_conversation(stores, "finn", conv, *items))
    write(client, "team-f", "/shared.md", "from finn's chat", from_conversation(stores, "finn", conv, *items))
    edit(client, "team-f", "/shared.md", from_session(stores, "finn", sid, *session_items), description="d")
    write(
        client,
        "team-f",
        "/copy.md",
        "from finn's entry",
        sources=[ops.Source(store=NOTES, key=ops.ByKey(scope="finn", path="/own.md"))],
    )
    other, other_items = conversation(client, token, "team-f", "team notes")
    write(
        client, "team-f", "/team.md", "the team's", from_conversation(stores, "team-f", other, *other_items)
    )
    assert len(_transcript_edges(database_url, "finn")) == 4

    r = client.post(f"{UC}/system/erase-scope", headers=token(), json={"scope": "finn"})
    assert r.status_code == 200, r.text
    assert _transcript_edges(database_url, "finn") == []
    assert origins_of(client, token, "team-f", "/shared.md") == []
    assert lineage(client, token, NOTES, scope="team-f", path="/copy.md")["edges"] == []
    # another scope's edges stay
    assert [o["source"]["conversation_id"] for o in origins_of(client, token, "team-f", "/team.md")] == [
        other
    ]


def test_deleting_a_scope_in_one_store_deletes_its_edges_in_that_store(client, token, stores, database_url):
    conv, items = conversation(client, token, "gus", "note")
    write(client, "gus", "/g.md", "his", from_conversation(stores, "gus", conv, *items))
    write(client, "team-g", "/g.md", "the team's", from_conversation(stores, "gus", conv, *items))

    # the scope's entries in the notes store: the edge into gus's entry goes, the team's stays
    r = client.delete(
        f"{UC}/memory-stores/{NOTES}/entries", headers=token(), params={"scope": "gus", "all": "true"}
    )
    assert r.status_code == 200, r.text
    assert client_sql(
        database_url, "SELECT target_scope FROM transcript_lineage WHERE source_scope = 'gus'"
    ) == [("team-g",)]
    # the scope in the conversations' store (its conversations with it): the edge from them goes
    r = client.delete(
        f"{UC}/memory-stores/{CHATS}/entries", headers=token(), params={"scope": "gus", "all": "true"}
    )
    assert r.status_code == 200, r.text
    assert _transcript_edges(database_url, "gus") == []
    assert origins_of(client, token, "team-g", "/g.md") == []


def test_the_auditor_role_reads_transcript_lineage(client, token, stores, database_url):
    conv, items = conversation(client, token, "hal", "for the auditor")
    write(client, "hal", "/audited.md", "seen", from_conversation(stores, "hal", conv, *items))
    rows = client_sql(
        with_role(database_url, "catalog_auditor"),
        "SELECT target_memory_store, target_scope, target_path, source_kind, source_store, source_scope, "
        "source_thread_id, source_item_ids, created_by FROM system.transcript_lineage "
        "WHERE source_thread_id = $1",
        conv,
    )
    assert rows == [(NOTES, "hal", "/audited.md", "conversation", CHATS, "hal", conv, items, "admin")]
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        client_sql(with_role(database_url, "catalog_auditor"), "SELECT * FROM public.transcript_lineage")
