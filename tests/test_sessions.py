"""Session stores of the agent dialect over HTTP: the one governance of memory stores (kinds kept
apart, grants, scope binding, audit, erasure), sessions and forks, ordered items, limits and the
400s that name the field."""

from __future__ import annotations

import pytest
from rest import UC

BASE = "/api/2.0/agents/session-stores"
AGENT_STORES = "/api/2.0/agents/memory-stores"


def make_store(client, token, name: str, **body) -> dict:
    r = client.post(
        BASE, headers=token(), params={"session_store_name": name, "session_store_id": name}, json=body
    )
    assert r.status_code == 200, r.text
    return r.json()


def make_session(client, token, store: str, actor: str, sid: str | None = None, headers=None, **body) -> dict:
    r = client.post(
        f"{BASE}/{store}/sessions",
        headers=headers or token(),
        params={"session_id": sid} if sid else None,
        json={"actor_id": actor, **body},
    )
    assert r.status_code == 200, r.text
    return r.json()


def append(client, headers, store: str, sid: str, *data) -> list[dict]:
    r = client.post(
        f"{BASE}/{store}/sessions/{sid}/items:append",
        headers=headers,
        json={"items": [{"data": d} for d in data]},
    )
    assert r.status_code == 200, r.text
    return r.json()["session_items"]


def items(client, headers, store: str, sid: str, **params) -> list:
    r = client.get(f"{BASE}/{store}/sessions/{sid}/items", headers=headers, params=params)
    assert r.status_code == 200, r.text
    return [item["data"] for item in r.json()["session_items"]]


def test_store_lifecycle_and_metadata(client, token):
    created = make_store(client, token, "chat-log", description="support chats", metadata={"team": "support"})
    assert created["name"] == "session-stores/chat-log" and created["session_store_name"] == "chat-log"
    assert created["metadata"] == {"team": "support"} and created["creator_user_id"] == "admin"
    assert client.get(f"{BASE}/chat-log", headers=token()).json()["description"] == "support chats"
    assert "chat-log" in [
        s["session_store_name"] for s in client.get(BASE, headers=token()).json()["session_stores"]
    ]
    r = client.patch(
        f"{BASE}/chat-log",
        headers=token(),
        params={"update_mask": "metadata"},
        json={"metadata": {"tier": "1"}},
    )
    assert r.status_code == 200 and r.json()["metadata"] == {"tier": "1"}
    r = client.post(BASE, headers=token(), params={"session_store_name": "chat-log"}, json={})
    assert r.status_code == 409 and r.json()["error_code"] == "ALREADY_EXISTS"
    assert client.delete(f"{BASE}/chat-log", headers=token()).json() == {}
    r = client.get(f"{BASE}/chat-log", headers=token())
    assert r.status_code == 404 and r.json()["error_code"] == "NOT_FOUND"


def test_memory_and_session_stores_share_names_but_not_routes(client, token):
    make_store(client, token, "kinds-sessions")
    r = client.post(
        AGENT_STORES, headers=token(), params={"managed_memory_store_id": "kinds-memory"}, json={}
    )
    assert r.status_code == 200, r.text
    # one namespace: a name is taken across both kinds
    r = client.post(
        AGENT_STORES, headers=token(), params={"managed_memory_store_id": "kinds-sessions"}, json={}
    )
    assert r.status_code == 409
    r = client.post(BASE, headers=token(), params={"session_store_name": "kinds-memory"}, json={})
    assert r.status_code == 409
    # each kind's routes see only their own kind: the other is 404 NOT_FOUND
    for url in (
        f"{AGENT_STORES}/kinds-sessions",
        f"{UC}/memory-stores/main.default.kinds-sessions",
        f"{BASE}/kinds-memory",
        f"{BASE}/kinds-memory/sessions",
    ):
        r = client.get(url, headers=token())
        assert r.status_code == 404 and r.json()["error_code"] == "NOT_FOUND", (url, r.text)
    r = client.get(
        f"{UC}/memory-stores/main.default.kinds-sessions/entries", headers=token(), params={"scope": "u"}
    )
    assert r.status_code == 404
    r = client.post(
        f"{AGENT_STORES}/kinds-sessions/permissions:grant", headers=token(), json={"principal": {"name": "x"}}
    )
    assert r.status_code == 404
    listed = client.get(
        f"{UC}/memory-stores", headers=token(), params={"catalog_name": "main", "schema_name": "default"}
    )
    names = [s["name"] for s in listed.json()["memory_stores"]]
    assert "kinds-memory" in names and "kinds-sessions" not in names
    assert "kinds-memory" not in [
        s["session_store_name"] for s in client.get(BASE, headers=token()).json()["session_stores"]
    ]
    # the permissions API governs both: a session store is a MEMORY_STORE securable
    r = client.patch(
        f"{UC}/permissions/memory_store/main.default.kinds-sessions",
        headers=token(),
        json={"changes": [{"principal": "reader", "add": ["READ_MEMORY_STORE"]}]},
    )
    assert r.status_code == 200, r.text
    assert client.get(f"{BASE}/kinds-sessions", headers=token("reader")).status_code == 200


