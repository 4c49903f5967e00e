"""Scope binding, multi-scope reads and erasure (the right to be forgotten)."""

from __future__ import annotations

import httpx
import pytest
from rest import UC

STORE = f"{UC}/memory-stores/main.default.bound"
ENTRIES = f"{STORE}/entries"


def create_bound_store(client, token, name: str) -> str:
    """A store whose scopes are bound to the end user, sharing `team-support`; `support-app` may
    read and write it."""
    r = client.post(
        f"{UC}/memory-stores",
        headers=token(),
        json={
            "name": name,
            "catalog_name": "main",
            "schema_name": "default",
            "scope_binding": "end_user",
            "shared_scopes": ["team-support"],
        },
    )
    assert r.status_code == 200, r.text
    assert r.json()["scope_binding"] == "end_user" and r.json()["shared_scopes"] == ["team-support"]
    r = client.patch(
        f"{UC}/permissions/memory_store/main.default.{name}",
        headers=token(),
        json={"changes": [{"principal": "support-app", "add": ["READ_MEMORY_STORE", "WRITE_MEMORY_STORE"]}]},
    )
    assert r.status_code == 200, r.text
    return f"{UC}/memory-stores/main.default.{name}"


@pytest.fixture(scope="module", autouse=True)
def bound(client, token) -> str:  # type: ignore[no-untyped-def]
    return create_bound_store(client, token, "bound")


def as_app(token, user=None):  # type: ignore[no-untyped-def]
    return token("support-app", on_behalf_of=user) if user else token("support-app")


def test_end_user_binding_allows_own_composite_and_shared_scopes(client, token):
    for scope in ("alice", "alice:project-x", "team-support"):
        r = client.post(
            ENTRIES,
            headers=as_app(token, "alice"),
            params={"scope": scope},
            json={"path": "/note.md", "contents": f"kayak notes for {scope}"},
        )
        assert r.status_code == 200, (scope, r.text)


def test_end_user_binding_refuses_other_scopes_with_a_reason(client, token):
    for scope in ("bob", "alicex", "bob:alice", "team-sales"):
        r = client.post(
            ENTRIES,
            headers=as_app(token, "alice"),
            params={"scope": scope},
            json={"path": "/note.md", "contents": "x"},
        )
        assert r.status_code == 403, scope
        assert "binds scopes to the end user" in r.json()["message"]
        # the audit log records a denial (the privilege was held, the binding refused), and the
        # reason names no scope
        events = client.get(f"{UC}/system/audit", headers=token(), params={"page_size": 20}).json()
        event = next(e for e in events["events"] if e["request_id"] == r.headers["x-request-id"])
        assert (event["decision"], event["status_code"], event["privilege"]) == (
            "deny",
            403,
            "WRITE_MEMORY_STORE",
        )
        assert scope not in event["reason"]
    # reads are bound too: get, list, search
    r = client.get(
        f"{STORE}/entries:get", headers=as_app(token, "bob"), params={"scope": "alice", "path": "/note.md"}
    )
    assert r.status_code == 403
    assert client.get(ENTRIES, headers=as_app(token, "bob"), params={"scope": "alice"}).status_code == 403
    r = client.post(
        f"{STORE}/entries:search",
        headers=as_app(token, "bob"),
        json={"scopes": ["bob", "alice"], "query": "kayak"},
    )
    assert r.status_code == 403
    # without on_behalf_of, the token's subject is the end user: the app's own name
    r = client.post(
        ENTRIES, headers=as_app(token), params={"scope": "alice"}, json={"path": "/n.md", "contents": "x"}
    )
    assert r.status_code == 403


def test_multi_scope_search_and_list_say_where_each_entry_came_from(client, token):
    written = [
        ("mia", "/multi/own.md"),
        ("mia:project-y", "/multi/project.md"),
        ("team-support", "/multi/mia.md"),
    ]
    for scope, path in written:
        r = client.post(
            ENTRIES,
            headers=as_app(token, "mia"),
            params={"scope": scope},
            json={"path": path, "contents": f"canoe log of {scope}"},
        )
        assert r.status_code == 200, (scope, r.text)
    r = client.post(
        f"{STORE}/entries:search",
        headers=as_app(token, "mia"),
        json={"scopes": ["mia", "mia:project-y", "team-support"], "query": "canoe", "mode": "keyword"},
    )
    assert r.status_code == 200, r.text
    hits = {(x["memory_entry"]["scope"], x["memory_entry"]["path"]) for x in r.json()["results"]}
    assert hits == set(written)
    r = client.get(
        ENTRIES,
        headers=as_app(token, "mia"),
        params={"scopes": ["mia", "team-support"], "path_prefix": "/multi/"},
    )
    assert r.status_code == 200, r.text
    listed = {(e["scope"], e["path"]) for e in r.json()["entries"]}
    assert listed == {("mia", "/multi/own.md"), ("team-support", "/multi/mia.md")}


