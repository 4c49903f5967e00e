"""Databricks' managed-memory tools, replayed against a running server.

Databricks tells developers to wrap the memory-store API as five tools (save, get, list, update,
delete; search optionally) that call `WorkspaceClient().api_client.do(...)` with exactly these
requests, find the end user with `WorkspaceClient().current_user.me()`, and handle a missing entry
or store by testing `error_code == "NOT_FOUND"`. The tools below send what those tools send, the
way they send it, through the real `databricks-sdk`.
"""

from __future__ import annotations

from typing import Any

import pytest
from databricks.sdk import WorkspaceClient
from databricks.sdk.errors import DatabricksError, NotFound, PermissionDenied
from rest import UC

from catalog.auth import mint_dev_token
from catalog.settings import Settings

STORE = "main.default.agent_memory"
USER = "user-42@example.com"  # the end user the agent runs for (its token's subject)


def client_for(live, sub: str) -> WorkspaceClient:
    token = mint_dev_token(Settings(data_dir=live.data_dir), sub)
    return WorkspaceClient(host=live.url, token=token, auth_type="pat")


@pytest.fixture(scope="module")
def store(live) -> str:
    """The agent's memory store; the end user may read and write it."""
    admin = client_for(live, "admin")
    admin.api_client.do(
        "POST",
        f"{UC}/memory-stores",
        body={"name": "agent_memory", "catalog_name": "main", "schema_name": "default"},
    )
    admin.api_client.do(
        "PATCH",
        f"{UC}/permissions/memory_store/{STORE}",
        body={"changes": [{"principal": USER, "add": ["READ_MEMORY_STORE", "WRITE_MEMORY_STORE"]}]},
    )
    return STORE


# --- the tools, as Databricks' managed-memory tools call the API -------------------------------------


class MemoryTools:
    def __init__(self, w: WorkspaceClient, store: str) -> None:
        self.w = w
        self.base = f"{UC}/memory-stores/{store}"
        self.scope = w.current_user.me().id  # how the templates find the end user

    def save_memory(self, path: str, contents: str, description: str) -> dict[str, Any]:
        return self.w.api_client.do(
            "POST",
            f"{self.base}/entries",
            query={"scope": self.scope},
            body={
                "path": path,
                "contents": contents,
                "description": description,
                "creation_reason": "CREATION_REASON_AGENT_INFERRED",
                "creation_source": "CREATION_SOURCE_ONLINE_AGENT",
            },
        )

    def get_memory(self, path: str) -> dict[str, Any] | str:
        try:
            return self.w.api_client.do(
                "GET", f"{self.base}/entries:get", query={"scope": self.scope, "path": path}
            )
        except DatabricksError as e:
            if e.error_code == "NOT_FOUND":
                return f"No memory at {path}."
            raise

    def list_memories(self) -> list[tuple[str, str | None, bool]]:
        answer = self.w.api_client.do("GET", f"{self.base}/entries", query={"scope": self.scope})
        return [(e["path"], e.get("description"), e["has_contents"]) for e in answer.get("entries", [])]

    def update_memory(self, path: str, **edit: Any) -> dict[str, Any] | str:
        try:
            return self.w.api_client.do(
                "PATCH", f"{self.base}/entries", body={"scope": self.scope, "path": path, **edit}
            )
        except DatabricksError as e:
            if e.error_code == "NOT_FOUND":
                return f"No memory at {path}."
            raise

    def delete_memory(self, path: str) -> str:
        try:
            self.w.api_client.do("DELETE", f"{self.base}/entries", query={"scope": self.scope, "path": path})
        except DatabricksError as e:
            if e.error_code == "NOT_FOUND":
                return f"No memory at {path}."
            raise
        return f"Deleted {path}."

    def search_memory(self, query: str, top_k: int = 5) -> list[dict[str, Any]]:
        answer = self.w.api_client.do(
            "POST", f"{self.base}/entries:search", body={"scope": self.scope, "query": query, "top_k": top_k}
        )
        return answer.get("results", [])


PROVENANCE = {
    "creation_reason": "CREATION_REASON_AGENT_INFERRED",
    "creation_source": "CREATION_SOURCE_ONLINE_AGENT",
}


def test_current_user_me_names_the_end_user(live):
    me = client_for(live, USER).current_user.me()
    assert (me.id, me.user_name, me.display_name, me.active) == (USER, USER, USER, True)
    assert [s.value for s in me.schemas] == ["urn:ietf:params:scim:schemas:core:2.0:User"]