def test_sessions_items_order_pop_clear_and_paging(client, token):
    make_store(client, token, "ordered")
    session = make_session(client, token, "ordered", "user-1", "s-1", metadata={"channel": "web"})
    assert session["session_id"] == "s-1" and session["root_session_id"] == "s-1"
    assert session.get("parent_session_id") is None and session["metadata"] == {"channel": "web"}
    written = append(
        client, token(), "ordered", "s-1", {"role": "user", "content": "hi"}, "two", 3, None, [4]
    )
    assert [w["data"] for w in written] == [{"role": "user", "content": "hi"}, "two", 3, None, [4]]
    assert len({w["item_id"] for w in written}) == 5
    append(client, token(), "ordered", "s-1", {"n": 6})
    assert items(client, token(), "ordered", "s-1") == [
        {"role": "user", "content": "hi"},
        "two",
        3,
        None,
        [4],
        {"n": 6},
    ]
    assert items(client, token(), "ordered", "s-1", order_by="create_time desc")[0] == {"n": 6}
    # paging, in both orders
    seen, token_ = [], None
    while True:
        params = {"page_size": 4, **({"page_token": token_} if token_ else {})}
        page = client.get(f"{BASE}/ordered/sessions/s-1/items", headers=token(), params=params).json()
        seen += [i["data"] for i in page["session_items"]]
        token_ = page.get("next_page_token")
        if not token_:
            break
    assert seen == [{"role": "user", "content": "hi"}, "two", 3, None, [4], {"n": 6}]
    popped = client.post(f"{BASE}/ordered/sessions/s-1/items:pop", headers=token(), json={}).json()
    assert popped["item"]["data"] == {"n": 6}
    assert items(client, token(), "ordered", "s-1")[-1] == [4]
    append(client, token(), "ordered", "s-1", "after-pop")
    assert items(client, token(), "ordered", "s-1")[-2:] == [[4], "after-pop"]
    assert client.post(f"{BASE}/ordered/sessions/s-1/items:clear", headers=token(), json={}).json() == {}
    assert items(client, token(), "ordered", "s-1") == []
    assert client.post(f"{BASE}/ordered/sessions/s-1/items:pop", headers=token(), json={}).json() == {
        "item": None
    }
    r = client.patch(
        f"{BASE}/ordered/sessions/s-1",
        headers=token(),
        params={"update_mask": "metadata"},
        json={"metadata": {"a": "b"}},
    )
    assert r.status_code == 200 and r.json()["metadata"] == {"a": "b"}
    assert client.delete(f"{BASE}/ordered/sessions/s-1", headers=token()).json() == {}
    r = client.get(f"{BASE}/ordered/sessions/s-1/items", headers=token())
    assert r.status_code == 404 and r.json()["error_code"] == "NOT_FOUND"


