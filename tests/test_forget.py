"""Forget by query: `entries:deleteMatching` deletes the entries that the same search as
`entries:search` answers at or above the floor (0.5 by default), at most 100 a request, in one
transaction with its one audit event; it needs WRITE and READ, a legal hold refuses it, a dry run
names the entries and deletes nothing. The agent dialect's twin, and the Python client, too."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from rest import UC
from stores import make_store

from catalog.entries.schemas import DELETE_MATCHING_FLOOR, MAX_DELETE_MATCHING

AGENTS = "/api/2.0/agents/memory-stores"
TEXTS = {
    "/divorce.md": "The divorce from Sam was finalised in May",
    "/lawyer.md": "The divorce lawyer is Ms Park, who handled the divorce papers",
    "/food.md": "Likes ramen and green tea",
    "/work.md": "Works as a nurse at the city hospital",
}
MATCHING = {"/divorce.md", "/lawyer.md"}


def new_store(client, token, **properties: str) -> tuple[str, str]:  # type: ignore[no-untyped-def]
    """A store of the test's own: (its full name, its base URL)."""
    name = f"forget_{uuid.uuid4().hex[:8]}"
    return f"main.default.{name}", make_store(client, token, name, **properties)


def write(client, token, base: str, scope: str, texts: dict[str, str]) -> None:  # type: ignore[no-untyped-def]
    for path, contents in texts.items():
        r = client.post(
            f"{base}/entries",
            headers=token(),
            params={"scope": scope},
            json={"path": path, "contents": contents},
        )
        assert r.status_code == 200, r.text


def paths(client, token, base: str, scope: str) -> set[str]:  # type: ignore[no-untyped-def]
    r = client.get(f"{base}/entries", headers=token(), params={"scope": scope, "page_size": 20})
    assert r.status_code == 200, r.text
    return {e["path"] for e in r.json()["entries"]}


def forget(client, token, base: str, who: str = "admin", **body: Any):  # type: ignore[no-untyped-def]
    return client.post(f"{base}/entries:deleteMatching", headers=token(who), json=body)


def grant(client, token, full_name: str, principal: str, *privileges: str, scopes=None) -> None:  # type: ignore[no-untyped-def]
    change: dict[str, Any] = {"principal": principal, "add": list(privileges)}
    if scopes is not None:
        change["scopes"] = scopes
    r = client.patch(
        f"{UC}/permissions/memory_store/{full_name}", headers=token(), json={"changes": [change]}
    )
    assert r.status_code == 200, r.text


def events(client, token, full_name: str) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    r = client.get(
        f"{UC}/system/audit",
        headers=token(),
        params={"securable_full_name": full_name, "order": "asc", "page_size": 1000},
    )
    assert r.status_code == 200, r.text
    found: list[dict[str, Any]] = r.json()["events"]
    return found


def forgetting(event: dict[str, Any]) -> bool:
    """An event of a delete by query that got past its checks (it records its own parameters)."""
    return "dry_run" in (event.get("request_params") or {})


def test_the_matches_at_the_floor_go_and_the_others_stay(client, token):
    _, base = new_store(client, token)
    write(client, token, base, "ann", TEXTS)
    # the same ranking as a search at the floor: what it answers is what goes
    r = client.post(
        f"{base}/entries:search",
        headers=token(),
        json={"scope": "ann", "query": "the divorce", "min_score": DELETE_MATCHING_FLOOR, "top_k": 100},
    )
    assert r.status_code == 200, r.text
    searched = [hit["memory_entry"]["path"] for hit in r.json()["results"]]
    assert set(searched) == MATCHING

    r = forget(client, token, base, scope="ann", query="the divorce")
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer == {"deleted": [{"scope": "ann", "path": p} for p in searched], "truncated": False}
    assert paths(client, token, base, "ann") == set(TEXTS) - MATCHING

    # a search afterwards no longer finds them; asking again deletes nothing more
    r = client.post(f"{base}/entries:search", headers=token(), json={"scope": "ann", "query": "the divorce"})
    assert MATCHING.isdisjoint(hit["memory_entry"]["path"] for hit in r.json()["results"])
    r = forget(client, token, base, scope="ann", query="the divorce")
    assert r.status_code == 200 and r.json() == {"deleted": [], "truncated": False}
    assert paths(client, token, base, "ann") == set(TEXTS) - MATCHING


