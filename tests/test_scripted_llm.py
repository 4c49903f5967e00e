"""The scripted upstream LLM, driven by the real `openai` client with strict response validation:
every shape it answers must parse as a `ChatCompletion` / `ChatCompletionChunk`."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
)

# `tests` is not a package (and an installed distribution ships a top-level `tests` of its own), so
# the modules beside the test files are imported by their own names, like `conftest`.
from scripted_llm import NO_TURN_LEFT, Call, Fail, Reply, ScriptedLLM

USER: list[ChatCompletionMessageParam] = [{"role": "user", "content": "remember that the sky is blue"}]


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


def client_for(base_url: str, api_key: str = "k") -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, _strict_response_validation=True)


@pytest.fixture
def client(llm: ScriptedLLM) -> Iterator[openai.OpenAI]:
    with client_for(llm.url) as c:
        yield c


def function_calls(completion: ChatCompletion) -> list[ChatCompletionMessageFunctionToolCall]:
    calls = completion.choices[0].message.tool_calls or []
    assert all(isinstance(call, ChatCompletionMessageFunctionToolCall) for call in calls)
    return [call for call in calls if isinstance(call, ChatCompletionMessageFunctionToolCall)]


def accumulate(stream: Any) -> dict[str, Any]:
    """Fold a chat stream the way a client does: text deltas joined, tool call fragments by index."""
    out: dict[str, Any] = {"roles": [], "text": "", "calls": {}, "fragments": {}, "finish": [], "usage": None}
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk"
        if chunk.usage is not None:
            assert chunk.choices == []
            out["usage"] = chunk.usage
        for choice in chunk.choices:
            delta = choice.delta
            if delta.role:
                out["roles"].append(delta.role)
            if delta.content:
                out["text"] += delta.content
            for fragment in delta.tool_calls or []:
                call = out["calls"].setdefault(fragment.index, {"id": None, "name": None, "arguments": ""})
                if fragment.id:
                    call["id"] = fragment.id
                if fragment.function and fragment.function.name:
                    call["name"] = fragment.function.name
                if fragment.function and fragment.function.arguments:
                    call["arguments"] += fragment.function.arguments
                    out["fragments"][fragment.index] = out["fragments"].get(fragment.index, 0) + 1
            if choice.finish_reason:
                out["finish"].append(choice.finish_reason)
    return out


def test_a_reply_is_a_chat_completion(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    llm.script(Reply("The sky is blue."))
    completion = client.chat.completions.create(model="m-1", messages=USER)
    assert completion.id == "chatcmpl-1"
    assert completion.model == "m-1"
    choice = completion.choices[0]
    assert (choice.index, choice.finish_reason) == (0, "stop")
    assert (choice.message.role, choice.message.content, choice.message.tool_calls) == (
        "assistant",
        "The sky is blue.",
        None,
    )
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (6, 4)
    assert completion.usage.total_tokens == 10
    assert llm.requests == [{"model": "m-1", "messages": USER}]
    assert llm.headers[0]["authorization"] == "Bearer k"
    assert llm.pending == 0


def test_a_list_of_calls_is_one_message_with_several_tool_calls(
    llm: ScriptedLLM, client: openai.OpenAI
) -> None:
    llm.script(
        [Call("save_memory", {"path": "/a.md", "content": "blue"}), Call("search", '{"q": "sky"}', id="x")],
        Call("search", {}),
        Reply("cut", finish_reason="length"),
    )
    first = client.chat.completions.create(model="m", messages=USER)
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    assert message.content is None
    calls = function_calls(first)
    assert [(c.id, c.type, c.function.name) for c in calls] == [
        ("call_1", "function", "save_memory"),
        ("x", "function", "search"),
    ]
    assert json.loads(calls[0].function.arguments) == {"path": "/a.md", "content": "blue"}
    assert calls[1].function.arguments == '{"q": "sky"}'  # a string is sent as given
    second = client.chat.completions.create(model="m", messages=USER)
    assert second.id == "chatcmpl-2"
    assert [c.id for c in function_calls(second)] == ["call_2"]
    third = client.chat.completions.create(model="m", messages=USER)
    assert (third.choices[0].finish_reason, third.choices[0].message.content) == ("length", "cut")


def test_a_streamed_reply_comes_word_by_word(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    llm.script(Reply("The  sky is blue."), Reply("no usage"))
    stream = client.chat.completions.create(
        model="m", messages=USER, stream=True, stream_options={"include_usage": True}
    )
    folded = accumulate(stream)
    assert folded["text"] == "The  sky is blue."
    assert folded["roles"] == ["assistant"]
    assert folded["finish"] == ["stop"]
    assert (folded["usage"].prompt_tokens, folded["usage"].completion_tokens) == (6, 4)
    assert accumulate(client.chat.completions.create(model="m", messages=USER, stream=True))["usage"] is None


def test_stream_events_split_text_and_end_with_done(llm: ScriptedLLM) -> None:
    llm.script(Reply("one two three"))
    request = urllib.request.Request(
        f"{llm.url}/chat/completions",
        data=json.dumps({"model": "m", "messages": USER, "stream": True}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request) as response:
        assert response.headers["Content-Type"] == "text/event-stream"
        events = response.read().decode().split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    chunks = [json.loads(event.removeprefix("data: ")) for event in events[:-2]]
    assert [c["choices"][0]["delta"].get("content") for c in chunks] == ["", "one ", "two ", "three", None]
    assert {c["id"] for c in chunks} == {"chatcmpl-1"}


def test_streamed_tool_calls_come_in_fragments(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    llm.script([Call("save_memory", {"path": "/a.md", "content": "the sky is blue"}), Call("ping", "{}")])
    folded = accumulate(client.chat.completions.create(model="m", messages=USER, stream=True))
    assert folded["calls"] == {
        0: {
            "id": "call_1",
            "name": "save_memory",
            "arguments": json.dumps({"path": "/a.md", "content": "the sky is blue"}),
        },
        1: {"id": "call_2", "name": "ping", "arguments": "{}"},
    }
    assert folded["fragments"] == {0: 3, 1: 2}
    assert folded["finish"] == ["tool_calls"]
    assert folded["text"] == ""


def test_a_turn_function_answers_from_the_request(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    def echo_tool_result(request: dict[str, Any]) -> Reply:
        tool = [m for m in request["messages"] if m["role"] == "tool"]
        return Reply(f"saw {tool[0]['tool_call_id']}: {tool[0]['content']}")

    llm.script(Call("save_memory", {"path": "/a.md"}), echo_tool_result)
    first = client.chat.completions.create(model="m", messages=USER)
    call = function_calls(first)[0]
    messages: list[Any] = [
        *USER,
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "saved"},
    ]
    second = client.chat.completions.create(model="m", messages=messages)
    assert second.choices[0].message.content == "saw call_1: saved"
    assert [len(r["messages"]) for r in llm.requests] == [1, 3]


def test_a_turn_function_that_raises_fails_that_request(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    def broken(request: dict[str, Any]) -> Reply:
        raise KeyError("nope")

    llm.script(broken, lambda request: Fail(503, "busy"), Reply("after"))
    with pytest.raises(openai.InternalServerError, match="the turn function raised KeyError"):
        client.chat.completions.create(model="m", messages=USER)
    with pytest.raises(openai.InternalServerError, match="busy") as raised:
        client.chat.completions.create(model="m", messages=USER)
    assert raised.value.status_code == 503
    assert client.chat.completions.create(model="m", messages=USER).choices[0].message.content == "after"


@pytest.mark.parametrize(
    ("status", "error", "kind"),
    [
        (400, openai.BadRequestError, "invalid_request_error"),
        (429, openai.RateLimitError, "rate_limit_error"),
        (500, openai.InternalServerError, "server_error"),
    ],
)
def test_a_fail_turn_is_an_openai_error(
    llm: ScriptedLLM, client: openai.OpenAI, status: int, error: type[openai.APIStatusError], kind: str
) -> None:
    llm.script(Fail(status, "upstream exploded", times=2), Reply("recovered"))
    for _ in range(2):
        with pytest.raises(error, match="upstream exploded") as raised:
            client.chat.completions.create(model="m", messages=USER)
        assert raised.value.status_code == status
        assert raised.value.body == {"message": "upstream exploded", "type": kind, "code": None}
    assert client.chat.completions.create(model="m", messages=USER).choices[0].message.content == "recovered"
    assert len(llm.requests) == 3


def test_an_empty_script_answers_500_and_records_the_request(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError, match=NO_TURN_LEFT) as raised:
        client.chat.completions.create(model="m", messages=USER)
    assert raised.value.response.headers["x-should-retry"] == "false"
    assert llm.requests == [{"model": "m", "messages": USER}]


def test_an_api_key_is_checked_and_a_refused_request_consumes_no_turn() -> None:
    with ScriptedLLM(api_key="k") as llm, client_for(llm.url, "wrong") as wrong, client_for(llm.url) as right:
        llm.script(Reply("hello"))
        with pytest.raises(openai.AuthenticationError, match="Incorrect API key"):
            wrong.chat.completions.create(model="m", messages=USER)
        assert right.chat.completions.create(model="m", messages=USER).choices[0].message.content == "hello"
        assert [h["authorization"] for h in llm.headers] == ["Bearer wrong", "Bearer k"]
        assert len(llm.requests) == 2


def test_the_path_without_v1_and_the_model_list(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    llm.script(Reply("bare"))
    with client_for(llm.url.removesuffix("/v1")) as bare:
        assert bare.chat.completions.create(model="m", messages=USER).choices[0].message.content == "bare"
    assert [m.id for m in client.models.list()] == ["scripted"]


def test_an_unknown_path_is_a_json_404(llm: ScriptedLLM) -> None:
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(f"{llm.url}/embeddings")
    assert raised.value.code == 404
    assert json.loads(raised.value.read())["error"]["type"] == "not_found_error"
    assert llm.requests == []


def test_concurrent_requests_each_consume_one_turn(llm: ScriptedLLM, client: openai.OpenAI) -> None:
    llm.script(*(Reply(f"answer {i}") for i in range(8)))
    answers: list[str | None] = []

    def ask() -> None:
        answers.append(client.chat.completions.create(model="m", messages=USER).choices[0].message.content)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(a or "" for a in answers) == [f"answer {i}" for i in range(8)]
    assert len(llm.requests) == 8
    assert llm.pending == 0


def test_reset_forgets_the_script_the_records_and_the_counters(
    llm: ScriptedLLM, client: openai.OpenAI
) -> None:
    llm.script(Call("a", {}), Reply("dropped"))
    client.chat.completions.create(model="m", messages=USER)
    llm.reset()
    assert (llm.requests, llm.headers, llm.pending) == ([], [], 0)
    llm.script(Call("a", {}))
    completion = client.chat.completions.create(model="m", messages=USER)
    assert completion.id == "chatcmpl-1"
    assert function_calls(completion)[0].id == "call_1"


@pytest.mark.parametrize("turn", ["text", [], [Reply("x")], None])
def test_a_bad_turn_is_refused_when_scripted(llm: ScriptedLLM, turn: Any) -> None:
    with pytest.raises(TypeError, match="a turn is"):
        llm.script(turn)
