"""Scope grants (row-filter style): a READ or WRITE grant limited to scopes (`team-a`, `team-a:*`)
applies only to the scopes its patterns match, in every dialect; the permissions API answers the
patterns, effective permissions explain them, and a refused scope is 403, audited with the
reason."""

from __future__ import annotations

import pytest
from rest import UC

NAME = "main.default.scoped"
STORE = f"{UC}/memory-stores/{NAME}"
PERMS = f"{UC}/permissions/memory_store/{NAME}"
AGENTS = "/api/2.0/agents/memory-stores"
TEXTS = {
    "team-a": "the team-a roadmap ships search in spring",
    "team-a:x": "project x in team-a uses the green theme",
    "team-a:y": "project y in team-a uses the blue theme",
    "team-b": "the team-b roadmap ships billing in spring",
    "team-ab": "a scope that only starts like team-a",
}


def patch(client, token, path: str, *changes: dict, who: str = "admin"):  # type: ignore[no-untyped-def]
    return client.patch(path, headers=token(who), json={"changes": list(changes)})


@pytest.fixture(scope="module", autouse=True)
def store(client, token):  # type: ignore[no-untyped-def]
    body = {"name": "scoped", "catalog_name": "main", "schema_name": "default"}
    assert client.post(f"{UC}/memory-stores", headers=token(), json=body).status_code == 200
    r = patch(
        client,
        token,
        PERMS,
        {"principal": "ann", "add": ["READ_MEMORY_STORE"], "scopes": ["team-a", "team-a:*"]},
        {"principal": "wes", "add": ["READ_MEMORY_STORE"]},
    )
    assert r.status_code == 200, r.text
    # a WRITE limited to team-a:x, granted on the schema: inherited by the store
    r = patch(
        client,
        token,
        f"{UC}/permissions/schema/main.default",
        {"principal": "wes", "add": ["USE_SCHEMA"]},
        {"principal": "ann", "add": ["USE_SCHEMA"]},
        {"principal": "wes", "add": ["WRITE_MEMORY_STORE"], "scopes": ["team-a:x"]},
    )
    assert r.status_code == 200, r.text
    for who in ("ann", "wes"):
        r = patch(client, token, f"{UC}/permissions/catalog/main", {"principal": who, "add": ["USE_CATALOG"]})
        assert r.status_code == 200, r.text
    for scope, text in TEXTS.items():
        r = client.post(
            f"{STORE}/entries",
            headers=token(),
            params={"scope": scope},
            json={"path": "/n.md", "contents": text},
        )
        assert r.status_code == 200, r.text


def get(client, token, who: str, scope: str):  # type: ignore[no-untyped-def]
    return client.get(f"{STORE}/entries:get", headers=token(who), params={"scope": scope, "path": "/n.md"})


def test_the_permissions_api_answers_the_patterns(client, token):
    r = client.get(PERMS, headers=token())
    assert r.status_code == 200, r.text
    by = {a["principal"]: a for a in r.json()["privilege_assignments"]}
    assert by["ann"]["privileges"] == ["READ_MEMORY_STORE"]
    assert by["ann"]["scopes"] == {"READ_MEMORY_STORE": ["team-a", "team-a:*"]}
    assert "scopes" not in by["wes"]  # every scope
    # effective permissions explain which pattern and where it was granted
    r = client.get(
        f"{UC}/effective-permissions/memory_store/{NAME}", headers=token(), params={"principal": "wes"}
    )
    assert r.status_code == 200, r.text
    held = [p for a in r.json()["privilege_assignments"] for p in a["privileges"]]
    read = next(p for p in held if p["privilege"] == "READ_MEMORY_STORE")
    write = next(p for p in held if p["privilege"] == "WRITE_MEMORY_STORE")
    assert "scopes" not in read
    assert write["scopes"] == ["team-a:x"]
    assert (write["inherited_from_type"], write["inherited_from_name"]) == ("SCHEMA", "main.default")