def test_a_higher_floor_and_keyword_mode_narrow_it(client, token):
    _, base = new_store(client, token)
    write(client, token, base, "ann", TEXTS)
    # keyword: the share of the query's term weight; "lawyer" is only in one entry, "divorce" in two
    r = forget(
        client, token, base, scope="ann", query="divorce lawyer", mode="keyword", min_score=0.99, dry_run=True
    )
    assert r.status_code == 200, r.text
    assert [e["path"] for e in r.json()["deleted"]] == ["/lawyer.md"]
    r = forget(client, token, base, scope="ann", query="divorce lawyer", mode="keyword", min_score=0.99)
    assert [e["path"] for e in r.json()["deleted"]] == ["/lawyer.md"]
    assert paths(client, token, base, "ann") == set(TEXTS) - {"/lawyer.md"}


def test_a_dry_run_names_the_same_and_deletes_nothing(client, token):
    _, base = new_store(client, token)
    write(client, token, base, "ann", TEXTS)
    dry = forget(client, token, base, scope="ann", query="the divorce", dry_run=True)
    assert dry.status_code == 200, dry.text
    assert {e["path"] for e in dry.json()["deleted"]} == MATCHING
    assert paths(client, token, base, "ann") == set(TEXTS)
    real = forget(client, token, base, scope="ann", query="the divorce")
    assert real.json() == dry.json()
    assert paths(client, token, base, "ann") == set(TEXTS) - MATCHING


def test_at_most_a_hundred_a_request_and_truncated_says_more_matched(client, token):
    _, base = new_store(client, token)
    many = [{"path": f"/zebra/{i:03d}.md", "contents": f"a zebra sighting number {i}"} for i in range(105)]
    for chunk in (many[:100], many[100:]):
        r = client.post(
            f"{base}/entries:batchCreate", headers=token(), params={"scope": "ann"}, json={"entries": chunk}
        )
        assert r.status_code == 200, r.text
        assert {x["status"] for x in r.json()["results"]} == {"CREATED"}
    write(client, token, base, "ann", {"/food.md": TEXTS["/food.md"]})

    dry = forget(client, token, base, scope="ann", query="zebra sighting", dry_run=True)
    assert dry.status_code == 200, dry.text
    assert len(dry.json()["deleted"]) == MAX_DELETE_MATCHING and dry.json()["truncated"] is True
    first = forget(client, token, base, scope="ann", query="zebra sighting")
    assert first.status_code == 200, first.text
    assert len(first.json()["deleted"]) == MAX_DELETE_MATCHING and first.json()["truncated"] is True
    gone = {e["path"] for e in first.json()["deleted"]}
    assert len(gone) == MAX_DELETE_MATCHING and all(p.startswith("/zebra/") for p in gone)

    second = forget(client, token, base, scope="ann", query="zebra sighting")
    assert second.status_code == 200, second.text
    assert len(second.json()["deleted"]) == 5 and second.json()["truncated"] is False
    assert gone.isdisjoint(e["path"] for e in second.json()["deleted"])
    assert paths(client, token, base, "ann") == {"/food.md"}