def test_the_five_tools_round_trip(live, store):
    tools = MemoryTools(client_for(live, USER), store)
    assert tools.scope == USER

    saved = tools.save_memory("/memories/preferences.md", "Prefers email.", "How to reach the user")
    assert (saved["scope"], saved["path"]) == (USER, "/memories/preferences.md")
    assert {k: saved[k] for k in PROVENANCE} == PROVENANCE
    got = tools.get_memory("/memories/preferences.md")
    assert isinstance(got, dict) and got["contents"] == "Prefers email."
    assert {k: got[k] for k in PROVENANCE} == PROVENANCE
    assert tools.list_memories() == [("/memories/preferences.md", "How to reach the user", True)]

    # their update tool's insert leaves insert_line out: the text goes after the last line
    edited = tools.update_memory("/memories/preferences.md", insert={"insert_text": "Short answers."})
    assert isinstance(edited, dict) and edited["contents"] == "Prefers email.\nShort answers."
    edited = tools.update_memory(
        "/memories/preferences.md", str_replace={"old_str": "email", "new_str": "phone"}
    )
    assert isinstance(edited, dict) and edited["contents"] == "Prefers phone.\nShort answers."
    edited = tools.update_memory("/memories/preferences.md", insert={"insert_text": "Hi.", "insert_line": 0})
    assert isinstance(edited, dict) and edited["contents"] == "Hi.\nPrefers phone.\nShort answers."
    edited = tools.update_memory(
        "/memories/preferences.md", description="Contact", replace_all={"contents": "Prefers chat."}
    )
    assert isinstance(edited, dict) and (edited["contents"], edited["description"]) == (
        "Prefers chat.",
        "Contact",
    )
    assert {k: edited[k] for k in PROVENANCE} == PROVENANCE

    (hit,) = tools.search_memory("chat")
    assert hit["memory_entry"]["path"] == "/memories/preferences.md" and hit["score"] > 0
    assert {k: hit["memory_entry"][k] for k in PROVENANCE} == PROVENANCE

    assert tools.delete_memory("/memories/preferences.md") == "Deleted /memories/preferences.md."
    assert tools.get_memory("/memories/preferences.md") == "No memory at /memories/preferences.md."
    assert tools.list_memories() == []


def test_a_missing_entry_is_not_found_on_get_update_delete(live, store):
    tools = MemoryTools(client_for(live, USER), store)
    path = "/never/written.md"
    calls = [
        ("GET", f"{tools.base}/entries:get", {"scope": USER, "path": path}, None),
        ("PATCH", f"{tools.base}/entries", None, {"scope": USER, "path": path, "description": "x"}),
        ("DELETE", f"{tools.base}/entries", {"scope": USER, "path": path}, None),
    ]
    for method, url, query, body in calls:
        with pytest.raises(NotFound) as missing:
            tools.w.api_client.do(method, url, query=query, body=body)
        assert missing.value.error_code == "NOT_FOUND", method
    # so each tool takes its not-found path
    assert tools.get_memory(path) == f"No memory at {path}."
    assert tools.update_memory(path, insert={"insert_text": "x"}) == f"No memory at {path}."
    assert tools.delete_memory(path) == f"No memory at {path}."


def test_a_wrong_store_is_not_found_on_every_call(live, store):
    tools = MemoryTools(client_for(live, USER), "main.default.no_such_store")
    for call in [
        lambda: tools.save_memory("/a.md", "x", "d"),
        lambda: tools.w.api_client.do(
            "GET", f"{tools.base}/entries:get", query={"scope": USER, "path": "/a.md"}
        ),
        tools.list_memories,
        lambda: tools.w.api_client.do(
            "PATCH",
            f"{tools.base}/entries",
            body={"scope": USER, "path": "/a.md", "insert": {"insert_text": "x"}},
        ),
        lambda: tools.w.api_client.do(
            "DELETE", f"{tools.base}/entries", query={"scope": USER, "path": "/a.md"}
        ),
        lambda: tools.search_memory("anything"),
        lambda: tools.w.api_client.do("GET", tools.base),
    ]:
        with pytest.raises(NotFound) as missing:
            call()
        assert missing.value.error_code == "NOT_FOUND"
    # a store behind a schema the caller may not use is 403 whether or not it exists (no leak)
    hidden = MemoryTools(client_for(live, USER), "nowhere.hidden.no_such_store")
    with pytest.raises(PermissionDenied):
        hidden.list_memories()