def test_a_reader_of_team_a_star_reads_team_a_scopes_and_nothing_else(client, token):
    for scope in ("team-a", "team-a:x", "team-a:y"):
        r = get(client, token, "ann", scope)
        assert r.status_code == 200 and r.json()["contents"] == TEXTS[scope], (scope, r.text)
    for scope in ("team-b", "team-ab", "other"):
        r = get(client, token, "ann", scope)
        assert r.status_code == 403, (scope, r.text)
        assert f"not scope '{scope}'" in r.json()["message"]
    # the unlimited reader reads everything
    assert get(client, token, "wes", "team-b").status_code == 200
    # lists and searches over several scopes need every one
    r = client.get(f"{STORE}/entries", headers=token("ann"), params={"scopes": ["team-a", "team-a:x"]})
    assert r.status_code == 200, r.text
    assert {e["scope"] for e in r.json()["entries"] if e["path"] == "/n.md"} == {"team-a", "team-a:x"}
    r = client.get(f"{STORE}/entries", headers=token("ann"), params={"scopes": ["team-a:x", "team-b"]})
    assert r.status_code == 403, r.text
    for mode in ("keyword", "hybrid"):
        body = {"scopes": ["team-a", "team-a:y"], "query": "roadmap theme", "mode": mode}
        r = client.post(f"{STORE}/entries:search", headers=token("ann"), json=body)
        assert r.status_code == 200, r.text
        assert {x["memory_entry"]["scope"] for x in r.json()["results"]} <= {"team-a", "team-a:y"}
        body["scopes"] = ["team-a", "team-b"]
        r = client.post(f"{STORE}/entries:search", headers=token("ann"), json=body)
        assert r.status_code == 403, r.text
    # a read grant gives no write, in any scope
    r = client.post(
        f"{STORE}/entries",
        headers=token("ann"),
        params={"scope": "team-a"},
        json={"path": "/w.md", "contents": "x"},
    )
    assert r.status_code == 403, r.text


def test_a_limited_writer_writes_only_its_scopes(client, token):
    r = client.post(
        f"{STORE}/entries",
        headers=token("wes"),
        params={"scope": "team-a:x"},
        json={"path": "/w.md", "contents": "wes was here"},
    )
    assert r.status_code == 200, r.text
    r = client.post(
        f"{STORE}/entries",
        headers=token("wes"),
        params={"scope": "team-a:y"},
        json={"path": "/w.md", "contents": "wes was here"},
    )
    assert r.status_code == 403 and "not scope 'team-a:y'" in r.json()["message"], r.text
    r = client.post(
        f"{STORE}/entries:batchCreate",
        headers=token("wes"),
        params={"scope": "team-b"},
        json={"entries": [{"path": "/w.md", "contents": "x"}]},
    )
    assert r.status_code == 403, r.text
    assert get(client, token, "admin", "team-a:y").json()["contents"] == TEXTS["team-a:y"]


def test_the_agent_dialect_holds_actor_ids_to_the_patterns(client, token, settings):
    r = client.post(AGENTS, headers=token(), params={"managed_memory_store_id": "scoped-agents"}, json={})
    assert r.status_code == 200, r.text
    base = f"{AGENTS}/scoped-agents"
    full_name = f"{settings.agents_schema}.scoped-agents"
    catalog = settings.agents_schema.split(".")[0]
    for kind, name, privilege in [
        ("catalog", catalog, "USE_CATALOG"),
        ("schema", settings.agents_schema, "USE_SCHEMA"),
    ]:
        assert (
            patch(
                client, token, f"{UC}/permissions/{kind}/{name}", {"principal": "ann", "add": [privilege]}
            ).status_code
            == 200
        )
    r = patch(
        client,
        token,
        f"{UC}/permissions/memory_store/{full_name}",
        {"principal": "ann", "add": ["READ_MEMORY_STORE"], "scopes": ["team-a:*"]},
    )
    assert r.status_code == 200, r.text
    ids = {}
    for actor in ("team-a:x", "team-b"):
        body = {"actor_id": actor, "path": "/n.md", "content": TEXTS[actor]}
        r = client.post(f"{base}/entries", headers=token(), json=body)
        assert r.status_code == 200, r.text
        ids[actor] = r.json()["name"].rsplit("/", 1)[1]
    r = client.post(
        f"{base}/entries:search", headers=token("ann"), json={"actor_id": "team-a:x", "query": "theme"}
    )
    assert r.status_code == 200 and r.json()["results"], r.text
    r = client.post(
        f"{base}/entries:search", headers=token("ann"), json={"actor_id": "team-b", "query": "roadmap"}
    )
    assert r.status_code == 403, r.text
    r = client.get(f"{base}/entries", headers=token("ann"), params={"actor_id": "team-b"})
    assert r.status_code == 403, r.text
    # by id: the entry's own scope is held to the patterns
    assert client.get(f"{base}/entries/{ids['team-a:x']}", headers=token("ann")).status_code == 200
    r = client.get(f"{base}/entries/{ids['team-b']}", headers=token("ann"))
    assert r.status_code == 403 and "not scope 'team-b'" in r.json()["message"], r.text


def test_a_refused_scope_is_audited_with_the_reason(client, token):
    """The reason names the grant and where it was made, and the patterns and the scope refused as
    their pseudonyms: the refused scope as the event's `scope` holds it."""
    refused = get(client, token, "ann", "team-b")
    assert refused.status_code == 403
    r = client.get(f"{UC}/system/audit", headers=token(), params={"principal": "ann", "decision": "deny"})
    assert r.status_code == 200, r.text
    event = next(e for e in r.json()["events"] if e["request_id"] == refused.headers["x-request-id"])
    reason = event["reason"]
    assert event["action_name"] == "entries.read", event
    assert reason.startswith(f"READ_MEMORY_STORE on memory store {NAME} for scopes ps_"), reason
    assert reason.endswith(f", not scope '{event['request_params']['scope']}'"), reason
    assert "team-" not in reason, reason