def test_one_audit_event_with_the_count_and_the_history_keeps_the_versions(client, token):
    full_name, base = new_store(client, token)
    write(client, token, base, "ann", TEXTS)
    r = forget(client, token, base, scope="ann", query="the divorce", min_score=0.5)
    assert r.status_code == 200, r.text
    dry = forget(client, token, base, scope="ann", query="the divorce", dry_run=True)
    assert dry.status_code == 200, dry.text

    recorded = [e for e in events(client, token, full_name) if forgetting(e)]
    assert len(recorded) == 2  # one for the request, whatever it deleted, one for the dry run
    real, dry_event = recorded
    assert real["action_name"] == "entries.write" and real["decision"] == "allow"
    assert real["status_code"] == 200 and real["result_count"] == 2
    params = real["request_params"]
    assert params["dry_run"] == "false" and params["min_score"] == "0.5" and params["mode"] == "hybrid"
    assert params["truncated"] == "false"
    assert "divorce" not in str(real)  # the query's text is the body's: never audited
    assert dry_event["request_params"]["dry_run"] == "true" and dry_event["result_count"] == 0

    # deleted as by any delete: the history keeps every version, the delete last
    for path in MATCHING:
        r = client.get(f"{base}/entries:history", headers=token(), params={"scope": "ann", "path": path})
        assert r.status_code == 200, r.text
        versions = r.json()["versions"]
        assert [v["operation"] for v in versions] == ["delete", "create"]
        assert versions[1]["contents"] == TEXTS[path]
        assert versions[0]["updated_by"] == "admin"
    assert client.get(f"{UC}/system/audit:verify", headers=token()).json()["ok"] is True


def test_a_legal_hold_refuses_it_and_nothing_goes(client, token):
    _, base = new_store(client, token)
    write(client, token, base, "ann", TEXTS)
    r = client.patch(base, headers=token(), json={"legal_hold": True})
    assert r.status_code == 200, r.text
    for dry_run in (False, True):  # a dry run answers what the request would: refused too
        r = forget(client, token, base, scope="ann", query="the divorce", dry_run=dry_run)
        assert r.status_code == 409, r.text
        assert r.json()["error_code"] == "RESOURCE_CONFLICT" and "legal hold" in r.json()["message"]
    assert paths(client, token, base, "ann") == set(TEXTS)
    r = client.patch(base, headers=token(), json={"legal_hold": False})
    assert r.status_code == 200, r.text
    r = forget(client, token, base, scope="ann", query="the divorce")
    assert r.status_code == 200 and len(r.json()["deleted"]) == 2


def test_it_needs_write_and_read(client, token):
    full_name, base = new_store(client, token)
    write(client, token, base, "ann", TEXTS)
    grant(client, token, full_name, "writer", "WRITE_MEMORY_STORE")
    grant(client, token, full_name, "reader", "READ_MEMORY_STORE")
    grant(client, token, full_name, "both", "READ_MEMORY_STORE", "WRITE_MEMORY_STORE")

    r = forget(client, token, base, "writer", scope="ann", query="the divorce")
    assert r.status_code == 403 and r.json()["error_code"] == "PERMISSION_DENIED", r.text
    assert "READ_MEMORY_STORE" in r.json()["message"]
    r = forget(client, token, base, "writer", scope="ann", query="the divorce", dry_run=True)
    assert r.status_code == 403, r.text
    r = forget(client, token, base, "reader", scope="ann", query="the divorce", dry_run=True)
    assert r.status_code == 403 and "WRITE_MEMORY_STORE" in r.json()["message"], r.text
    assert paths(client, token, base, "ann") == set(TEXTS)

    refused = [e for e in events(client, token, full_name) if e["principal"] in ("writer", "reader")]
    assert [(e["principal"], e["action_name"], e["decision"], e["status_code"]) for e in refused] == [
        ("writer", "entries.read", "deny", 403),
        ("writer", "entries.read", "deny", 403),
        ("reader", "entries.write", "deny", 403),
    ]
    r = forget(client, token, base, "both", scope="ann", query="the divorce")
    assert r.status_code == 200 and len(r.json()["deleted"]) == 2, r.text


