"""Memory extraction through the AgentKit SDK (`Session.extract_memories`) against a live server
whose upstream model is a scripted OpenAI-compatible server: a session's transcript becomes
entries of its actor, an existing topic is updated rather than duplicated, an unchanged session
is not read again, a dry run writes nothing, and a failing upstream leaves the session unmarked."""

from __future__ import annotations

import json

import httpx
import pytest
from databricks.sdk import WorkspaceClient
from databricks_agentkit import AgentKitClient
from rest import UC, bearer
from scripted_llm import Call, Fail, Reply

from catalog.auth import mint_dev_token
from catalog.settings import Settings
from catalog.toolkit import EXTRACTION_INSTRUCTIONS

SESSIONS = "/api/2.0/agents/session-stores"
DREAMER = "MANAGED_MEMORY_ENTRY_SOURCE_TYPE_DREAMER"


@pytest.fixture(scope="module")
def live(database_url, tmp_path_factory, live_server, llm):
    server = live_server(
        tmp_path_factory.mktemp("extraction"),
        env={
            "CATALOG_DATABASE_URL": database_url,
            "CATALOG_LLM_BASE_URL": llm.url,
            "CATALOG_LLM_MODEL": "extractor",
            "CATALOG_LLM_MAX_RETRIES": "0",
        },
    )
    try:
        yield server
    finally:
        server.stop()


def kit(live, sub: str = "admin") -> AgentKitClient:
    token = mint_dev_token(Settings(data_dir=live.data_dir), sub)
    return AgentKitClient(WorkspaceClient(host=live.url, token=token, auth_type="pat"))


def memories(live, store: str, actor: str) -> dict[str, dict]:
    r = httpx.get(
        f"{live.url}/api/2.0/agents/memory-stores/{store}/entries",
        headers=bearer(live),
        params={"actor_id": actor},
    )
    assert r.status_code == 200, r.text
    return {m["path"]: m for m in r.json().get("managed_memory_entries", [])}


def setup_stores(live, name: str) -> tuple:  # type: ignore[type-arg]
    client = kit(live)
    sessions = client.session_stores.create(f"{name}-sessions")
    client.memory_stores.create(f"{name}-memory")
    return sessions, f"{name}-memory"