def test_binding_is_set_by_manage_only(client, token):
    store = create_bound_store(client, token, "rebound")  # its own: the test changes the store
    r = client.patch(store, headers=as_app(token, "alice"), json={"scope_binding": "caller"})
    assert r.status_code == 403
    r = client.post(
        f"{store}/entries",
        headers=as_app(token, "alice"),
        params={"scope": "team-sales"},
        json={"path": "/s.md", "contents": "x"},
    )
    assert r.status_code == 403  # not shared yet
    r = client.patch(store, headers=token(), json={"shared_scopes": ["team-support", "team-sales"]})
    assert r.status_code == 200 and r.json()["shared_scopes"] == ["team-support", "team-sales"]
    r = client.post(
        f"{store}/entries",
        headers=as_app(token, "alice"),
        params={"scope": "team-sales"},
        json={"path": "/s.md", "contents": "x"},
    )
    assert r.status_code == 200
    r = client.patch(store, headers=token(), json={"scope_binding": "sometimes"})
    assert r.status_code == 400
    assert client.get(store, headers=token()).json()["scope_binding"] == "end_user"


def test_erase_a_scope_in_one_store(client, token):
    for i in range(3):
        r = client.post(
            ENTRIES,
            headers=as_app(token, "carol"),
            params={"scope": "carol"},
            json={"path": f"/c{i}.md", "contents": f"carol likes walruses {i}"},
        )
        assert r.status_code == 200, r.text
    r = client.post(
        f"{STORE}/entries:search",
        headers=as_app(token, "carol"),
        json={"scope": "carol", "query": "walruses", "mode": "keyword"},
    )
    assert len(r.json()["results"]) == 3  # found before the erasure
    assert (
        client.delete(
            ENTRIES, headers=as_app(token, "dave"), params={"scope": "carol", "all": "true"}
        ).status_code
        == 403
    )
    r = client.delete(ENTRIES, headers=as_app(token, "carol"), params={"scope": "carol", "all": "true"})
    assert r.status_code == 200 and r.json() == {}
    assert (
        client.get(ENTRIES, headers=as_app(token, "carol"), params={"scope": "carol"}).json()["entries"] == []
    )
    for mode in ("keyword", "semantic", "hybrid"):
        r = client.post(
            f"{STORE}/entries:search",
            headers=as_app(token, "carol"),
            json={"scope": "carol", "query": "walruses", "mode": mode},
        )
        assert r.json()["results"] == [], mode


def test_erase_a_scope_everywhere(client, token, database_url, tmp_path, live_server):
    r = client.post(
        f"{UC}/memory-stores",
        headers=token(),
        json={"name": "other", "catalog_name": "main", "schema_name": "default"},
    )
    assert r.status_code == 200, r.text
    for url, headers, scope, body in [
        (
            f"{UC}/memory-stores/main.default.other/entries",
            token(),
            "erin",
            {"path": "/e.md", "contents": "erin owns a narwhal"},
        ),
        (ENTRIES, as_app(token, "erin"), "erin", {"path": "/e.md", "contents": "erin narwhal"}),
        (ENTRIES, as_app(token, "erin"), "erin:work", {"path": "/w.md", "contents": "narwhal"}),
    ]:
        r = client.post(url, headers=headers, params={"scope": scope}, json=body)
        assert r.status_code == 200, r.text
    other = live_server(tmp_path / "second", env={"CATALOG_DATABASE_URL": database_url})
    try:
        headers = {"Authorization": f"Bearer {other.cli('token', '--sub', 'admin').stdout.strip()}"}
        search = {"scope": "erin", "query": "narwhal", "mode": "keyword"}
        assert httpx.post(
            f"{other.url}{UC}/memory-stores/main.default.other/entries:search", headers=headers, json=search
        ).json()["results"]
        assert (
            client.post(
                f"{UC}/system/erase-scope", headers=as_app(token, "erin"), json={"scope": "erin"}
            ).status_code
            == 403
        )
        r = client.post(f"{UC}/system/erase-scope", headers=token(), json={"scope": "erin"})
        assert r.status_code == 200, r.text
        assert r.json() == {
            "scope": "erin",
            "deleted": 2,
            "stores": [
                {"memory_store": "main.default.bound", "deleted": 1},
                {"memory_store": "main.default.other", "deleted": 1},
            ],
            "also_deleted": {"conversations": 0, "sessions": 0},
            "held": [],
        }
        # gone in the other process too, in every mode; the composite scope is a scope of its own
        for mode in ("keyword", "semantic", "hybrid"):
            r = httpx.post(
                f"{other.url}{UC}/memory-stores/main.default.other/entries:search",
                headers=headers,
                json={**search, "mode": mode},
            )
            assert r.json()["results"] == [], mode
        r = client.get(
            f"{STORE}/entries:get",
            headers=as_app(token, "erin"),
            params={"scope": "erin:work", "path": "/w.md"},
        )
        assert r.status_code == 200 and r.json()["contents"] == "narwhal"
        r = httpx.get(
            f"{other.url}{UC}/memory-stores/main.default.other/entries:get",
            headers=headers,
            params={"scope": "erin", "path": "/e.md"},
        )
        assert r.status_code == 404
    finally:
        other.stop()
    # and after a restart of that process
    again = live_server(tmp_path / "second", env={"CATALOG_DATABASE_URL": database_url})
    try:
        headers = {"Authorization": f"Bearer {again.cli('token', '--sub', 'admin').stdout.strip()}"}
        r = httpx.post(
            f"{again.url}{UC}/memory-stores/main.default.other/entries:search",
            headers=headers,
            json={"scope": "erin", "query": "narwhal"},
        )
        assert r.json()["results"] == []
    finally:
        again.stop()