def test_several_scopes_and_scope_limited_grants(client, token):
    full_name, base = new_store(client, token)
    for scope in ("ann", "bob", "cid"):
        write(
            client, token, base, scope, {"/divorce.md": TEXTS["/divorce.md"], "/food.md": TEXTS["/food.md"]}
        )
    # a principal whose READ and WRITE are limited to ann's scope may not reach bob's
    grant(client, token, full_name, "limited", "READ_MEMORY_STORE", "WRITE_MEMORY_STORE", scopes=["ann"])
    r = forget(client, token, base, "limited", scopes=["ann", "bob"], query="the divorce")
    assert r.status_code == 403, r.text
    assert "'bob'" in r.json()["message"]
    for scope in ("ann", "bob"):
        assert "/divorce.md" in paths(client, token, base, scope)

    r = forget(client, token, base, scope="ann", scopes=["bob"], query="the divorce")
    assert r.status_code == 200, r.text
    assert sorted((e["scope"], e["path"]) for e in r.json()["deleted"]) == [
        ("ann", "/divorce.md"),
        ("bob", "/divorce.md"),
    ]
    assert paths(client, token, base, "ann") == paths(client, token, base, "bob") == {"/food.md"}
    assert paths(client, token, base, "cid") == {"/divorce.md", "/food.md"}  # not asked: untouched

    r = forget(client, token, base, "limited", scope="cid", query="the divorce")
    assert r.status_code == 403, r.text
    write(client, token, base, "ann", {"/again.md": "another divorce note"})
    r = forget(client, token, base, "limited", scope="ann", query="the divorce")
    assert r.status_code == 200 and [e["path"] for e in r.json()["deleted"]] == ["/again.md"], r.text


def test_path_prefix_and_session_narrow_it(client, token):
    _, base = new_store(client, token)
    write(
        client, token, base, "ann", {"/old/divorce.md": "divorce notes", "/new/divorce.md": "divorce notes"}
    )
    r = client.post(
        f"{base}/entries",
        headers=token(),
        params={"scope": "ann"},
        json={"path": "/s/divorce.md", "contents": "divorce notes", "session_id": "s1"},
    )
    assert r.status_code == 200, r.text
    r = forget(client, token, base, scope="ann", query="divorce", path_prefix="/old/")
    assert r.status_code == 200 and [e["path"] for e in r.json()["deleted"]] == ["/old/divorce.md"], r.text
    r = forget(client, token, base, scope="ann", query="divorce", session_id="s1")
    assert r.json()["deleted"] == [{"scope": "ann", "path": "/s/divorce.md", "session_id": "s1"}]
    assert paths(client, token, base, "ann") == {"/new/divorce.md"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"scope": "ann", "query": ""}, "query"),
        ({"scope": "ann", "query": "   "}, "query"),
        ({"scope": "ann", "query": "x", "min_score": 0}, "min_score"),
        ({"scope": "ann", "query": "x", "min_score": 1.5}, "min_score"),
        ({"scope": "ann", "query": "x", "min_score": -0.1}, "min_score"),
        ({"scope": "ann", "query": "x", "top_k": 5}, "top_k"),  # unknown here: there is no top_k
        ({"scope": "ann", "query": "x", "mode": "fuzzy"}, "mode"),
        ({"query": "x"}, "scope"),
        ({"scope": "ann"}, "query"),
    ],
)
def test_bad_input_is_400_naming_the_field(client, token, body, field):
    _, base = new_store(client, token)
    write(client, token, base, "ann", {"/x.md": "x marks the spot"})
    r = forget(client, token, base, **body)
    assert r.status_code == 400, r.text
    assert r.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    assert field in r.json()["message"] and r.json()["details"][0]["field"] == field, r.text
    assert paths(client, token, base, "ann") == {"/x.md"}


def test_a_missing_store_is_404(client, token):
    r = forget(client, token, f"{UC}/memory-stores/main.default.no_such_store", scope="ann", query="x")
    assert r.status_code == 404 and r.json()["error_code"] == "NOT_FOUND", r.text


# --- the agent dialect ------------------------------------------------------------------------------