def test_a_transcript_becomes_memories_updated_not_duplicated(live, llm):
    sessions, memory = setup_stores(live, "diet")
    session = sessions.add(actor_id="vera", session_id="chat-1")
    session.append_items(
        [
            {"role": "user", "content": "I'm vegetarian, and my cat is called Miso."},
            {"role": "assistant", "content": "Noted!"},
            {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
        ]
    )
    llm.script(
        Call("list_memories", {}),
        [
            Call(
                "save_memory",
                {
                    "path": "/memories/diet.md",
                    "description": "Vegetarian",
                    "contents": "Eats no meat or fish.",
                },
            ),
            Call(
                "save_memory",
                {"path": "/memories/pets.md", "description": "Cat Miso", "contents": "A cat, Miso."},
            ),
        ],
        Reply("Saved diet and pets."),
    )
    extracted = session.extract_memories(memory_store=memory)
    assert sorted(m.path for m in extracted) == ["/memories/diet.md", "/memories/pets.md"]
    assert all(m.name.startswith(f"memory-stores/{memory}/entries/") for m in extracted)
    assert all(m.actor_id == "vera" and m.source_type == DREAMER for m in extracted)
    kept = memories(live, memory, "vera")
    assert kept["/memories/diet.md"]["content"] == "Eats no meat or fish."
    # derived from the session's items (lineage)
    found = httpx.get(
        f"{live.url}{UC}/system/lineage",
        headers=bearer(live),
        params={
            "securable_full_name": f"main.default.{memory}",
            "scope": "vera",
            "path": "/memories/diet.md",
        },
    ).json()
    [origin] = found["origins"]
    assert (origin["source"]["kind"], origin["source"]["session_id"]) == ("session", "chat-1")
    assert origin["source"]["memory_store"] == "main.default.diet-sessions"
    assert len(origin["source"]["item_ids"]) == 3

    # what the model read: the instructions and the transcript (messages, tool calls named)
    first = llm.requests[0]
    assert first["model"] == "extractor"
    assert first["messages"][0]["content"] == EXTRACTION_INSTRUCTIONS
    transcript = first["messages"][1]["content"]
    assert "user: I'm vegetarian, and my cat is called Miso." in transcript
    assert "assistant: Noted!" in transcript and "(tool call lookup({}))" in transcript
    assert {t["function"]["name"] for t in first["tools"]} >= {
        "save_memory",
        "update_memory",
        "delete_memory",
    }

    # the same session again: nothing changed, no model call, nothing written
    assert session.extract_memories(memory_store=memory) == []
    assert len(llm.requests) == 3

    # the session goes on: the topic is updated, not duplicated
    session.append_items([{"role": "user", "content": "Actually I eat fish again now."}])
    llm.script(
        Call("search_memory", {"query": "diet"}),
        Call(
            "update_memory",
            {
                "path": "/memories/diet.md",
                "description": "Pescatarian",
                "str_replace": {"old_str": "Eats no meat or fish.", "new_str": "Eats fish, no meat."},
            },
        ),
        Reply("Updated the diet."),
    )
    updated = session.extract_memories(memory_store=f"memory-stores/{memory}", instructions="Be terse.")
    assert [(m.path, m.content, m.description) for m in updated] == [
        ("/memories/diet.md", "Eats fish, no meat.", "Pescatarian")
    ]
    assert llm.requests[3]["messages"][0]["content"].endswith("Be terse.")
    assert sorted(memories(live, memory, "vera")) == ["/memories/diet.md", "/memories/pets.md"]

    # every tool call of the model is in the audit log as its entry operation
    events = httpx.get(
        f"{live.url}{UC}/system/audit",
        headers=bearer(live),
        params={"securable_full_name": f"main.default.{memory}", "page_size": 100},
    ).json()["events"]
    tools = [e["request_params"].get("tool") for e in events if e["action_name"].startswith("entries.")]
    assert tools.count("save_memory") == 2 and tools.count("update_memory") == 1
    assert any(e["action_name"] == "memories.extract" for e in events)


def test_a_dry_run_writes_nothing_and_leaves_the_session_unmarked(live, llm):
    sessions, memory = setup_stores(live, "dry")
    session = sessions.add(actor_id="walt", session_id="s")
    session.append_items([{"role": "user", "content": "I moved to Lisbon."}])
    llm.script(
        Call(
            "save_memory",
            {"path": "/memories/home.md", "description": "Lives in Lisbon", "contents": "Lisbon"},
        ),
        Reply("Would save the home."),
    )
    preview = session.extract_memories(memory_store=memory, dry_run=True)
    assert [(m.path, m.content, m.description) for m in preview] == [
        ("/memories/home.md", "Lisbon", "Lives in Lisbon")
    ]
    assert preview[0].name == f"memory-stores/{memory}/entries/dry-run-0"
    assert memories(live, memory, "walt") == {}
    # not marked: the real extraction reads the session
    llm.script(
        Call(
            "save_memory",
            {"path": "/memories/home.md", "description": "Lives in Lisbon", "contents": "Lisbon"},
        ),
        Reply("Saved."),
    )
    assert [m.path for m in session.extract_memories(memory_store=memory)] == ["/memories/home.md"]
    assert list(memories(live, memory, "walt")) == ["/memories/home.md"]


def test_an_upstream_failure_is_502_and_the_session_is_read_again(live, llm):
    sessions, memory = setup_stores(live, "flaky")
    session = sessions.add(actor_id="ines", session_id="s")
    session.append_items([{"role": "user", "content": "My sister is Ana."}])
    llm.script(Fail(status=500, message="model crashed"))
    r = httpx.post(
        f"{live.url}{SESSIONS}/flaky-sessions/sessions/s/extractions",
        headers=bearer(live),
        json={"memory_store": f"memory-stores/{memory}"},
    )
    assert r.status_code == 502 and r.json()["error_code"] == "BAD_GATEWAY"
    assert "model crashed" in r.json()["message"]
    llm.script(Reply("Nothing worth keeping."))
    assert session.extract_memories(memory_store=memory) == []
    assert len(llm.requests) == 2  # read again after the failure


def test_extraction_needs_read_on_the_session_and_write_on_the_memory(live, llm):
    sessions, memory = setup_stores(live, "acl")
    session = sessions.add(actor_id="olga", session_id="s")
    session.append_items([{"role": "user", "content": "hello"}])
    sessions.grant_permission("reader-app", permission="READ")
    as_reader = kit(live, "reader-app").session_stores.get("acl-sessions").get("s")
    with pytest.raises(Exception) as refused:  # READ on the sessions, nothing on the memory store
        as_reader.extract_memories(memory_store=memory)
    assert getattr(refused.value, "error_code", None) == "PERMISSION_DENIED"
    with pytest.raises(Exception) as stranger:
        kit(live, "stranger").session_stores.get("acl-sessions")
    assert getattr(stranger.value, "error_code", None) == "PERMISSION_DENIED"
    r = httpx.post(
        f"{live.url}{SESSIONS}/acl-sessions/sessions/s/extractions",
        headers=bearer(live),
        json={"memory_store": "memory-stores/Not_An_Id"},
    )
    assert r.status_code == 400 and "memory_store" in r.json()["message"]
    r = httpx.post(
        f"{live.url}{SESSIONS}/acl-sessions/sessions/s/extractions",
        headers=bearer(live),
        json={"memory_store": "no-such-store"},
    )
    assert r.status_code == 404 and r.json()["error_code"] == "NOT_FOUND"
    assert llm.requests == []


def test_the_tool_answers_reach_the_model(live, llm):
    sessions, memory = setup_stores(live, "echo")
    session = sessions.add(actor_id="pia", session_id="s")
    session.append_items([{"role": "user", "content": "I run marathons."}])

    def check_then_answer(request: dict) -> Reply:
        listed = json.loads(request["messages"][-1]["content"])
        assert listed["memories"] == []
        return Reply("Nothing kept yet; keeping nothing.")

    llm.script(Call("list_memories", {}), check_then_answer)
    assert session.extract_memories(memory_store=memory) == []


def test_a_write_only_extractor_reads_nothing_of_the_memory_store_to_the_model(live, llm):
    """An extractor that may read the session but only write the memory store: the model's
    read tools are refused, so nothing of what the store holds reaches the model."""
    sessions, memory = setup_stores(live, "wo")
    session = sessions.add(actor_id="quinn", session_id="s")
    session.append_items([{"role": "user", "content": "I moved to Lyon."}])
    r = httpx.post(
        f"{live.url}/api/2.0/agents/memory-stores/{memory}/entries",
        headers=bearer(live),
        json={"actor_id": "quinn", "path": "/memories/secret.md", "content": "Vault code 4711"},
    )
    assert r.status_code == 200, r.text
    sessions.grant_permission("dropper", permission="READ")
    r = httpx.patch(
        f"{live.url}{UC}/permissions/memory_store/main.default.{memory}",
        headers=bearer(live),
        json={"changes": [{"principal": "dropper", "add": ["WRITE_MEMORY_STORE"]}]},
    )
    assert r.status_code == 200, r.text
    llm.script(
        Call("list_memories", {}),
        Call("search_memory", {"query": "vault code"}),
        Call("get_memory", {"path": "/memories/secret.md"}),
        Call("save_memory", {"path": "/memories/home.md", "description": "Lives in Lyon"}),
        Reply("Saved."),
    )
    as_dropper = kit(live, "dropper").session_stores.get("wo-sessions").get("s")
    written = as_dropper.extract_memories(memory_store=memory)
    assert [m.path for m in written] == ["/memories/home.md"]
    sent = json.dumps(llm.requests)
    assert "4711" not in sent and "Vault" not in sent
    tool_answers = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert len(tool_answers) == 4
    assert all("not allowed" in answer for answer in tool_answers[:3])
    assert "4711" not in "".join(tool_answers)


def test_a_memory_saved_then_deleted_by_query_is_not_answered(live, llm):
    """delete_memory by query: the paths it deleted leave the extraction's answer."""
    sessions, memory = setup_stores(live, "forget")
    session = sessions.add(actor_id="fay", session_id="s")
    session.append_items([{"role": "user", "content": "Forget my old phone number."}])
    llm.script(
        Call(
            "save_memory",
            {"path": "/memories/phone.md", "description": "Phone", "contents": "phone 555 0100"},
        ),
        Call(
            "save_memory", {"path": "/memories/city.md", "description": "City", "contents": "lives in Oslo"}
        ),
        Call("delete_memory", {"query": "phone number 555 0100"}),
        Reply("Forgot the phone number."),
    )
    done = session.extract_memories(memory_store=memory)
    assert [m.path for m in done] == ["/memories/city.md"]
    assert list(memories(live, memory, "fay")) == ["/memories/city.md"]
