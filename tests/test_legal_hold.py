"""A legal hold on a store: while it is set, the store's entries cannot be deleted or lose text
(409 RESOURCE_CONFLICT naming the hold), erasure leaves them and says so, adding text still
works; setting and releasing it takes MANAGE and is audited."""

from __future__ import annotations

from rest import UC
from stores import make_store

HELD = "main.default.held"
FREE = "main.default.free"


def setup(client, token) -> None:
    for name in ("held", "free"):
        r = client.post(
            f"{UC}/memory-stores",
            headers=token(),
            json={"name": name, "catalog_name": "main", "schema_name": "default"},
        )
        assert r.status_code == 200, r.text
        for path in ("/a.md", "/b.md"):
            r = client.post(
                f"{UC}/memory-stores/main.default.{name}/entries",
                headers=token(),
                params={"scope": "hank"},
                json={"path": path, "contents": "line one"},
            )
            assert r.status_code == 200, r.text
    r = client.patch(
        f"{UC}/permissions/memory_store/{HELD}",
        headers=token(),
        json={"changes": [{"principal": "writer", "add": ["READ_MEMORY_STORE", "WRITE_MEMORY_STORE"]}]},
    )
    assert r.status_code == 200, r.text


def hold(client, headers, on: bool):
    return client.patch(f"{UC}/memory-stores/{HELD}", headers=headers, json={"legal_hold": on})


def test_a_held_store_keeps_its_entries(client, token):
    setup(client, token)
    assert hold(client, token("writer"), True).status_code == 403  # MANAGE is needed
    r = hold(client, token(), True)
    assert r.status_code == 200 and r.json()["legal_hold"] is True
    entries = f"{UC}/memory-stores/{HELD}/entries"

    refused = [
        client.delete(entries, headers=token("writer"), params={"scope": "hank", "path": "/a.md"}),
        client.delete(entries, headers=token(), params={"scope": "hank", "all": "true"}),
        client.patch(
            entries,
            headers=token("writer"),
            json={"scope": "hank", "path": "/a.md", "str_replace": {"old_str": "one", "new_str": "1"}},
        ),
        client.patch(
            entries, headers=token("writer"), json={"scope": "hank", "path": "/a.md", "description": "d"}
        ),
        client.post(
            entries,
            headers=token("writer"),
            params={"scope": "hank"},
            json={"path": "/a.md", "contents": "new", "write_mode": "OVERWRITE"},
        ),
        client.post(
            f"{UC}/memory-stores/{HELD}/entries:restore",
            headers=token(),
            json={"scope": "hank", "path": "/a.md", "etag": "1"},
        ),
        client.delete(f"{UC}/memory-stores/{HELD}", headers=token()),
    ]
    for r in refused:
        assert r.status_code == 409, r.text
        assert r.json()["error_code"] == "RESOURCE_CONFLICT" and "legal hold" in r.json()["message"]

    # adding text is no loss: new entries, appends and inserted lines are allowed
    r = client.post(
        entries, headers=token("writer"), params={"scope": "hank"}, json={"path": "/c.md", "contents": "c"}
    )
    assert r.status_code == 200, r.text
    r = client.patch(
        entries, headers=token("writer"), json={"scope": "hank", "path": "/a.md", "append": {"text": "two"}}
    )
    assert r.status_code == 200 and r.json()["contents"] == "line one\ntwo"

    # erasure leaves the held store's entries and says so; the other store's go
    r = client.post(f"{UC}/system/erase-scope", headers=token(), json={"scope": "hank"})
    assert r.status_code == 200, r.text
    assert r.json()["held"] == [HELD]
    assert [s["memory_store"] for s in r.json()["stores"]] == [FREE]
    get = {"scope": "hank", "path": "/a.md"}
    assert client.get(f"{entries}:get", headers=token(), params=get).status_code == 200
    assert (
        client.get(f"{UC}/memory-stores/{FREE}/entries:get", headers=token(), params=get).status_code == 404
    )

    # released: deletes work again; setting and releasing are in the audit log
    assert hold(client, token(), False).json().get("legal_hold", False) is False
    assert (
        client.delete(entries, headers=token(), params={"scope": "hank", "path": "/a.md"}).status_code == 200
    )
    events = client.get(
        f"{UC}/system/audit",
        headers=token(),
        params={"securable_full_name": HELD, "action_name": "memory_store.update", "page_size": 50},
    ).json()["events"]
    changes = [(e["principal"], e["decision"], e["request_params"].get("legal_hold")) for e in events]
    assert ("admin", "allow", "true") in changes and ("admin", "allow", "false") in changes
    assert ("writer", "deny", "true") in changes