def test_the_agent_dialect_answers_the_entries_names(client, token):
    sid = f"forget-{uuid.uuid4().hex[:8]}"
    r = client.post(AGENTS, headers=token(), params={"managed_memory_store_id": sid}, json={})
    assert r.status_code == 200, r.text
    names = {}
    for path, contents in TEXTS.items():
        r = client.post(
            f"{AGENTS}/{sid}/entries",
            headers=token(),
            json={"actor_id": "ann", "path": path, "content": contents},
        )
        assert r.status_code == 200, r.text
        names[path] = r.json()["name"]
    url = f"{AGENTS}/{sid}/entries:deleteMatching"
    dry = client.post(url, headers=token(), json={"actor_id": "ann", "query": "the divorce", "dry_run": True})
    assert dry.status_code == 200, dry.text
    assert set(dry.json()["deleted"]) == {names[p] for p in MATCHING} and dry.json()["truncated"] is False
    r = client.post(url, headers=token(), json={"actor_id": "ann", "query": "the divorce"})
    assert r.status_code == 200 and r.json() == dry.json(), r.text
    for path, name in names.items():
        got = client.get(f"/api/2.0/agents/{name}", headers=token())
        assert got.status_code == (404 if path in MATCHING else 200), (path, got.text)

    # the same rules: a floor above 0, no unknown field, READ and WRITE
    for body, field in (
        ({"actor_id": "ann", "query": "x", "min_score": 0}, "min_score"),
        ({"actor_id": "ann", "query": "x", "scope": "bob"}, "scope"),
        ({"actor_id": "ann", "query": ""}, "query"),
    ):
        r = client.post(url, headers=token(), json=body)
        assert r.status_code == 400 and field in r.json()["message"], r.text
    grant(client, token, f"main.default.{sid}", "writer", "WRITE_MEMORY_STORE")
    r = client.post(url, headers=token("writer"), json={"actor_id": "ann", "query": "nurse"})
    assert r.status_code == 403, r.text
    r = client.patch(f"{UC}/memory-stores/main.default.{sid}", headers=token(), json={"legal_hold": True})
    assert r.status_code == 200, r.text
    r = client.post(url, headers=token(), json={"actor_id": "ann", "query": "nurse"})
    assert r.status_code == 409 and r.json()["error_code"] == "RESOURCE_CONFLICT", r.text


# --- the Python client --------------------------------------------------------------------------------


def test_the_client_forgets_sync_and_async(client, token):
    import asyncio

    from catalog.client import AsyncClient, Client, DeletedMatching

    full_name, base = new_store(client, token)
    write(client, token, base, "ann", TEXTS)
    write(client, token, base, "bob", TEXTS)
    bearer = token()["Authorization"].removeprefix("Bearer ")
    with Client(token=bearer, http=client) as api:
        store = api.store(full_name)
        dry = store.delete_matching("ann", "the divorce", dry_run=True)
        assert isinstance(dry, DeletedMatching) and dry.truncated is False
        assert {e.path for e in dry.deleted} == MATCHING and {e.scope for e in dry.deleted} == {"ann"}
        done = store.delete_matching(["ann"], "divorce lawyer", mode="keyword", min_score=0.99)
        assert [e.path for e in done.deleted] == ["/lawyer.md"]
        with pytest.raises(ValueError, match="mode"):
            store.delete_matching("ann", "x", mode="fuzzy")
    assert paths(client, token, base, "ann") == set(TEXTS) - {"/lawyer.md"}

    async def run_async() -> DeletedMatching:
        import httpx

        # the async client's request, answered by the app through the sync test client
        def handler(request: httpx.Request) -> httpx.Response:
            answer = client.request(
                request.method,
                request.url.raw_path.decode(),
                headers=request.headers,
                content=request.content,
            )
            return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)

        http = httpx.AsyncClient(base_url="http://catalog", transport=httpx.MockTransport(handler))
        async with AsyncClient(token=bearer, http=http) as api:
            found = await api.store(full_name).delete_matching("bob", "the divorce")
        await http.aclose()
        return found

    found = asyncio.run(run_async())
    assert {e.path for e in found.deleted} == MATCHING
    assert paths(client, token, base, "bob") == set(TEXTS) - MATCHING