def test_sessions_list_filter_order_and_children(client, token):
    make_store(client, token, "listing")
    make_session(client, token, "listing", "ann", "a-1")
    make_session(client, token, "listing", "bob", "b-1")
    child = make_session(client, token, "listing", "ann", "a-2", parent_session_id="a-1")
    assert child["parent_session_id"] == "a-1" and child["root_session_id"] == "a-1"
    grandchild = make_session(client, token, "listing", "ann", "a-3", parent_session_id="a-2")
    assert grandchild["root_session_id"] == "a-1"
    listed = client.get(f"{BASE}/listing/sessions", headers=token()).json()["sessions"]
    assert [s["session_id"] for s in listed] == ["a-3", "a-2", "b-1", "a-1"]  # newest first by default
    r = client.get(
        f"{BASE}/listing/sessions",
        headers=token(),
        params={"filter": 'actor_id = "ann"', "order_by": "create_time asc"},
    )
    assert [s["session_id"] for s in r.json()["sessions"]] == ["a-1", "a-2", "a-3"]
    r = client.get(
        f"{BASE}/listing/sessions",
        headers=token(),
        params={"filter": "root_session_id = 'a-1' AND actor_id = 'ann'"},
    )
    assert sorted(s["session_id"] for s in r.json()["sessions"]) == ["a-1", "a-2", "a-3"]
    pages, page_token = [], None
    while True:
        params = {"page_size": 3, **({"page_token": page_token} if page_token else {})}
        body = client.get(f"{BASE}/listing/sessions", headers=token(), params=params).json()
        pages.append([s["session_id"] for s in body["sessions"]])
        page_token = body.get("next_page_token")
        if not page_token:
            break
    assert pages == [["a-3", "a-2", "b-1"], ["a-1"]]
    r = client.post(
        f"{BASE}/listing/sessions", headers=token(), params={"session_id": "a-1"}, json={"actor_id": "x"}
    )
    assert r.status_code == 409 and r.json()["error_code"] == "ALREADY_EXISTS"
    r = client.post(
        f"{BASE}/listing/sessions", headers=token(), json={"actor_id": "x", "parent_session_id": "nope"}
    )
    assert r.status_code == 400 and r.json()["details"][0]["field"] == "parent_session_id"


def test_fork_copies_items_up_to_and_including_the_item(client, token):
    make_store(client, token, "forking")
    make_session(client, token, "forking", "ann", "src")
    written = append(client, token(), "forking", "src", "a", "b", "c", "d")
    r = client.post(
        f"{BASE}/forking/sessions:fork",
        headers=token(),
        json={
            "source_session_id": "src",
            "actor_id": "ann",
            "up_to_item_id": written[1]["item_id"],
            "session_id": "f-1",
        },
    )
    assert r.status_code == 200, r.text
    fork = r.json()
    assert (
        fork["session_id"] == "f-1"
        and fork["parent_session_id"] == "src"
        and fork["root_session_id"] == "src"
    )
    assert items(client, token(), "forking", "f-1") == ["a", "b"]
    append(client, token(), "forking", "f-1", "x")  # the fork goes on by itself
    assert items(client, token(), "forking", "f-1") == ["a", "b", "x"]
    assert items(client, token(), "forking", "src") == ["a", "b", "c", "d"]
    whole = client.post(
        f"{BASE}/forking/sessions:fork", headers=token(), json={"source_session_id": "src", "actor_id": "bob"}
    )
    assert items(client, token(), "forking", whole.json()["session_id"]) == ["a", "b", "c", "d"]
    r = client.post(
        f"{BASE}/forking/sessions:fork",
        headers=token(),
        json={"source_session_id": "f-1", "actor_id": "ann", "up_to_item_id": written[3]["item_id"]},
    )
    assert r.status_code == 400 and r.json()["details"][0]["field"] == "up_to_item_id"
    r = client.post(
        f"{BASE}/forking/sessions:fork", headers=token(), json={"source_session_id": "nope", "actor_id": "a"}
    )
    assert r.status_code == 404 and r.json()["error_code"] == "NOT_FOUND"


@pytest.mark.parametrize(
    ("body", "field", "status"),
    [
        ({"items": []}, "items", 400),
        ({"items": [{"data": i} for i in range(101)]}, "items", 400),
        ({"items": [{"data": "ok"}, {"data": "x" * (256 * 1024)}]}, "items[1].data", 413),
        ({"items": [{"data": "nul \u0000"}]}, "items[0].data", 400),
        ({"items": [{"value": 1}]}, None, 400),
    ],
)
def test_append_limits_name_the_field(client, token, body, field, status):
    make_store(client, token, "limits") if client.get(
        f"{BASE}/limits", headers=token()
    ).status_code == 404 else None
    if client.get(f"{BASE}/limits/sessions/s", headers=token()).status_code == 404:
        make_session(client, token, "limits", "u", "s")
    r = client.post(f"{BASE}/limits/sessions/s/items:append", headers=token(), json=body)
    assert r.status_code == status, r.text
    assert set(r.json()) >= {"error_code", "message"}
    if field is not None:
        assert r.json()["details"][0]["field"] == field