def test_changing_the_patterns(client, token):
    who = {"principal": "cy", "add": ["READ_MEMORY_STORE"], "scopes": ["p:1"]}
    assert patch(client, token, PERMS, who).status_code == 200
    assert patch(client, token, PERMS, {**who, "scopes": ["p:2", "p:1"]}).status_code == 200

    def patterns() -> dict:
        r = client.get(PERMS, headers=token(), params={"principal": "cy"})
        return {a["principal"]: a.get("scopes") for a in r.json()["privilege_assignments"]}

    assert patterns() == {"cy": {"READ_MEMORY_STORE": ["p:1", "p:2"]}}
    r = patch(client, token, PERMS, {"principal": "cy", "remove": ["READ_MEMORY_STORE"], "scopes": ["p:1"]})
    assert r.status_code == 200, r.text
    assert patterns() == {"cy": {"READ_MEMORY_STORE": ["p:2"]}}
    # the last pattern removed: the grant goes
    r = patch(client, token, PERMS, {"principal": "cy", "remove": ["READ_MEMORY_STORE"], "scopes": ["p:2"]})
    assert r.status_code == 200 and patterns() == {}, r.text
    # a grant without scopes is every scope; patterns cannot be taken from it
    assert patch(client, token, PERMS, {"principal": "cy", "add": ["READ_MEMORY_STORE"]}).status_code == 200
    assert patterns() == {"cy": None}
    r = patch(client, token, PERMS, {"principal": "cy", "remove": ["READ_MEMORY_STORE"], "scopes": ["p:2"]})
    assert r.status_code == 400 and r.json()["details"][0]["field"] == "changes[0].scopes", r.text
    # adding patterns to it keeps it for every scope
    assert patch(client, token, PERMS, who).status_code == 200 and patterns() == {"cy": None}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"principal": "x", "add": ["MANAGE"], "scopes": ["a"]}, "changes[0].scopes"),
        ({"principal": "x", "add": ["READ_MEMORY_STORE"], "scopes": ["a*b"]}, "changes[0].scopes[0]"),
        ({"principal": "x", "add": ["READ_MEMORY_STORE"], "scopes": []}, "changes[0].scopes"),
        (
            {"principal": "x", "add": ["READ_MEMORY_STORE"], "scopes": [f"s{i}" for i in range(21)]},
            "changes[0].scopes",
        ),
        (
            {"principal": "x", "add": ["READ_MEMORY_STORE"], "scopes": ["ok", "bad\u0001"]},
            "changes[0].scopes[1]",
        ),
    ],
)
def test_bad_patterns_are_refused_naming_the_field(client, token, change, field):
    r = patch(client, token, PERMS, change)
    assert r.status_code == 400, r.text
    assert r.json()["details"][0]["field"] == field, r.text


def test_a_revoked_limit_takes_effect_on_the_next_request(client, token):
    change = {"principal": "dee", "add": ["READ_MEMORY_STORE"], "scopes": ["team-b"]}
    assert patch(client, token, PERMS, change).status_code == 200
    for principal in ("dee",):
        patch(
            client, token, f"{UC}/permissions/catalog/main", {"principal": principal, "add": ["USE_CATALOG"]}
        )
        patch(
            client,
            token,
            f"{UC}/permissions/schema/main.default",
            {"principal": principal, "add": ["USE_SCHEMA"]},
        )
    assert get(client, token, "dee", "team-b").status_code == 200
    assert get(client, token, "dee", "team-a").status_code == 403
    # widened to every scope
    assert patch(client, token, PERMS, {"principal": "dee", "add": ["READ_MEMORY_STORE"]}).status_code == 200
    assert get(client, token, "dee", "team-a").status_code == 200


CONV = "/ai-gateway/mlflow/v1/conversations"


def test_conversations_and_transcripts_are_held_to_the_patterns(client, token):
    made = {}
    for scope in ("team-a:x", "team-b"):
        body = {
            "items": [{"type": "message", "role": "user", "content": f"the {scope} launch date is friday"}],
            "memory_store": {"name": NAME},
            "scope": {"kind": "user", "value": scope},
        }
        r = client.post(CONV, headers=token(), json=body)
        assert r.status_code == 200, r.text
        made[scope] = r.json()["id"]
    assert client.get(f"{CONV}/{made['team-a:x']}/items", headers=token("ann")).status_code == 200
    r = client.get(f"{CONV}/{made['team-b']}/items", headers=token("ann"))
    assert r.status_code == 403 and "not scope 'team-b'" in r.json()["message"], r.text
    assert client.get(f"{CONV}/{made['team-b']}", headers=token("ann")).status_code == 403
    search = f"{STORE}/conversations:search"
    r = client.post(search, headers=token("ann"), json={"scope": "team-a:x", "query": "launch date"})
    assert r.status_code == 200 and r.json()["results"], r.text
    r = client.post(search, headers=token("ann"), json={"scopes": ["team-a:x", "team-b"], "query": "launch"})
    assert r.status_code == 403, r.text


