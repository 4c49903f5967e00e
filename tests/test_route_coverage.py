"""Every route in the OpenAPI document: without a token it is 401, with a token that holds no
grant it is 403 (or 200 where the API opens it to every authenticated principal), and every
authenticated call goes through the one authorization seam."""

from __future__ import annotations

import re

import pytest
from rest import UC

from catalog.access.authorize import Authorizer

SCIM = "/api/2.0/preview/scim/v2/Groups"

OPEN_WITHOUT_TOKEN = {
    "health",
    "openapi",
    "docs",
    "getProtectedResourceMetadata",
    "getMcpProtectedResourceMetadata",
}
OPEN_TO_EVERYONE = {
    "getMetastoreSummary",
    "listCatalogs",
    "getEffectivePermissions",
    "listGroups",
    "agentsListMemoryStores",
    "agentsListSessionStores",
    "getCurrentUser",
    "agentsListMemoryPipelines",
}

BODIES = {
    "createCatalog": {"name": "walk_new"},
    "updateCatalog": {"comment": "x"},
    "createSchema": {"name": "x", "catalog_name": "walk"},
    "updateSchema": {"comment": "x"},
    "createMemoryStore": {"name": "x", "catalog_name": "walk", "schema_name": "s"},
    "updateMemoryStore": {"description": "x"},
    "updatePermissions": {"changes": [{"principal": "nobody", "add": ["MANAGE"]}]},
    "createGroup": {"displayName": "walkers"},
    "createEntry": {"path": "/notes.md", "contents": "x"},
    "updateEntry": {"scope": "u", "path": "/notes.md", "append": {"text": "x"}},
    "searchEntries": {"scope": "u", "query": "x"},
    "deleteMatchingEntries": {"scope": "u", "query": "x", "dry_run": True},
    "searchConversations": {"scope": "u", "query": "x"},
    "agentsSearchSessionItems": {"actor_id": "u", "query": "x"},
    "agentsCreateMemoryStore": {"display_name": "walk-new"},
    "agentsUpdateMemoryStore": {"description": "x"},
    "agentsGrantMemoryStorePermission": {
        "principal": {"type": "USER", "name": "nobody"},
        "permission": "READ",
    },
    "agentsCreateMemoryEntry": {"actor_id": "u", "path": "/a.md", "content": "x"},
    "agentsUpdateMemoryEntry": {"content": "x"},
    "agentsSearchMemoryEntries": {"actor_id": "u", "query": "x"},
    "agentsDeleteMatchingMemoryEntries": {"actor_id": "u", "query": "x"},
    "agentsCreateSessionStore": {"description": "x"},
    "agentsUpdateSessionStore": {"description": "x"},
    "agentsGrantSessionStorePermission": {"principal": {"name": "nobody"}, "permission": "READ"},
    "agentsCreateSession": {"actor_id": "u"},
    "agentsForkSession": {"source_session_id": "walk-session", "actor_id": "u"},
    "agentsUpdateSession": {"metadata": {"a": "b"}},
    "agentsAppendSessionItems": {"items": [{"data": "x"}]},
    "agentsPopSessionItem": {},
    "agentsClearSessionItems": {},
    "eraseScope": {"scope": "u"},
    "createConversation": {"memory_store": {"name": "walk.s.m"}, "scope": {"kind": "user", "value": "u"}},
    "updateConversation": {"metadata": {"k": "v"}},
    "createConversationItems": {"items": [{"role": "user", "content": "x"}]},
    "eraseSubject": {"subject": "nobody-at-all"},
    "batchCreateEntries": {"entries": [{"path": "/b.md", "contents": "x"}]},
    "restoreEntry": {"scope": "u", "path": "/notes.md", "etag": "1"},
    "redactEntryVersion": {"scope": "u", "path": "/notes.md", "etag": "1", "reason": "x"},
    "setEntryState": {"scope": "u", "path": "/notes.md", "state": "active"},
    "agentsExtractMemories": {"memory_store": "memory-stores/walk-store"},
    "createResponse": {"model": "m", "input": "x", "conversation": "{conversation_id}"},
    "patchGroup": {"Operations": [{"op": "add", "path": "members", "value": [{"value": "nobody"}]}]},
    "agentsCreateMemoryPipeline": {
        "session_store": "session-stores/walk-sessions",
        "memory_store": "walk-store",
    },
    "agentsUpdateMemoryPipeline": {"display_name": "x", "dreamer_policy": {"instructions": "x"}},
    "agentsRunMemoryPipeline": {},
    "importMemoryStore": {},  # not an archive: refused with 400 once authorized
    "setTrustPolicy": {},
    "testTrustPolicy": {"text": "x"},
    "reviewEntry": {"scope": "u", "path": "/notes.md", "decision": "approve"},
}
QUERIES = {
    "listSchemas": {"catalog_name": "walk"},
    "listMemoryStores": {"catalog_name": "walk", "schema_name": "s"},
    "createEntry": {"scope": "u"},
    "getEntry": {"scope": "u", "path": "/notes.md"},
    "listEntries": {"scope": "u"},
    "deleteEntry": {"scope": "u", "path": "/notes.md"},
    "getEntryHistory": {"scope": "u", "path": "/notes.md"},
    "batchCreateEntries": {"scope": "u"},
    "agentsCreateMemoryStore": {"managed_memory_store_id": "walk-new"},
    "agentsListMemoryEntries": {"actor_id": "u"},
    "agentsCreateSessionStore": {"session_store_name": "walk-new-sessions"},
    "getLineage": {"securable_full_name": "walk.s.m"},
    "listProvenance": {"securable_full_name": "walk.s.m"},
}