@pytest.mark.parametrize(
    ("method", "path", "params", "field"),
    [
        ("get", "/sessions", {"order_by": "name"}, "order_by"),
        ("get", "/sessions", {"filter": "owner = 'x'"}, "filter"),
        ("get", "/sessions/s/items", {"order_by": "position"}, "order_by"),
        (
            "get",
            "/sessions/s/items",
            {"page_token": "abc.defghijklmnopqrstuvwxyzabcdefghijklmnopqrstu"},
            "page_token",
        ),
        ("get", "/sessions/s/items", {"page_size": -1}, "page_size"),
    ],
)
def test_bad_list_parameters_are_400_naming_them(client, token, method, path, params, field):
    if client.get(f"{BASE}/params", headers=token()).status_code == 404:
        make_store(client, token, "params")
        make_session(client, token, "params", "u", "s")
    r = getattr(client, method)(f"{BASE}/params{path}", headers=token(), params=params)
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["error_code"] == "INVALID_PARAMETER_VALUE" and field in (
        body["details"][0].get("field"),
        body["message"],
    )


def test_privileges_and_grants(client, token):
    make_store(client, token, "governed")
    make_session(client, token, "governed", "ann", "s")
    append(client, token(), "governed", "s", "hello")
    stranger = token("stranger")
    for method, path, body in [
        ("get", "/sessions/s/items", None),
        ("post", "/sessions/s/items:append", {"items": [{"data": 1}]}),
        ("post", "/sessions", {"actor_id": "x"}),
        ("post", "/sessions/s/items:pop", {}),
    ]:
        kwargs = {"json": body} if body is not None else {}
        r = getattr(client, method)(f"{BASE}/governed{path}", headers=stranger, **kwargs)
        assert r.status_code == 403 and r.json()["error_code"] == "PERMISSION_DENIED", (path, r.text)
    r = client.post(
        f"{BASE}/governed/permissions:grant",
        headers=token(),
        json={"principal": {"name": "reader"}, "permission": "READ"},
    )
    assert r.status_code == 200 and r.json() == {}
    assert items(client, token("reader"), "governed", "s") == ["hello"]
    r = client.post(
        f"{BASE}/governed/sessions/s/items:append", headers=token("reader"), json={"items": [{"data": 1}]}
    )
    assert r.status_code == 403
    client.post(f"{BASE}/governed/permissions:grant", headers=token(), json={"principal": {"name": "writer"}})
    append(client, token("writer"), "governed", "s", "from writer")
    assert items(client, token("writer"), "governed", "s") == ["hello", "from writer"]
    r = client.get(f"{UC}/permissions/memory_store/main.default.governed", headers=token())
    held = {a["principal"]: sorted(a["privileges"]) for a in r.json()["privilege_assignments"]}
    assert held["reader"] == ["READ_MEMORY_STORE"] and held["writer"] == [
        "READ_MEMORY_STORE",
        "WRITE_MEMORY_STORE",
    ]
    # a non-manager may not grant
    r = client.post(
        f"{BASE}/governed/permissions:grant", headers=token("writer"), json={"principal": {"name": "z"}}
    )
    assert r.status_code == 403


def test_end_user_binding_holds_actors_to_the_end_user(client, token):
    make_store(client, token, "bound", scope_binding="end_user")
    client.post(f"{BASE}/bound/permissions:grant", headers=token(), json={"principal": {"name": "app"}})
    as_alice = token("app", on_behalf_of="alice")
    as_bob = token("app", on_behalf_of="bob")
    make_session(client, token, "bound", "alice", "a", headers=as_alice)
    make_session(client, token, "bound", "bob", "b", headers=as_bob)
    r = client.post(f"{BASE}/bound/sessions", headers=as_alice, json={"actor_id": "bob"})
    assert r.status_code == 403
    for path in ("/sessions/b", "/sessions/b/items"):
        assert client.get(f"{BASE}/bound{path}", headers=as_alice).status_code == 403
    r = client.post(f"{BASE}/bound/sessions/b/items:append", headers=as_alice, json={"items": [{"data": 1}]})
    assert r.status_code == 403
    listed = client.get(f"{BASE}/bound/sessions", headers=as_alice).json()["sessions"]
    assert [s["session_id"] for s in listed] == ["a"]
    r = client.post(
        f"{BASE}/bound/sessions:fork", headers=as_alice, json={"source_session_id": "b", "actor_id": "alice"}
    )
    assert r.status_code == 403


