"""The upstream model client (`catalog.llm`) against the scripted OpenAI-compatible server: what it
sends, how tool calls come back (whole and streamed in fragments), which failures it retries, and
that every failure is a 502 that says what the upstream did."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from scripted_llm import Call, Fail, Reply, ScriptedLLM

from catalog.errors import NotConfigured, UpstreamFailed
from catalog.llm import ChatModel, LLMConfig, TextDelta, Turn, configured, require
from catalog.settings import Settings

MESSAGES = [{"role": "user", "content": "hi"}]
TOOLS = [{"type": "function", "function": {"name": "save_memory", "parameters": {"type": "object"}}}]


UPSTREAM = {"api_key": "k"}  # what the scripted upstream expects (the `llm` fixture)


def run(make: Callable[[ChatModel], Awaitable[Any]], config: LLMConfig) -> Any:
    async def go() -> Any:
        model = ChatModel(config)
        try:
            return await make(model)
        finally:
            await model.close()

    return asyncio.run(go())


def config(llm: ScriptedLLM, **kwargs: Any) -> LLMConfig:
    return LLMConfig(**{"base_url": llm.url, "api_key": "k", "model": None, "max_retries": 0, **kwargs})


async def streamed(model: ChatModel) -> list[TextDelta | Turn]:
    return [part async for part in model.stream(MESSAGES, TOOLS, model="m")]


def test_a_completion_with_tool_calls(llm):
    llm.script([Call("save_memory", {"path": "/a.md"}), Call("list_memories", {})])
    turn = run(lambda m: m.complete(MESSAGES, TOOLS, model="asked", extra={"temperature": 0.2}), config(llm))
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [
        ("save_memory", '{"path": "/a.md"}'),
        ("list_memories", "{}"),
    ]
    assert turn.finish_reason == "tool_calls" and turn.usage is not None and turn.usage.total_tokens > 0
    sent = llm.requests[0]
    assert sent["model"] == "asked" and sent["temperature"] == 0.2
    assert sent["tools"] == TOOLS and sent["tool_choice"] == "auto"
    assert llm.headers[0]["authorization"] == "Bearer k"
    # the configured model wins over the one a request names
    llm.script(Reply("ok"))
    run(lambda m: m.complete(MESSAGES, model="asked"), config(llm, model="configured"))
    assert llm.requests[1]["model"] == "configured" and "tools" not in llm.requests[1]


def test_a_stream_gives_text_as_it_comes_then_the_whole_turn(llm):
    llm.script(Reply("one two three"))
    parts = run(streamed, config(llm))
    assert "".join(p.text for p in parts if isinstance(p, TextDelta)) == "one two three"
    assert len([p for p in parts if isinstance(p, TextDelta)]) > 1
    assert isinstance(parts[-1], Turn) and parts[-1].text == "one two three"
    assert llm.requests[0]["stream"] is True and llm.requests[0]["stream_options"] == {"include_usage": True}
    # tool calls arrive in fragments and are put together
    llm.script(Call("save_memory", {"path": "/memories/long-path-for-fragments.md", "description": "d"}))
    [turn] = run(streamed, config(llm))
    assert turn.tool_calls[0].name == "save_memory"
    assert (
        turn.tool_calls[0].arguments == '{"path": "/memories/long-path-for-fragments.md", "description": "d"}'
    )


def test_retries_are_bounded_and_only_for_what_may_pass(llm):
    llm.script(Fail(status=429, message="slow down", times=2), Reply("at last"))
    turn = run(lambda m: m.complete(MESSAGES, model="m"), config(llm, max_retries=2))
    assert turn.text == "at last" and len(llm.requests) == 3
    llm.reset()
    llm.script(Fail(status=500, message="boom", times=3))
    with pytest.raises(UpstreamFailed, match="answered 500: boom"):
        run(lambda m: m.complete(MESSAGES, model="m"), config(llm, max_retries=2))
    assert len(llm.requests) == 3  # the first try and two retries
    llm.reset()
    llm.script(Fail(status=400, message="bad tools"), Reply("never"))
    with pytest.raises(UpstreamFailed, match="answered 400: bad tools"):
        run(lambda m: m.complete(MESSAGES, model="m"), config(llm, max_retries=2))
    assert len(llm.requests) == 1  # a 400 is not retried
    # a wrong key is the upstream's 401, not retried, and the key is never in the message
    llm.reset()
    with pytest.raises(UpstreamFailed) as refused:
        run(lambda m: m.complete(MESSAGES, model="m"), config(llm, api_key="wrong-secret", max_retries=2))
    assert "401" in refused.value.message and "wrong-secret" not in refused.value.message


def test_a_slow_or_absent_upstream_is_a_clear_502(llm):
    llm.script(Reply("too late", delay=1.5))
    with pytest.raises(UpstreamFailed, match="timed out"):
        run(lambda m: m.complete(MESSAGES, model="m"), config(llm, timeout=0.3))
    with pytest.raises(
        UpstreamFailed, match=r"could not get an answer from the model server at http://127\.0\.0\.1:9"
    ):
        run(
            lambda m: m.complete(MESSAGES, model="m"),
            LLMConfig(base_url="http://127.0.0.1:9/v1", max_retries=0),
        )


def test_an_answer_that_is_not_a_chat_completion_is_a_502():
    def not_chat(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"object": "list", "data": []})

    async def go() -> Turn:
        model = ChatModel(
            LLMConfig(base_url="http://upstream.invalid/v1"), transport=httpx.MockTransport(not_chat)
        )
        try:
            return await model.complete(MESSAGES, model="m")
        finally:
            await model.close()

    with pytest.raises(UpstreamFailed, match="not a chat completion"):
        asyncio.run(go())


def test_without_a_base_url_there_is_no_model_and_routes_say_which_variable():
    assert configured(Settings()) is None
    with pytest.raises(NotConfigured, match="CATALOG_LLM_BASE_URL"):
        require(None)
    model = configured(Settings(llm_base_url="http://127.0.0.1:1/v1"))
    assert model is not None
    with pytest.raises(NotConfigured, match="CATALOG_LLM_MODEL"):
        model.model_for(None)
    asyncio.run(model.close())