@pytest.fixture
def client(own_client):  # type: ignore[no-untyped-def]
    """An app and a database for each test: a walk sends every operation of the API, and one that
    got through (a refusal that regressed) would change what the next test walks."""
    return own_client


@pytest.fixture
def token(own_token):  # type: ignore[no-untyped-def]
    return own_token


@pytest.fixture
def walk(client, token):
    assert client.post(f"{UC}/catalogs", headers=token(), json={"name": "walk"}).status_code == 200
    assert (
        client.post(f"{UC}/schemas", headers=token(), json={"name": "s", "catalog_name": "walk"}).status_code
        == 200
    )
    body = {"name": "m", "catalog_name": "walk", "schema_name": "s"}
    assert client.post(f"{UC}/memory-stores", headers=token(), json=body).status_code == 200
    r = client.post(SCIM, headers=token(), json={"displayName": "walk_group"})
    assert r.status_code == 200, r.text
    group = r.json()
    r = client.post(
        "/api/2.0/agents/memory-stores",
        headers=token(),
        params={"managed_memory_store_id": "walk-store"},
        json={"display_name": "walk-store"},
    )
    assert r.status_code == 200, r.text
    r = client.post(
        "/ai-gateway/mlflow/v1/conversations",
        headers=token(),
        json={
            "memory_store": {"name": "walk.s.m"},
            "scope": {"kind": "user", "value": "u"},
            "items": [{"role": "user", "content": "x", "id": "walk-item"}],
        },
    )
    assert r.status_code == 200, r.text
    conversation_id = r.json()["id"]
    r = client.post(
        "/api/2.0/agents/session-stores",
        headers=token(),
        params={"session_store_name": "walk-sessions"},
        json={},
    )
    assert r.status_code == 200, r.text
    r = client.post(
        "/api/2.0/agents/session-stores/walk-sessions/sessions",
        headers=token(),
        params={"session_id": "walk-session"},
        json={"actor_id": "u"},
    )
    assert r.status_code == 200, r.text
    r = client.post(
        "/api/2.0/agents/memory-pipelines",
        headers=token(),
        json={"session_store": "session-stores/walk-sessions", "memory_store": "memory-stores/walk-store"},
    )
    assert r.status_code == 200, r.text
    pipeline_id = r.json()["name"].split("/")[1]
    return {"group_id": group["id"], "conversation_id": conversation_id, "pipeline_id": pipeline_id}


def _body(operation_id: str, walk: dict[str, str]) -> object:
    """The sample body, with the walk's ids put in (`"{conversation_id}"`)."""
    return {
        key: value.format(**walk) if isinstance(value, str) and value.startswith("{") else value
        for key, value in BODIES[operation_id].items()
    }


def _operations(client):
    doc = client.get("/openapi.json").json()
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            yield method.upper(), path, operation["operationId"]


def _fill(path: str, walk: dict[str, str]) -> str:
    values = {
        "name": "walk",
        "group_id": walk["group_id"],
        "securable_type": "catalog",
        "store_id": "walk-store",
        "entry_id": "00000000-0000-4000-8000-000000000000",
        "user_id": "admin",
        "conversation_id": walk["conversation_id"],
        "item_id": "walk-item",
        "store_name": "walk-sessions",
        "session_id": "walk-session",
        "pipeline_id": walk["pipeline_id"],
        "run_id": "1",
    }
    if "/schemas/" in path:
        values["full_name"] = "walk.s"
    elif "/memory-stores/" in path:
        values["full_name"] = "walk.s.m"
    else:
        values["full_name"] = "walk"
    return re.sub(r"\{(\w+)\}", lambda m: values[m[1]], path)


