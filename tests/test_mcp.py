"""The memory tools over MCP: the real `mcp` client, over streamable HTTP, against `catalog serve`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from rest import UC

from catalog.auth import mint_dev_token
from catalog.settings import Settings
from catalog.toolkit import MEMORY_INSTRUCTIONS

STORE = "main.default.assistant"
TOOLS = ["search_memory", "save_memory", "get_memory", "list_memories", "update_memory", "delete_memory"]


def token(live: Any, sub: str, **claims: Any) -> str:
    return mint_dev_token(Settings(data_dir=live.data_dir), sub, **claims)


def rest(live: Any, sub: str = "admin") -> httpx.Client:
    return httpx.Client(base_url=live.url, headers={"Authorization": f"Bearer {token(live, sub)}"})


@pytest.fixture(scope="module")
def store(live):
    """A store alice may read and write, carol may only read, and bob may not use."""
    with rest(live) as admin:
        r = admin.post(
            f"{UC}/memory-stores",
            json={"name": "assistant", "catalog_name": "main", "schema_name": "default"},
        )
        assert r.status_code == 200, r.text
        r = admin.patch(f"{UC}/memory-stores/{STORE}", json={"shared_scopes": ["team-x"]})
        assert r.status_code == 200, r.text
        changes = [
            {"principal": "alice", "add": ["READ_MEMORY_STORE", "WRITE_MEMORY_STORE"]},
            {"principal": "carol", "add": ["READ_MEMORY_STORE"]},
        ]
        r = admin.patch(f"{UC}/permissions/memory_store/{STORE}", json={"changes": changes})
        assert r.status_code == 200, r.text
    return STORE


@asynccontextmanager
async def session(
    live: Any, bearer: str, query: str = "", store: str = STORE
) -> AsyncIterator[ClientSession]:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {bearer}"})
    async with (
        http,
        streamable_http_client(f"{live.url}/mcp/memory-stores/{store}{query}", http_client=http) as (
            read,
            write,
        ),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


def text(result: Any) -> str:
    return "".join(part.text for part in result.content)


def answer(result: Any) -> dict[str, Any]:
    assert not result.is_error, text(result)
    decoded: dict[str, Any] = json.loads(text(result))
    assert decoded == result.structured_content
    return decoded


def audit(live: Any, **params: Any) -> list[dict[str, Any]]:
    with rest(live) as admin:
        r = admin.get(f"{UC}/system/audit", params={"order": "asc", "page_size": 1000, **params})
        assert r.status_code == 200, r.text
        events: list[dict[str, Any]] = r.json()["events"]
        return events


async def test_the_tools_and_the_instructions(live, store):
    async with session(live, token(live, "alice")) as client:
        listed = await client.list_tools()
        assert [tool.name for tool in listed.tools] == TOOLS
        for tool in listed.tools:
            assert tool.input_schema["type"] == "object" and "scope" not in tool.input_schema["properties"]
            assert tool.input_schema["additionalProperties"] is False and tool.description
        save = next(tool for tool in listed.tools if tool.name == "save_memory")
        assert save.input_schema["required"] == ["path", "description"]
        assert "/memories/" in save.description and save.annotations.read_only_hint is False

        prompts = await client.list_prompts()
        assert [p.name for p in prompts.prompts] == ["memory_instructions"]
        prompt = await client.get_prompt("memory_instructions")
        assert prompt.messages[0].content.text == MEMORY_INSTRUCTIONS
    assert "search_memory" in MEMORY_INSTRUCTIONS and "secret" in MEMORY_INSTRUCTIONS.lower()


async def test_initialize_answers_the_instructions(live, store):
    async with session(live, token(live, "alice")) as client:
        assert client.initialize_result.instructions == MEMORY_INSTRUCTIONS
        assert client.initialize_result.server_info.name == "memory-catalog"


async def test_save_recall_update_delete_in_the_end_users_scope(live, store):
    # an application acting for dora: the tools use dora's scope, whatever the model asks
    bearer = token(live, "alice", on_behalf_of="dora")
    async with session(live, bearer) as client:
        saved = answer(
            await client.call_tool(
                "save_memory",
                {
                    "path": "/memories/preferences.md",
                    "description": "Dora's preferences",
                    "contents": "Prefers tea over coffee\nWrites in British English",
                },
            )
        )
        assert saved["memory"]["path"] == "/memories/preferences.md"

        again = await client.call_tool(
            "save_memory", {"path": "/memories/preferences.md", "description": "duplicate"}
        )
        assert again.is_error and "update_memory" in text(again)

        found = answer(await client.call_tool("search_memory", {"query": "what does dora drink", "top_k": 3}))
        assert found["memories"][0]["path"] == "/memories/preferences.md"
        assert "tea" in found["memories"][0]["contents"]

        got = answer(await client.call_tool("get_memory", {"path": "/memories/preferences.md"}))
        assert got["memory"]["contents"] == "Prefers tea over coffee\nWrites in British English"

        updated = answer(
            await client.call_tool(
                "update_memory",
                {
                    "path": "/memories/preferences.md",
                    "str_replace": {"old_str": "tea", "new_str": "green tea"},
                },
            )
        )
        assert updated["memory"]["contents"].startswith("Prefers green tea over coffee")
        appended = answer(
            await client.call_tool(
                "update_memory",
                {"path": "/memories/preferences.md", "insert": {"insert_text": "Vegetarian"}},
            )
        )
        assert appended["memory"]["contents"].splitlines()[-1] == "Vegetarian"
        described = answer(
            await client.call_tool(
                "update_memory", {"path": "/memories/preferences.md", "description": "Food and writing"}
            )
        )
        assert described["memory"]["description"] == "Food and writing"

        answer(
            await client.call_tool("save_memory", {"path": "/memories/work.md", "description": "Dora's job"})
        )
        listed = answer(await client.call_tool("list_memories", {"path_prefix": "/memories/"}))
        assert [m["path"] for m in listed["memories"]] == ["/memories/preferences.md", "/memories/work.md"]
        assert "contents" not in listed["memories"][0]

        assert answer(await client.call_tool("delete_memory", {"path": "/memories/work.md"}))["result"]
        gone = await client.call_tool("get_memory", {"path": "/memories/work.md"})
        assert gone.is_error and "no memory at /memories/work.md; use list_memories" in text(gone)

    # the REST API sees the same entry, in dora's scope: the model never chose it
    with rest(live, "alice") as alice:
        r = alice.get(
            f"{UC}/memory-stores/{STORE}/entries:get",
            params={"scope": "dora", "path": "/memories/preferences.md"},
        )
        assert r.status_code == 200, r.text
        assert r.json()["contents"].splitlines() == [
            "Prefers green tea over coffee",
            "Writes in British English",
            "Vegetarian",
        ]
        assert r.json()["created_by"] == "alice"
        r = alice.get(f"{UC}/memory-stores/{STORE}/entries", params={"scope": "alice"})
        assert r.status_code == 200 and r.json()["entries"] == []


async def test_each_call_is_one_audit_event_of_its_operation(live, store):
    seen = [e["seq"] for e in audit(live)]
    before = max(seen) if seen else 0
    async with session(live, token(live, "alice", on_behalf_of="erin")) as client:
        answer(
            await client.call_tool(
                "save_memory", {"path": "/memories/audit.md", "description": "x", "contents": "secret text"}
            )
        )
        answer(await client.call_tool("get_memory", {"path": "/memories/audit.md"}))
        missing = await client.call_tool("delete_memory", {"path": "/memories/none.md"})
        assert missing.is_error
    events = [e for e in audit(live, principal="alice", scope="erin") if e["request_params"].get("tool")]
    calls = [
        (e["action_name"], e["request_params"].get("tool"), e["status_code"], e["decision"]) for e in events
    ]
    assert calls == [
        ("entries.write", "save_memory", 200, "allow"),
        ("entries.read", "get_memory", 200, "allow"),
        ("entries.write", "delete_memory", 404, "allow"),
    ]
    for event in events:
        assert event["securable_full_name"] == STORE and event["securable_type"] == "MEMORY_STORE"
        assert "secret text" not in json.dumps(event)
    assert events[2]["error_code"] == "NOT_FOUND"
    # the handshake and the list of tools are audited as connecting to the store
    # the handshake (and the client's own list of tools) is audited as connecting to the store:
    # the initialize request, then the initialized notification
    connects = [e for e in audit(live, principal="alice", action_name="mcp.connect") if e["seq"] > before]
    assert [e["status_code"] for e in connects[:2]] == [200, 202]
    assert {(e["securable_full_name"], e["decision"]) for e in connects} == {(STORE, "allow")}


async def test_delete_memory_by_query_deletes_the_matches_of_the_bound_scope(live, store):
    async with session(live, token(live, "alice", on_behalf_of="ivy")) as client:
        listed = await client.list_tools()
        tool = next(t for t in listed.tools if t.name == "delete_memory")
        assert set(tool.input_schema["properties"]) == {"path", "query"}
        assert tool.input_schema["required"] == [] and "query" in tool.description
        for path, contents in (
            ("/memories/divorce.md", "The divorce from Sam was finalised in May"),
            ("/memories/lawyer.md", "The divorce lawyer is Ms Park"),
            ("/memories/food.md", "Likes ramen and green tea"),
        ):
            answer(
                await client.call_tool(
                    "save_memory", {"path": path, "description": "d", "contents": contents}
                )
            )
        both = await client.call_tool("delete_memory", {"path": "/memories/food.md", "query": "divorce"})
        assert both.is_error and "not both" in text(both)
        neither = await client.call_tool("delete_memory", {})
        assert neither.is_error and "give path" in text(neither)

        forgot = answer(await client.call_tool("delete_memory", {"query": "the divorce"}))
        assert sorted(forgot["deleted"]) == ["/memories/divorce.md", "/memories/lawyer.md"]
        assert forgot["result"] == "deleted 2 memories matching the query" and "truncated" not in forgot
        again = answer(await client.call_tool("delete_memory", {"query": "the divorce"}))
        assert again["deleted"] == [] and "nothing was deleted" in again["result"]
        kept = answer(await client.call_tool("list_memories", {}))
        assert [m["path"] for m in kept["memories"]] == ["/memories/food.md"]
    # only the bound scope: another user's memory on the same topic stays
    with rest(live, "alice") as alice:
        r = alice.post(
            f"{UC}/memory-stores/{STORE}/entries",
            params={"scope": "jack"},
            json={"path": "/memories/divorce.md", "contents": "The divorce of Jack"},
        )
        assert r.status_code == 200, r.text
    async with session(live, token(live, "alice", on_behalf_of="ivy")) as client:
        answer(await client.call_tool("delete_memory", {"query": "the divorce"}))
    with rest(live, "alice") as alice:
        r = alice.get(
            f"{UC}/memory-stores/{STORE}/entries:get",
            params={"scope": "jack", "path": "/memories/divorce.md"},
        )
        assert r.status_code == 200, r.text
    # a reader may not: deleting needs WRITE (and READ, for what matched)
    with rest(live) as admin:
        changes = [{"principal": "kim", "add": ["READ_MEMORY_STORE"]}]
        r = admin.patch(f"{UC}/permissions/memory_store/{STORE}", json={"changes": changes})
        assert r.status_code == 200, r.text
    async with session(live, token(live, "kim")) as client:
        refused = await client.call_tool("delete_memory", {"query": "the divorce"})
        assert refused.is_error and "not allowed" in text(refused)
    denied = audit(live, principal="kim", action_name="entries.write")
    assert [(e["decision"], e["status_code"]) for e in denied] == [("deny", 403)]
    events = [e for e in audit(live, principal="alice", scope="ivy") if e["request_params"].get("tool")]
    forgets = [e for e in events if "dry_run" in e["request_params"]]
    assert [(e["action_name"], e["status_code"], e["result_count"]) for e in forgets] == [
        ("entries.write", 200, 2),
        ("entries.write", 200, 0),
        ("entries.write", 200, 0),  # jack's memory is not in ivy's scope
    ]
    assert all("divorce" not in json.dumps(e) for e in forgets)  # the query is never audited


def test_a_principal_without_grants_is_refused_and_audited(live, store):
    r = httpx.post(
        f"{live.url}/mcp/memory-stores/{STORE}",
        headers={
            "Authorization": f"Bearer {token(live, 'bob')}",
            "Accept": "application/json, text/event-stream",
        },
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    )
    assert r.status_code == 403 and r.json()["error_code"] == "PERMISSION_DENIED"
    denied = audit(live, principal="bob", action_name="mcp.connect")
    assert denied and denied[-1]["decision"] == "deny" and denied[-1]["status_code"] == 403

    r = httpx.post(
        f"{live.url}/mcp/memory-stores/{STORE}", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    )
    assert r.status_code == 401 and r.json()["error_code"] == "UNAUTHENTICATED"

    r = httpx.post(
        f"{live.url}/mcp/memory-stores/main.default.nothing_here",
        headers={"Authorization": f"Bearer {token(live, 'alice')}"},
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    )
    assert r.status_code == 404 and r.json()["error_code"] == "NOT_FOUND"


def test_a_client_without_a_token_finds_where_to_learn_how_to_sign_in(live, store):
    """The MCP authorization specification's discovery, over HTTP, as the `mcp` SDK's own client
    code runs it: the 401 names the store's protected resource metadata (RFC 9728), the same URL
    the client would guess from the server's, whose `resource` is the MCP server itself; a
    refused token says so (RFC 6750)."""
    from mcp.client.auth.utils import (
        build_protected_resource_metadata_discovery_urls,
        extract_field_from_www_auth,
        extract_resource_metadata_from_www_auth,
    )

    server = f"{live.url}/mcp/memory-stores/{STORE}"
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    r = httpx.post(server, headers=accept, json=initialize)
    assert r.status_code == 401
    found = extract_resource_metadata_from_www_auth(r)  # type: ignore[arg-type]
    assert found == f"{live.url}/.well-known/oauth-protected-resource/mcp/memory-stores/{STORE}"
    assert build_protected_resource_metadata_discovery_urls(None, server)[0] == found
    assert (
        r.headers["www-authenticate"].startswith("Bearer ") and "error=" not in r.headers["www-authenticate"]
    )
    metadata = httpx.get(found)
    assert metadata.status_code == 200, metadata.text
    assert metadata.json()["resource"] == server
    assert metadata.json()["bearer_methods_supported"] == ["header"]
    root = httpx.get(f"{live.url}/.well-known/oauth-protected-resource").json()
    assert root["resource"] == live.url
    # a token from another key is refused, and the challenge says why
    other = mint_dev_token(Settings(data_dir=live.data_dir / "elsewhere"), "alice")
    r = httpx.post(server, headers={**accept, "Authorization": f"Bearer {other}"}, json=initialize)
    assert r.status_code == 401
    assert extract_field_from_www_auth(r, "error") == "invalid_token"  # type: ignore[arg-type]
    assert 'error_description="bad token signature"' in r.headers["www-authenticate"]
    # discovery leaves no trace in the audit log (as /healthz)
    for route in ("", "/mcp/memory-stores/{full_name}"):
        assert audit(live, action_name=f"http.get /.well-known/oauth-protected-resource{route}") == []


async def test_a_reader_may_recall_but_not_save(live, store):
    async with session(live, token(live, "carol")) as client:
        refused = await client.call_tool("save_memory", {"path": "/memories/x.md", "description": "x"})
        assert refused.is_error and "not allowed" in text(refused)
        assert answer(await client.call_tool("list_memories", {}))["memories"] == []
    events = audit(live, principal="carol", action_name="entries.write")
    assert [(e["decision"], e["status_code"], e["request_params"]["tool"]) for e in events] == [
        ("deny", 403, "save_memory")
    ]
    with rest(live, "carol") as carol:
        r = carol.get(f"{UC}/memory-stores/{STORE}/entries", params={"scope": "carol"})
        assert r.status_code == 200 and r.json()["entries"] == []


async def test_the_scope_is_never_the_models(live, store):
    async with session(live, token(live, "alice", on_behalf_of="frank")) as client:
        forged = await client.call_tool(
            "save_memory", {"path": "/memories/a.md", "description": "x", "scope": "dora"}
        )
        assert forged.is_error and "unknown field `scope`" in text(forged)
        assert "never by a tool argument" in text(forged)

    # a shared scope the store lists may be named on the URL
    async with session(live, token(live, "alice"), "?scope=team-x") as client:
        answer(
            await client.call_tool("save_memory", {"path": "/memories/team.md", "description": "team notes"})
        )
    with rest(live, "alice") as alice:
        r = alice.get(
            f"{UC}/memory-stores/{STORE}/entries:get", params={"scope": "team-x", "path": "/memories/team.md"}
        )
        assert r.status_code == 200, r.text


def test_look_alike_scopes_are_refused(live, store):
    # another user's scope, a look-alike of the shared one, or a second parameter: refused
    for query in (
        "?scope=dora",
        "?scope=team-X",
        "?scope=team-x%20",
        "?scope=team-x&scope=dora",
        "?scope_=1",
    ):
        r = httpx.post(
            f"{live.url}/mcp/memory-stores/{STORE}{query}",
            headers={"Authorization": f"Bearer {token(live, 'alice')}"},
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        )
        assert r.status_code in (400, 403), (query, r.status_code, r.text)
        assert r.json()["error_code"] in ("PERMISSION_DENIED", "INVALID_PARAMETER_VALUE"), query


async def test_bad_input_is_a_tool_error(live, store):
    async with session(live, token(live, "alice", on_behalf_of="gina")) as client:
        cases = [
            ("get_memory", {}, "path"),
            ("get_memory", {"path": 7}, "path"),
            (
                "save_memory",
                {"path": "/memories/big.md", "description": "big", "contents": "x" * (10 * 1024 * 1024)},
                "contents",
            ),
            ("save_memory", {"path": "/memories/nul.md", "description": "a\x00b"}, "description"),
            ("save_memory", {"path": "relative.md", "description": "x"}, "path"),
            ("search_memory", {"query": "tea", "top_k": 1000}, "top_k"),
            ("update_memory", {"path": "/memories/none.md"}, "nothing to change"),
            (
                "update_memory",
                {
                    "path": "/m.md",
                    "str_replace": {"old_str": "a", "new_str": "b"},
                    "replace_all": {"contents": ""},
                },
                "one of",
            ),
        ]
        for name, arguments, needle in cases:
            result = await client.call_tool(name, arguments)
            assert result.is_error, (name, arguments)
            assert needle in text(result), (name, text(result))

        answer(
            await client.call_tool(
                "save_memory", {"path": "/memories/twice.md", "description": "d", "contents": "a a"}
            )
        )
        twice = await client.call_tool(
            "update_memory", {"path": "/memories/twice.md", "str_replace": {"old_str": "a", "new_str": "b"}}
        )
        assert twice.is_error and "occurs 2 times" in text(twice)
    with rest(live, "alice") as alice:
        r = alice.get(f"{UC}/memory-stores/{STORE}/entries", params={"scope": "gina"})
        assert [e["path"] for e in r.json()["entries"]] == ["/memories/twice.md"]


def test_malformed_messages_are_refused_not_failed(live, store):
    headers = {
        "Authorization": f"Bearer {token(live, 'alice')}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    url = f"{live.url}/mcp/memory-stores/{STORE}"
    deep = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "get_memory", "arguments": '
        + "[" * 5000
        + "]" * 5000
        + "}}"
    )
    for body in (b"{not json", b"", deep.encode(), b'{"jsonrpc": "2.0", "id": 1, "method": "no/such"}'):
        r = httpx.post(url, headers=headers, content=body)
        assert 200 <= r.status_code < 500, (body[:40], r.status_code, r.text)
        assert "error" in r.json(), r.text
    for method in ("GET", "DELETE", "PUT"):
        r = httpx.request(method, url, headers=headers)
        assert r.status_code == 405 and r.headers["allow"] == "POST, OPTIONS", (method, r.text)
    r = httpx.options(url, headers=headers)
    assert r.status_code == 200 and r.json() == {} and r.headers["allow"] == "POST, OPTIONS"
    r = httpx.post(url, headers=headers, content=b" " * (17 * 1024 * 1024))
    assert r.status_code == 413 and r.json()["error_code"] == "PAYLOAD_TOO_LARGE"
    r = httpx.post(f"{live.url}/mcp/memory-stores/", headers=headers, content=b"{}")
    assert r.status_code == 404 and r.json()["error_code"] == "NOT_FOUND"


def test_a_request_whose_id_is_not_a_string_or_an_integer_is_an_invalid_request(live, store):
    """JSON-RPC 2.0: a message with an `id` member is a request, never a notification, and one
    whose id is not valid gets the error -32600 with id null; MCP allows strings and integers only.
    Such a message is not taken for a notification (202 with nothing, the request silently lost)."""
    offset = live.log_path.stat().st_size
    headers = {
        "Authorization": f"Bearer {token(live, 'alice')}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
    }
    url = f"{live.url}/mcp/memory-stores/{STORE}"
    request_ids = []
    for written, kind in (
        ("{}", "an object"),
        ('{"n": 1}', "an object"),
        ("[1]", "an array"),
        ("true", "a boolean"),
        ("false", "a boolean"),
        ("null", "null"),
        ("1.5", "a number that is not an integer"),
        ("1e3", "a number that is not an integer"),
    ):
        body = f'{{"jsonrpc": "2.0", "id": {written}, "method": "tools/list"}}'
        r = httpx.post(url, headers=headers, content=body)
        assert r.status_code == 400, (written, r.status_code, r.text)
        assert r.headers["content-type"].startswith("application/json"), (written, r.headers)
        reply = r.json()
        assert reply == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {
                "code": -32600,
                "message": f"Invalid Request: the id of a request is a string or an integer, not {kind}",
            },
        }, written
        request_ids.append(r.headers["x-request-id"])
    # a string or an integer (a negative one, one beyond 64 bits) is a request, answered
    for written in ('"seven"', "-7", "0", str(2**70)):
        body = f'{{"jsonrpc": "2.0", "id": {written}, "method": "tools/list"}}'
        r = httpx.post(url, headers=headers, content=body)
        assert r.status_code == 200 and r.json()["id"] == json.loads(written), (written, r.text)
        assert [t["name"] for t in r.json()["result"]["tools"]] == TOOLS
    # a notification (no id) is still accepted with nothing to answer
    r = httpx.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert r.status_code == 202 and r.content == b"", r.text
    assert traces_since(live, offset) == []
    events = {e["request_id"]: e for e in audit(live, principal="alice")}
    for request_id in request_ids:
        event = events[request_id]
        assert (event["action_name"], event["decision"], event["status_code"], event["error_code"]) == (
            "mcp.connect",
            "allow",
            400,
            "INVALID_PARAMETER_VALUE",
        )


async def test_the_modern_protocol_too(live, store):
    """A 2026-07-28 client discovers the server instead of the handshake; the tools are the same."""
    http = create_mcp_http_client(
        headers={"Authorization": f"Bearer {token(live, 'alice', on_behalf_of='hana')}"}
    )
    async with (
        http,
        streamable_http_client(f"{live.url}/mcp/memory-stores/{STORE}", http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        discovered = await client.discover()
        assert discovered.instructions == MEMORY_INSTRUCTIONS
        assert [tool.name for tool in (await client.list_tools()).tools] == TOOLS
        answer(await client.call_tool("save_memory", {"path": "/memories/modern.md", "description": "d"}))
        got = answer(await client.call_tool("get_memory", {"path": "/memories/modern.md"}))
        assert got["memory"]["description"] == "d"
    events = [e for e in audit(live, principal="alice", scope="hana") if e["request_params"].get("tool")]
    assert [(e["action_name"], e["request_params"]["tool"]) for e in events] == [
        ("entries.write", "save_memory"),
        ("entries.read", "get_memory"),
    ]


def traces_since(live: Any, offset: int) -> list[str]:
    """What the server logged above the level of a request line since `offset` (a byte offset
    in its log), with the start of any trace."""
    found = []
    for line in live.log_path.read_bytes()[offset:].decode().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            found.append(line[:300])  # a line that is not a log record: a bare trace
            continue
        if record.get("exception") or record.get("level") not in ("debug", "info"):
            found.append(
                f"{record.get('logger')}: {record.get('message')} {record.get('exception', '')[:300]}"
            )
    return found


@asynccontextmanager
async def modern_session(live: Any, bearer: str) -> AsyncIterator[ClientSession]:
    """A client of the stateless protocol revision: `discover` instead of the handshake."""
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {bearer}"})
    async with (
        http,
        streamable_http_client(f"{live.url}/mcp/memory-stores/{STORE}", http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.discover()
        yield client


@pytest.mark.parametrize("era", ["handshake", "modern"])
async def test_unknown_names_are_invalid_params_and_log_no_trace(live, store, era):
    """An unknown prompt or tool is JSON-RPC's invalid params (-32602) naming it, an unknown
    resource is a method the server does not offer (-32601); none of them logs a trace."""
    offset = live.log_path.stat().st_size
    opened = session if era == "handshake" else modern_session
    async with opened(live, token(live, "alice", on_behalf_of="ivan")) as client:
        for _ in range(3):  # per request: a trace each time was the fault
            with pytest.raises(MCPError) as refused:
                await client.get_prompt("no_such_prompt")
            assert refused.value.code == -32602, refused.value
            assert (
                "no_such_prompt" in refused.value.message and "memory_instructions" in refused.value.message
            )

        with pytest.raises(MCPError) as refused:
            await client.call_tool("no_such_tool", {})
        assert refused.value.code == -32602 and "unknown tool 'no_such_tool'" in refused.value.message
        assert all(name in refused.value.message for name in TOOLS)

        with pytest.raises(MCPError) as refused:
            await client.read_resource("memory://main.default.assistant/ivan")
        assert refused.value.code == -32601, refused.value

        # a bad argument is the model's to correct: a tool error it reads, not a protocol error
        bad = await client.call_tool("get_memory", {"path": 7})
        assert bad.is_error and "path" in text(bad)
        assert await client.get_prompt("memory_instructions")  # the session still works
    assert traces_since(live, offset) == []


def test_bad_requests_are_json_rpc_errors_audited_without_a_trace(live, store):
    offset = live.log_path.stat().st_size
    headers = {
        "Authorization": f"Bearer {token(live, 'alice', on_behalf_of='jude')}",
        "Accept": "application/json, text/event-stream",
    }
    url = f"{live.url}/mcp/memory-stores/{STORE}"

    def rpc(method: str, params: Any = None) -> dict[str, Any]:
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": 7, "method": method}
        if params is not None:
            message["params"] = params
        r = httpx.post(url, headers=headers, json=message)
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/json"), r.text
        reply: dict[str, Any] = r.json()
        assert reply["id"] == 7 and "result" not in reply, reply
        return {**reply["error"], "request_id": r.headers["x-request-id"]}

    cases = [
        ("prompts/get", {"name": "nope"}, -32602, "unknown prompt 'nope'"),
        ("prompts/get", {}, -32602, None),
        ("prompts/get", {"name": "memory_instructions", "arguments": {"n": 1}}, -32602, None),
        ("tools/call", {"name": "nope", "arguments": {}}, -32602, "unknown tool 'nope'"),
        ("tools/call", {"name": "get_memory", "arguments": "not an object"}, -32602, None),
        ("tools/call", {"arguments": {}}, -32602, None),
        ("resources/read", {"uri": "memory://x"}, -32601, None),
        ("resources/list", None, -32601, None),
        ("no/such/method", None, -32601, None),
    ]
    errors = {}
    for method, params, code, needle in cases:
        error = rpc(method, params)
        assert error["code"] == code, (method, params, error)
        if needle is not None:
            assert needle in error["message"], (method, error)
        errors[(method, str(params))] = error
    assert traces_since(live, offset) == []

    # the unknown tool is recorded on the request's event: connecting to the store, refused as
    # invalid (no entry operation was run)
    request_id = errors[("tools/call", str({"name": "nope", "arguments": {}}))]["request_id"]
    (event,) = [e for e in audit(live, principal="alice") if e["request_id"] == request_id]
    assert (event["action_name"], event["securable_full_name"], event["decision"]) == (
        "mcp.connect",
        STORE,
        "allow",
    )
    assert (event["status_code"], event["error_code"], event["request_params"]["tool"]) == (
        400,
        "INVALID_PARAMETER_VALUE",
        "nope",
    )


def test_a_body_that_is_not_json_is_refused_with_json(live, store):
    """The transport answers a plain-text 400 to a body of another media type; the route
    refuses it first with the server's error shape, naming the header."""
    url = f"{live.url}/mcp/memory-stores/{STORE}"
    message = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    base = {
        "Authorization": f"Bearer {token(live, 'alice')}",
        "Accept": "application/json, text/event-stream",
    }
    for content_type in (
        "text/plain",
        "text/plain; charset=utf-8",
        "application/x-www-form-urlencoded",
        None,
    ):
        headers = dict(base) if content_type is None else {**base, "Content-Type": content_type}
        r = httpx.post(url, headers=headers, content=message)
        assert r.status_code == 400, (content_type, r.status_code, r.text)
        assert r.headers["content-type"].startswith("application/json"), (content_type, r.text)
        body = r.json()
        assert body["error_code"] == "INVALID_PARAMETER_VALUE" and set(body) == {
            "error_code",
            "message",
            "details",
        }
        assert body["details"] == [{"@type": "field_violation", "field": "Content-Type"}]
        assert "application/json" in body["message"]
    # JSON with parameters is JSON
    r = httpx.post(url, headers={**base, "Content-Type": "application/json; charset=utf-8"}, content=message)
    assert r.status_code == 200 and [t["name"] for t in r.json()["result"]["tools"]] == TOOLS