def test_one_audit_event_per_request_on_the_store(client, token):
    make_store(client, token, "audited")
    make_session(client, token, "audited", "ann", "s")
    append(client, token(), "audited", "s", "one", "two")
    r = client.get(
        f"{UC}/system/audit",
        headers=token(),
        params={"securable_full_name": "main.default.audited", "page_size": 100},
    )
    assert r.status_code == 200, r.text
    events = r.json()["events"]
    appends = [e for e in events if e["action_name"] == "sessions.write" and e["decision"] == "allow"]
    assert len(appends) == 2  # the session's creation and the one append of two items
    assert all(e["securable_type"] == "MEMORY_STORE" for e in events)
    client.get(f"{BASE}/audited/sessions/s/items", headers=token("stranger"))
    events = client.get(
        f"{UC}/system/audit",
        headers=token(),
        params={"securable_full_name": "main.default.audited", "principal": "stranger"},
    ).json()["events"]
    assert [(e["action_name"], e["decision"], e["status_code"]) for e in events] == [
        ("sessions.read", "deny", 403)
    ]


def test_erasing_an_actor_removes_its_sessions(client, token):
    make_store(client, token, "erasable")
    make_session(client, token, "erasable", "gone-user", "g")
    make_session(client, token, "erasable", "kept-user", "k")
    append(client, token(), "erasable", "g", "secret")
    append(client, token(), "erasable", "k", "kept")
    r = client.post(f"{UC}/system/erase-scope", headers=token(), json={"scope": "gone-user"})
    assert r.status_code == 200, r.text
    assert client.get(f"{BASE}/erasable/sessions/g", headers=token()).status_code == 404
    assert items(client, token(), "erasable", "k") == ["kept"]


def test_a_held_session_store_keeps_its_sessions_and_items(client, token):
    make_store(client, token, "held-chats")
    make_session(client, token, "held-chats", "user-h", "h-1")
    append(client, token(), "held-chats", "h-1", "first", "second")
    r = client.patch(
        f"{BASE}/held-chats", headers=token(), params={"update_mask": "legal_hold"}, json={"legal_hold": True}
    )
    assert r.status_code == 200, r.text
    refused = [
        client.post(f"{BASE}/held-chats/sessions/h-1/items:pop", headers=token(), json={}),
        client.post(f"{BASE}/held-chats/sessions/h-1/items:clear", headers=token(), json={}),
        client.delete(f"{BASE}/held-chats/sessions/h-1", headers=token()),
        client.delete(f"{BASE}/held-chats", headers=token()),
    ]
    for r in refused:
        assert r.status_code == 409, r.text
        assert r.json()["error_code"] == "RESOURCE_CONFLICT" and "legal hold" in r.json()["message"]
    append(client, token(), "held-chats", "h-1", "third")  # adding is still allowed
    r = client.post(f"{UC}/system/erase-scope", headers=token(), json={"scope": "user-h"})
    assert r.status_code == 200, r.text
    assert [name.rsplit(".", 1)[-1] for name in r.json()["held"]] == ["held-chats"]  # named as kept
    assert items(client, token(), "held-chats", "h-1") == ["first", "second", "third"]
    # erasing the person keeps their audit key too, since the hold keeps their sessions
    r = client.post(f"{UC}/system/erase-subject", headers=token(), json={"subject": "user-h"})
    assert r.status_code == 200, r.text
    assert r.json()["audit_key_destroyed"] is False and len(r.json()["held"]) == 1
    # setting and releasing a hold is the store's owner's or an admin's, and audited
    assert client.patch(
        f"{BASE}/held-chats", headers=token("bob"), json={"legal_hold": False}
    ).status_code in (403, 404)
    events = client.get(
        f"{UC}/system/audit", headers=token(), params={"action_name": "memory_store.update"}
    ).json()["events"]
    assert any(e["request_params"].get("legal_hold") == "true" for e in events)
    r = client.patch(f"{BASE}/held-chats", headers=token(), json={"legal_hold": False})
    assert r.status_code == 200, r.text
    popped = client.post(f"{BASE}/held-chats/sessions/h-1/items:pop", headers=token(), json={}).json()
    assert popped["item"]["data"] == "third"
    assert client.delete(f"{BASE}/held-chats/sessions/h-1", headers=token()).json() == {}