def test_every_route_refuses_strangers_and_asks_authorize(client, token, walk, monkeypatch):
    calls: list[str] = []
    original = Authorizer.check

    async def spy(self, principal, action, securable):  # type: ignore[no-untyped-def]
        calls.append(action.name)
        return await original(self, principal, action, securable)

    monkeypatch.setattr(Authorizer, "check", spy)
    seen = set()
    for method, path, operation_id in _operations(client):
        seen.add(operation_id)
        url = _fill(path, walk)
        kwargs = {"params": QUERIES.get(operation_id, {})}
        if method in ("POST", "PATCH", "PUT"):
            assert operation_id in BODIES, f"add a sample body for {operation_id}"
            kwargs["json"] = _body(operation_id, walk)
        anonymous = client.request(method, url, **kwargs)
        if operation_id in OPEN_WITHOUT_TOKEN:
            assert anonymous.status_code == 200, operation_id
            continue
        assert anonymous.status_code == 401, (operation_id, anonymous.text)
        calls.clear()
        r = client.request(method, url, headers=token("nobody"), **kwargs)
        expected = 200 if operation_id in OPEN_TO_EVERYONE else 403
        assert r.status_code == expected, (operation_id, r.status_code, r.text)
        assert calls, f"{operation_id} did not go through authorize"
    assert {"createCatalog", "updatePermissions", "createGroup", "deleteMemoryStore"} <= seen


def test_open_lists_show_a_stranger_nothing_private(client, token, walk):
    catalogs = [c["name"] for c in client.get(f"{UC}/catalogs", headers=token("nobody")).json()["catalogs"]]
    assert "walk" not in catalogs
    groups = client.get(SCIM, headers=token("nobody")).json()
    assert groups["Resources"] == [] and groups["totalResults"] == 0


def test_every_registered_action_is_used_by_a_route(client, token, walk, monkeypatch):
    """Walking every route (as a stranger and as the admin, who gets past every check) asks the
    authorizer about every action of the registry: none is dead, none is bypassed."""
    from catalog.access import ACTIONS

    asked: set[str] = set()
    original = Authorizer.authorize

    def spy(self, principal, action, securable):  # type: ignore[no-untyped-def]
        asked.add(action.name)
        return original(self, principal, action, securable)

    monkeypatch.setattr(Authorizer, "authorize", spy)
    for who in ("nobody", "admin"):
        # the admin asks about somebody else (the stranger about itself)
        extra_queries = {"getEffectivePermissions": {"principal": "somebody-else"}} if who == "admin" else {}
        # the MCP endpoint speaks JSON-RPC, outside the OpenAPI document (before the walk deletes the store)
        # a response without a conversation is authorized on the metastore (no LLM here: 501 after)
        stateless = client.post(
            "/ai-gateway/mlflow/v1/responses", headers=token(who), json={"model": "m", "input": "x"}
        )
        assert stateless.status_code == 501, stateless.text
        mcp = client.post(
            "/mcp/memory-stores/walk.s.m",
            headers={**token(who), "Accept": "application/json, text/event-stream"},
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        )
        assert mcp.status_code == (200 if who == "admin" else 403), mcp.text
        # changing what a pipeline does asks about every step of its runs, past the first check
        # (before the walk deletes the pipeline's stores)
        r = client.patch(
            f"/api/2.0/agents/memory-pipelines/{walk['pipeline_id']}",
            headers=token(who),
            json={"dreamer_policy": {"instructions": "x"}},
        )
        assert r.status_code == (200 if who == "admin" else 403), r.text
        for method, path, operation_id in _operations(client):
            if operation_id in OPEN_WITHOUT_TOKEN:
                continue
            kwargs = {"params": {**QUERIES.get(operation_id, {}), **extra_queries.get(operation_id, {})}}
            if method in ("POST", "PATCH", "PUT"):
                kwargs["json"] = _body(operation_id, walk)
            client.request(method, _fill(path, walk), headers=token(who), **kwargs)
    assert set(ACTIONS) - asked == set()


def test_no_route_answers_past_a_scope_limit(client, token, walk, own_settings):
    """A principal whose READ and WRITE are limited to scope `u` walks every route: each one that
    reaches data holds its scopes to the limit (a route that did not would be answered 403 by the
    backstop, naming the unchecked limit)."""
    limited = {"principal": "limited", "add": ["READ_MEMORY_STORE", "WRITE_MEMORY_STORE"], "scopes": ["u"]}
    agents_catalog = own_settings.agents_schema.split(".")[0]
    for name in {"walk", agents_catalog}:
        r = client.patch(
            f"{UC}/permissions/catalog/{name}",
            headers=token(),
            json={"changes": [{"principal": "limited", "add": ["USE_CATALOG", "USE_SCHEMA"]}, limited]},
        )
        assert r.status_code == 200, r.text
    answered = 0
    for method, path, operation_id in _operations(client):
        if operation_id in OPEN_WITHOUT_TOKEN:
            continue
        kwargs = {"params": QUERIES.get(operation_id, {})}
        if method in ("POST", "PATCH", "PUT"):
            kwargs["json"] = _body(operation_id, walk)
        r = client.request(method, _fill(path, walk), headers=token("limited"), **kwargs)
        assert "cannot hold to those scopes" not in r.text, (operation_id, r.text)
        answered += r.status_code < 300
    assert answered > 20  # the limit let the walk in