def test_mcp_tool_calls_are_held_to_the_patterns(client, token):
    def call(on_behalf_of: str) -> dict:
        r = client.post(
            f"/mcp/memory-stores/{NAME}",
            headers={
                **token("ann", on_behalf_of=on_behalf_of),
                "Accept": "application/json, text/event-stream",
            },
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "search_memory", "arguments": {"query": "theme"}},
            },
        )
        assert r.status_code == 200, r.text
        return r.json()["result"]

    allowed = call("team-a:x")
    assert not allowed["isError"], allowed
    assert "green theme" in allowed["content"][0]["text"]
    refused = call("team-b")
    assert refused["isError"] and "not scope 'team-b'" in refused["content"][0]["text"], refused


def test_a_list_of_sessions_shows_only_the_scopes_of_the_limit(client, token, settings):
    sessions = "/api/2.0/agents/session-stores"
    r = client.post(sessions, headers=token(), params={"session_store_name": "scoped-sessions"}, json={})
    assert r.status_code == 200, r.text
    for actor in ("team-a:x", "team-b"):
        r = client.post(
            f"{sessions}/scoped-sessions/sessions",
            headers=token(),
            params={"session_id": f"s-{actor.replace(':', '-')}"},
            json={"actor_id": actor},
        )
        assert r.status_code == 200, r.text
    catalog = settings.agents_schema.split(".")[0]
    for kind, name, privilege in [
        ("catalog", catalog, "USE_CATALOG"),
        ("schema", settings.agents_schema, "USE_SCHEMA"),
    ]:
        assert (
            patch(
                client, token, f"{UC}/permissions/{kind}/{name}", {"principal": "sid", "add": [privilege]}
            ).status_code
            == 200
        )
    change = {"principal": "sid", "add": ["READ_MEMORY_STORE"], "scopes": ["team-a:*"]}
    r = patch(
        client, token, f"{UC}/permissions/memory_store/{settings.agents_schema}.scoped-sessions", change
    )
    assert r.status_code == 200, r.text
    r = client.get(f"{sessions}/scoped-sessions/sessions", headers=token("sid"))
    assert r.status_code == 200, r.text
    assert [s["actor_id"] for s in r.json()["sessions"]] == ["team-a:x"]
    r = client.get(
        f"{sessions}/scoped-sessions/sessions", headers=token("sid"), params={"filter": 'actor_id="team-b"'}
    )
    assert r.status_code == 403, r.text


def test_the_backstop_refuses_an_answer_whose_scopes_were_not_held(client, token, monkeypatch):
    """Were a route to answer without holding its scopes to a limit, the answer would be refused
    (403, audited) rather than sent."""
    from catalog.access.seam import Access

    monkeypatch.setattr(Access, "hold_scopes", lambda self, principal, securable, scopes: None)
    r = get(client, token, "ann", "team-b")
    assert r.status_code == 403 and "cannot hold to those scopes" in r.json()["message"], r.text
    assert TEXTS["team-b"] not in r.text
    monkeypatch.undo()
    event = client.get(
        f"{UC}/system/audit",
        headers=token(),
        params={"principal": "ann", "decision": "deny", "max_results": 5},
    ).json()["events"][0]
    assert event["request_id"] == r.headers["x-request-id"] and event["status_code"] == 403, event


def test_the_console_shows_a_limited_reader_only_its_scopes(client, token, settings):
    from catalog.auth import mint_dev_token

    client.cookies.clear()
    try:
        r = client.post(
            "/console/sign-in", data={"token": mint_dev_token(settings, "ann")}, follow_redirects=False
        )
        assert r.status_code == 303, r.text
        page = client.get(f"/console/stores/{NAME}", params={"scope": "team-a:x"})
        assert page.status_code == 200 and 'id="entries-scope"' in page.text, page.text
        assert TEXTS["team-a:x"] in page.text or "/n.md" in page.text
        refused = client.get(f"/console/stores/{NAME}", params={"scope": "team-b"})
        assert TEXTS["team-b"] not in refused.text and "/n.md" not in refused.text
        assert "not scope &#39;team-b&#39;" in refused.text or "not scope 'team-b'" in refused.text, (
            refused.text
        )
    finally:
        client.cookies.clear()
