"""Responses over conversations, with the real `openai` client against a live server whose upstream
model is a scripted OpenAI-compatible server: the model's memory tool calls run on the server as
the caller (audited one by one), the turn lands in the conversation only when the answer is
complete, streaming follows OpenAI's events, and an upstream failure changes nothing."""

from __future__ import annotations

import json
import uuid

import httpx
import openai
import pytest
from rest import UC, bearer
from scripted_llm import Call, Fail, Reply

from catalog.auth import mint_dev_token
from catalog.settings import Settings
from catalog.toolkit import MEMORY_INSTRUCTIONS

BASE = "/ai-gateway/mlflow/v1"
STORE = "main.default.assistant"


UPSTREAM = {"api_key": "upstream-key"}  # what the scripted upstream expects (the `llm` fixture)


@pytest.fixture(scope="module")
def live(database_url, tmp_path_factory, live_server, llm):
    server = live_server(
        tmp_path_factory.mktemp("responses"),
        env={
            "CATALOG_DATABASE_URL": database_url,
            "CATALOG_LLM_BASE_URL": llm.url,
            "CATALOG_LLM_API_KEY": "upstream-key",
            "CATALOG_LLM_MAX_RETRIES": "1",
            "CATALOG_LLM_MAX_STEPS": "4",
        },
    )
    try:
        r = httpx.post(
            f"{server.url}{UC}/memory-stores",
            headers=bearer(server),
            json={"name": "assistant", "catalog_name": "main", "schema_name": "default"},
        )
        assert r.status_code == 200, r.text
        r = httpx.patch(
            f"{server.url}{UC}/permissions/memory_store/{STORE}",
            headers=bearer(server),
            json={
                "changes": [
                    {"principal": "alice", "add": ["READ_MEMORY_STORE", "WRITE_MEMORY_STORE"]},
                    {"principal": "rita", "add": ["READ_MEMORY_STORE"]},
                    {"principal": "wanda", "add": ["WRITE_MEMORY_STORE"]},
                ]
            },
        )
        assert r.status_code == 200, r.text
        yield server
    finally:
        server.stop()


def client_for(live, sub: str = "alice") -> openai.OpenAI:
    token = mint_dev_token(Settings(data_dir=live.data_dir), sub)
    return openai.OpenAI(base_url=f"{live.url}{BASE}", api_key=token, max_retries=0)


def conversation(live, user: str, sub: str = "alice") -> str:
    conv = client_for(live, sub).conversations.create(
        extra_body={"memory_store": {"name": STORE}, "scope": {"kind": "user", "value": user}}
    )
    return conv.id


def items(live, conversation_id: str) -> list[dict]:
    page = client_for(live).conversations.items.list(conversation_id, order="asc", limit=100)
    return [item.model_dump(exclude_none=True) for item in page.data]


def memory(live, user: str, path: str) -> httpx.Response:
    return httpx.get(
        f"{live.url}{UC}/memory-stores/{STORE}/entries:get",
        headers=bearer(live),
        params={"scope": user, "path": path},
    )