def test_erasure_keeps_the_lineage_of_a_held_stores_entries(client, token, settings):
    import asyncio

    import asyncpg

    for name in ("lin-held", "lin-free"):
        base = f"{make_store(client, token, name)}/entries"
        r = client.post(
            base, headers=token(), params={"scope": "rita"}, json={"path": "/src.md", "contents": "s"}
        )
        assert r.status_code == 200, r.text
        source = {"memory_store": f"main.default.{name}", "scope": "rita", "path": "/src.md"}
        body = {"path": "/derived.md", "contents": "d", "derived_from": [source]}
        r = client.post(base, headers=token(), params={"scope": "rita"}, json=body)
        assert r.status_code == 200, r.text
    r = client.patch(f"{UC}/memory-stores/main.default.lin-held", headers=token(), json={"legal_hold": True})
    assert r.status_code == 200, r.text

    async def edges() -> dict[str, int]:
        conn = await asyncpg.connect(settings.database_url)
        try:
            rows = await conn.fetch(
                "SELECT m.name, count(l.*) AS n FROM memory_stores m LEFT JOIN entry_lineage l "
                "ON l.target_store_id = m.id WHERE m.name LIKE 'lin-%' GROUP BY m.name"
            )
            return {row["name"]: row["n"] for row in rows}
        finally:
            await conn.close()

    assert asyncio.run(edges()) == {"lin-held": 1, "lin-free": 1}
    r = client.post(f"{UC}/system/erase-scope", headers=token(), json={"scope": "rita"})
    assert r.status_code == 200, r.text
    assert "main.default.lin-held" in r.json()["held"]
    # the held entry keeps where it came from; the erased one's edge is gone
    assert asyncio.run(edges()) == {"lin-held": 1, "lin-free": 0}
    client.patch(f"{UC}/memory-stores/main.default.lin-held", headers=token(), json={"legal_hold": False})


def test_every_refusal_of_a_hold_is_in_the_api_document(client, token):
    """Each route a legal hold refuses with 409 says so in /openapi.json, as every status a route
    answers: removing a session's items (pop, clear), deleting a session, a session store, a
    conversation or one of its items, an entry or a memory store."""
    sessions = "/api/2.0/agents/session-stores"
    conversations = "/ai-gateway/mlflow/v1/conversations"
    base = make_store(client, token, "doc-held")
    r = client.post(
        base + "/entries", headers=token(), params={"scope": "u"}, json={"path": "/a.md", "contents": "x"}
    )
    assert r.status_code == 200, r.text
    r = client.post(
        conversations,
        headers=token(),
        json={
            "memory_store": {"name": "main.default.doc-held"},
            "scope": {"kind": "user", "value": "u"},
            "items": [{"role": "user", "content": "x", "id": "msg_held"}],
        },
    )
    assert r.status_code == 200, r.text
    conversation = r.json()["id"]
    r = client.post(sessions, headers=token(), params={"session_store_name": "doc-held-chats"}, json={})
    assert r.status_code == 200, r.text
    r = client.post(
        f"{sessions}/doc-held-chats/sessions",
        headers=token(),
        params={"session_id": "h"},
        json={"actor_id": "u"},
    )
    assert r.status_code == 200, r.text
    r = client.post(
        f"{sessions}/doc-held-chats/sessions/h/items:append", headers=token(), json={"items": [{"data": 1}]}
    )
    assert r.status_code == 200, r.text
    for url in (base, f"{sessions}/doc-held-chats"):
        r = client.patch(url, headers=token(), json={"legal_hold": True})
        assert r.status_code == 200, r.text

    values = {
        "full_name": "main.default.doc-held",
        "store_name": "doc-held-chats",
        "session_id": "h",
        "conversation_id": conversation,
        "item_id": "msg_held",
    }
    refused = [
        ("post", f"{sessions}/{{store_name}}/sessions/{{session_id}}/items:pop", {"json": {}}),
        ("post", f"{sessions}/{{store_name}}/sessions/{{session_id}}/items:clear", {"json": {}}),
        ("delete", f"{sessions}/{{store_name}}/sessions/{{session_id}}", {}),
        ("delete", f"{sessions}/{{store_name}}", {}),
        ("delete", f"{conversations}/{{conversation_id}}/items/{{item_id}}", {}),
        ("delete", f"{conversations}/{{conversation_id}}", {}),
        ("delete", f"{UC}/memory-stores/{{full_name}}/entries", {"params": {"scope": "u", "path": "/a.md"}}),
        ("delete", f"{UC}/memory-stores/{{full_name}}", {}),
    ]
    document = client.get("/openapi.json").json()["paths"]
    for method, template, kwargs in refused:
        r = client.request(method.upper(), template.format(**values), headers=token(), **kwargs)
        assert r.status_code == 409 and "legal hold" in r.json()["message"], (template, r.text)
        assert "409" in document[template][method]["responses"], (method, template)
    for url in (base, f"{sessions}/doc-held-chats"):
        assert client.patch(url, headers=token(), json={"legal_hold": False}).status_code == 200