def test_the_model_saves_a_memory_and_a_new_conversation_recalls_it_streamed(live, llm):
    user = f"u-{uuid.uuid4().hex[:8]}"
    oai = client_for(live)
    first = conversation(live, user)
    llm.script(
        Call(
            "save_memory",
            {
                "path": "/memories/health.md",
                "description": "Allergic to peanuts",
                "contents": "The user is allergic to peanuts.",
            },
        ),
        Reply("Noted: no peanuts, ever."),
    )
    response = oai.responses.create(
        model="house-model", input="Remember that I'm allergic to peanuts.", conversation=first
    )
    assert response.output_text == "Noted: no peanuts, ever."
    assert response.status == "completed" and response.conversation.id == first
    saved = memory(live, user, "/memories/health.md")
    assert saved.status_code == 200 and "peanuts" in saved.json()["contents"]
    assert saved.json()["created_by"] == "alice"  # the tool ran as the caller

    # what went upstream: the memory instructions, the input, the tools; the model the request names
    sent = llm.requests[0]
    assert sent["model"] == "house-model"
    assert sent["messages"][0] == {"role": "system", "content": MEMORY_INSTRUCTIONS}
    assert sent["messages"][-1] == {"role": "user", "content": "Remember that I'm allergic to peanuts."}
    assert {tool["function"]["name"] for tool in sent["tools"]} >= {"search_memory", "save_memory"}
    assert llm.headers[0]["authorization"] == "Bearer upstream-key"
    tool_answer = llm.requests[1]["messages"][-1]
    assert tool_answer["role"] == "tool" and "saved /memories/health.md" in tool_answer["content"]

    # the conversation holds the whole turn, in order
    turn = items(live, first)
    assert [(i["type"], i.get("role")) for i in turn] == [
        ("message", "user"),
        ("mcp_call", None),
        ("message", "assistant"),
    ]
    assert turn[1]["name"] == "save_memory" and turn[1]["server_label"] == "memory"
    # the memory is derived from the conversation's turn (lineage)
    found = httpx.get(
        f"{live.url}{UC}/system/lineage",
        headers=bearer(live),
        params={"securable_full_name": STORE, "scope": user, "path": "/memories/health.md"},
    ).json()
    assert [(o["source"]["kind"], o["source"]["conversation_id"]) for o in found["origins"]] == [
        ("conversation", first)
    ]
    assert found["origins"][0]["source"]["item_ids"] == [turn[0]["id"]]  # the input that led to it

    # a new conversation: the model searches and answers from what it finds, streamed
    second = conversation(live, user)

    def answer_from_memory(request: dict) -> Reply:
        found = json.loads(request["messages"][-1]["content"])
        return Reply(f"You told me: {found['memories'][0]['description']}.")

    llm.script(Call("search_memory", {"query": "food allergies"}), answer_from_memory)
    events = list(
        oai.responses.create(model="house-model", input="What can't I eat?", conversation=second, stream=True)
    )
    kinds = [event.type for event in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert "response.output_text.delta" in kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "You told me: Allergic to peanuts."
    assert events[-1].response.output_text == text
    assert [i["type"] for i in items(live, second)] == ["message", "mcp_call", "message"]

    # the helper of the openai client accepts the stream too
    llm.script(Reply("Still peanuts."))
    with oai.responses.stream(model="house-model", input="Remind me?", conversation=second) as stream:
        final = stream.get_final_response()
    assert final.output_text == "Still peanuts."


def test_each_tool_call_is_audited_as_its_operation(live, llm):
    user = f"u-{uuid.uuid4().hex[:8]}"
    conv = conversation(live, user)
    llm.script(
        [
            Call("save_memory", {"path": "/memories/a.md", "description": "a", "contents": "alpha"}),
            Call("get_memory", {"path": "/memories/missing.md"}),
        ],
        Reply("done"),
    )
    with httpx.Client() as http:
        r = http.post(
            f"{live.url}{BASE}/responses",
            headers=bearer(live, "alice"),
            json={"model": "m", "input": "save alpha", "conversation": conv},
        )
    assert r.status_code == 200, r.text
    request_id = r.headers["x-request-id"]
    events = httpx.get(
        f"{live.url}{UC}/system/audit", headers=bearer(live), params={"page_size": 200, "principal": "alice"}
    ).json()["events"]
    mine = [e for e in events if e["request_id"] == request_id]
    by_action = {(e["action_name"], e["status_code"]) for e in mine}
    assert ("responses.create", 200) in by_action
    assert ("entries.write", 200) in by_action  # the save
    assert ("entries.read", 404) in by_action  # the get of a memory that is not there
    tools = [e["request_params"].get("tool") for e in mine if e["action_name"].startswith("entries.")]
    assert sorted(tools) == ["get_memory", "save_memory"]
    # the failed tool call is an error the model read, and it is kept in the conversation
    failed = [i for i in items(live, conv) if i["type"] == "mcp_call" and i.get("error")]
    assert len(failed) == 1 and failed[0]["status"] == "failed"
    assert "no memory at /memories/missing.md" in failed[0]["error"]["content"][0]["text"]


def test_an_upstream_failure_is_502_and_changes_nothing(live, llm):
    user = f"u-{uuid.uuid4().hex[:8]}"
    conv = conversation(live, user)
    llm.script(Fail(status=503, message="model overloaded", times=2))  # the first call and its one retry
    with pytest.raises(openai.APIStatusError) as failure:
        client_for(live).responses.create(model="m", input="hello?", conversation=conv)
    assert failure.value.status_code == 502
    assert failure.value.body["error_code"] == "BAD_GATEWAY"
    assert "model overloaded" in failure.value.body["message"]
    assert failure.value.response.headers["x-should-retry"] == "false"
    assert len(llm.requests) == 2  # retried once (CATALOG_LLM_MAX_RETRIES=1)
    assert items(live, conv) == []

    # a failure after a tool step: the streamed answer ends with response.failed, and the
    # conversation is left as it was (the memory saved meanwhile is a whole change of its own)
    llm.reset()
    llm.script(
        Call("save_memory", {"path": "/memories/b.md", "description": "b", "contents": "beta"}),
        Fail(status=400, message="context too long"),
    )
    events = list(
        client_for(live).responses.create(model="m", input="save beta", conversation=conv, stream=True)
    )
    assert events[-1].type == "response.failed"
    assert "context too long" in events[-1].response.error.message
    assert items(live, conv) == []
    assert memory(live, user, "/memories/b.md").status_code == 200


def test_privileges_and_bad_input(live, llm):
    user = f"u-{uuid.uuid4().hex[:8]}"
    conv = conversation(live, user)
    with pytest.raises(openai.PermissionDeniedError):  # READ only: a response appends
        client_for(live, "rita").responses.create(model="m", input="hi", conversation=conv)
    with pytest.raises(openai.PermissionDeniedError):
        client_for(live, "stranger").responses.create(model="m", input="hi", conversation=conv)
    with pytest.raises(openai.NotFoundError) as missing:
        client_for(live).responses.create(model="m", input="hi", conversation="conv_missing")
    assert missing.value.body["error_code"] == "NOT_FOUND"
    assert llm.requests == []  # nothing went upstream
    for body, field in [
        ({"model": "m", "input": "", "conversation": conv}, "input"),
        (
            {"model": "m", "input": "x", "conversation": conv, "tools": [{"type": "function", "name": "f"}]},
            "tools",
        ),
        ({"model": "m", "input": [{"role": "robot", "content": "x"}], "conversation": conv}, "input[0].role"),
        ({"model": "m", "input": "x", "conversation": conv, "surprise": 1}, "surprise"),
    ]:
        r = httpx.post(f"{live.url}{BASE}/responses", headers=bearer(live, "alice"), json=body)
        assert r.status_code == 400, r.text
        assert field in r.json()["message"]
    assert llm.requests == []


def test_a_write_only_caller_gets_no_response_over_a_conversation_it_may_not_read(live, llm):
    """WRITE alone appends to a conversation, but a response reads it to the model (which would
    repeat it): it needs READ too, and nothing goes upstream when refused."""
    user = f"u-{uuid.uuid4().hex[:8]}"
    conv = conversation(live, user)
    client_for(live).conversations.items.create(
        conv, items=[{"type": "message", "role": "user", "content": "My PIN is 4711."}]
    )
    llm.script(Reply("You said: My PIN is 4711."))
    with pytest.raises(openai.PermissionDeniedError) as refused:
        client_for(live, "wanda").responses.create(
            model="m", input="Repeat this conversation word for word.", conversation=conv
        )
    assert "READ" in refused.value.body["message"] or "read" in refused.value.body["message"]
    with pytest.raises(openai.PermissionDeniedError):
        client_for(live, "wanda").responses.create(
            model="m", input="Repeat it.", conversation=conv, stream=True
        )
    assert llm.requests == []
    assert [item["content"][0]["text"] for item in items(live, conv)] == ["My PIN is 4711."]
    # the refusal is audited as the read it needed
    r = httpx.get(
        f"{live.url}{UC}/system/audit",
        headers=bearer(live),
        params={"principal": "wanda", "decision": "deny", "page_size": 100},
    )
    assert r.status_code == 200, r.text
    assert {event["action_name"] for event in r.json()["events"]} == {"conversations.read"}


def test_tool_rounds_are_bounded_and_the_last_call_must_answer(live, llm):
    user = f"u-{uuid.uuid4().hex[:8]}"
    conv = conversation(live, user)
    llm.script(*[Call("list_memories", {}) for _ in range(3)], Reply("Nothing kept yet."))
    response = client_for(live).responses.create(model="m", input="what do you know?", conversation=conv)
    assert response.output_text == "Nothing kept yet."
    assert len(llm.requests) == 4  # CATALOG_LLM_MAX_STEPS
    assert all("tools" in request for request in llm.requests[:3])
    assert "tools" not in llm.requests[3]  # the last call is offered no tools


def test_a_response_without_a_conversation_keeps_nothing(live, llm):
    llm.script(Reply("Hello."))
    response = client_for(live, "stranger").responses.create(model="m", input="hi", instructions="Be brief.")
    assert response.output_text == "Hello." and response.conversation is None
    assert llm.requests[0]["messages"][0] == {"role": "system", "content": "Be brief."}
    assert "tools" not in llm.requests[0]


def test_without_an_upstream_model_responses_are_501(client, token):
    r = client.post(f"{BASE}/responses", headers=token(), json={"model": "m", "input": "hi"})
    assert r.status_code == 501
    assert r.json()["error_code"] == "NOT_IMPLEMENTED" and "CATALOG_LLM_BASE_URL" in r.json()["message"]


def test_the_openai_agents_sdk_runs_an_agent_on_a_conversation(live, llm):
    """The OpenAI Agents SDK's Responses model (which sends `include`, `tools` and more) runs an
    agent whose memory the server keeps: streamed and not."""
    import asyncio

    from agents import Agent, OpenAIResponsesModel, Runner, set_tracing_disabled

    set_tracing_disabled(True)
    user = f"u-{uuid.uuid4().hex[:8]}"
    conv = conversation(live, user)
    token = mint_dev_token(Settings(data_dir=live.data_dir), "alice")

    async def run() -> tuple[str, str]:
        async with openai.AsyncOpenAI(base_url=f"{live.url}{BASE}", api_key=token, max_retries=0) as client:
            return await converse(client)

    async def converse(client: openai.AsyncOpenAI) -> tuple[str, str]:
        agent = Agent(
            name="helper",
            instructions="Be brief.",
            model=OpenAIResponsesModel(model="m", openai_client=client),
        )
        llm.script(
            Call(
                "save_memory",
                {"path": "/memories/tea.md", "description": "Likes green tea", "contents": "green"},
            ),
            Reply("I'll remember."),
        )
        first = await Runner.run(agent, "I like green tea.", conversation_id=conv)
        llm.script(Reply("Green tea."))
        streamed = Runner.run_streamed(agent, "What do I drink?", conversation_id=conv)
        async for _ in streamed.stream_events():
            pass
        return str(first.final_output), str(streamed.final_output)

    assert asyncio.run(run()) == ("I'll remember.", "Green tea.")
    assert memory(live, user, "/memories/tea.md").status_code == 200
    assert llm.requests[0]["messages"][0]["content"].endswith("Be brief.")  # the agent's instructions
    assert [i["type"] for i in items(live, conv)] == ["message", "mcp_call", "message", "message", "message"]
