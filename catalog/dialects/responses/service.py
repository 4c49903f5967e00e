"""Responses: the upstream model answers over a conversation, using the conversation's memory.

Rules:
- a response over a conversation needs WRITE_MEMORY_STORE on the conversation's store (action
  `responses.create`: it appends to the conversation) and READ_MEMORY_STORE too
  (`conversations.read`: the conversation's items are sent to the model, and nothing a caller may
  not read reaches a model on its behalf); the model gets the memory
  tools (`catalog.toolkit`) bound to that store and the conversation's scope, never a scope it
  chose; without a conversation the model answers alone (no tools, nothing kept; action
  `responses.create_stateless`, any authenticated principal);
- the chat sent upstream is `MEMORY_INSTRUCTIONS` (then the request's `instructions`) as the
  system message, the conversation's last items within a budget (`history`), and the input;
- the server runs each tool call itself as the caller: authorized, held to the scope binding and
  audited as its entry operation, each with an audit event of its own (`auditlog.operation`);
  writes carry `origin` the conversation (lineage) and their provenance names the channel
  (`responses`) and the model; a store's trust policy judges them as a model's. A tool that
  fails answers the model an error it can act on. At most `llm_max_steps` model calls; the last
  one is offered no tools, so the model answers;
- the turn (input items, the tool calls as `mcp_call` items, the answer) is appended to the
  conversation at the end, in one transaction with the request's audit event: a response that
  fails (the upstream fails, the client goes away) appends nothing, so retrying it duplicates
  nothing in the conversation. Memory the model already saved in it stays saved: each tool call is
  a whole, audited change of its own.
- an upstream failure is 502 `BAD_GATEWAY`; in a stream, once the first event is sent, it is a
  `response.failed` event instead.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

from catalog.access import SecurableType
from catalog.auth import Principal
from catalog.context import Context
from catalog.dialects.conversations import service as conversations
from catalog.dialects.conversations.items import Item, check_item, check_items
from catalog.dialects.responses.chat import history_messages
from catalog.dialects.responses.schemas import MAX_INPUT_CHARS, ConversationRef, ResponseCreate
from catalog.entries import operations as ops
from catalog.errors import InvalidParameter
from catalog.llm import ChatModel, TextDelta, ToolCall, Turn, Usage, require
from catalog.toolkit import MEMORY_INSTRUCTIONS, Bound, Outcome, converse, function_tools, run_call

HISTORY_ITEMS = 50  # conversation items read for the model's context (then trimmed to the budget)
SERVER_LABEL = "memory"  # the `server_label` of the tool calls the server runs
MAX_TOOL_OUTPUT = 16 * 1024  # characters of a tool's answer kept in the conversation


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"


@dataclass
class Prepared:
    """A checked request, authorized, with what the model needs."""

    request: ResponseCreate
    model: ChatModel
    messages: list[dict[str, Any]]
    input_items: list[Item]
    bound: Bound | None  # None: no conversation, no tools
    conversation_id: str | None
    conversation_store_id: str | None  # the conversation's store (None: no conversation)
    response_id: str = field(default_factory=lambda: new_id("resp"))
    created_at: int = field(default_factory=lambda: int(time.time()))


# --- events of a response in progress (the route turns them into JSON or server-sent events) ---------


@dataclass(frozen=True)
class ToolRan:
    item: dict[str, Any]  # the mcp_call item, completed


@dataclass(frozen=True)
class Text:
    item_id: str  # the message it belongs to
    delta: str


@dataclass(frozen=True)
class MessageDone:
    item: dict[str, Any]  # the assistant's message item


@dataclass(frozen=True)
class Completed:
    response: dict[str, Any]


Event = ToolRan | Text | MessageDone | Completed


async def prepare(ctx: Context, principal: Principal, request: ResponseCreate) -> Prepared:
    """Check the request and authorize it (400, then 403 / 404, then 501 before any model call)."""
    if request.previous_response_id is not None:
        raise InvalidParameter(
            "previous_response_id is not supported: send `conversation`, which keeps the history",
            "previous_response_id",
        )
    if request.tools:
        raise InvalidParameter(
            "client tools are not supported: the server offers the model the memory tools of the "
            "conversation's store and runs them itself",
            "tools",
        )
    if isinstance(request.tool_choice, dict):
        raise InvalidParameter('tool_choice must be "auto" or "none"', "tool_choice")
    input_items = _input_items(request.input)
    memory = request.conversation is not None and request.tool_choice != "none"
    system = MEMORY_INSTRUCTIONS if memory else ""
    if request.instructions:
        system = f"{system}\n\n{request.instructions}" if system else request.instructions
    conversation_id = (
        request.conversation.id if isinstance(request.conversation, ConversationRef) else request.conversation
    )
    bound: Bound | None = None
    history: list[dict[str, Any]] = []
    conversation_store_id: str | None = None
    if conversation_id is None:
        await ctx.access.resolve(principal, "responses.create_stateless", SecurableType.METASTORE)
    else:
        row, store = await conversations.open_conversation(
            ctx, principal, conversation_id, "responses.create"
        )
        # the model reads the conversation on the caller's behalf: a write-only caller may append
        # to it but never have it read to a model (which would repeat it)
        await ctx.access.ensure(principal, "conversations.read", store)
        origin = ops.TranscriptSource(
            kind="conversation",
            store=store.full_name,
            store_id=store.node.id,
            scope=row.scope,
            thread_id=conversation_id,
            item_ids=tuple(item.id for item in input_items),  # the turn that led to the writes
        )
        bound = Bound(principal=principal, store=store.full_name, scope=row.scope, origin=origin)
        conversation_store_id = row.store_id
        history = await conversations.recent_items(ctx, row.store_id, conversation_id, HISTORY_ITEMS)
    model = require(ctx.llm)  # 501 naming the variable
    chosen = model.model_for(request.model)  # 501 when there is no model to ask
    if bound is not None:  # the writes' provenance: this model, through responses
        bound = replace(bound, channel=ops.Channel(via="responses", model=chosen))
    messages = ([{"role": "system", "content": system}] if system else []) + history_messages(
        history, [item.item for item in input_items]
    )
    return Prepared(request, model, messages, input_items, bound, conversation_id, conversation_store_id)


def _input_items(raw: str | list[dict[str, Any]]) -> list[Item]:
    if isinstance(raw, str):
        if not raw.strip():
            raise InvalidParameter("input must not be empty", "input")
        if len(raw) > MAX_INPUT_CHARS:
            raise InvalidParameter(f"input must be at most {MAX_INPUT_CHARS} characters", "input")
        return [check_item({"type": "message", "role": "user", "content": raw}, 0, "input")]
    if not raw:
        raise InvalidParameter("input must not be empty", "input")
    return check_items(raw, "input")


async def run(
    ctx: Context, principal: Principal, prepared: Prepared, *, stream: bool
) -> AsyncIterator[Event]:
    """The response's events, ending with `Completed` once the turn is appended. Raises
    `UpstreamFailed` when the model fails (nothing appended)."""
    request, model = prepared, prepared.model
    tools = function_tools() if prepared.bound is not None and request.request.tool_choice != "none" else []
    messages = list(prepared.messages)
    output: list[dict[str, Any]] = []
    usage = Usage()
    message: dict[str, Any] | None = None
    message_id = new_id("msg")

    async def run_tool(tool_call: ToolCall) -> Outcome:
        assert prepared.bound is not None
        audit = {"conversation_id": prepared.conversation_id} if prepared.conversation_id is not None else {}
        return await run_call(ctx, prepared.bound, tool_call.name, tool_call.arguments, audit)

    async for event in converse(
        model,
        messages,
        tools,
        run_tool,
        ctx.settings.llm_max_steps,
        model=request.request.model,
        stream=stream,
        extra=_options(request.request),
    ):
        if isinstance(event, TextDelta):
            yield Text(message_id, event.text)
        elif isinstance(event, Turn):
            if event.usage is not None:
                usage = Usage(
                    usage.prompt_tokens + event.usage.prompt_tokens,
                    usage.completion_tokens + event.usage.completion_tokens,
                )
            if event.text:
                message = _message(event.text, message_id)
                output.append(message)
                yield MessageDone(message)
            message_id = new_id("msg")  # the next turn's text is a message of its own
        else:
            item = _tool_item(event.call, event.outcome)
            output.append(item)
            yield ToolRan(item)
    if message is None:  # the model answered with nothing: an empty message, as OpenAI would
        message = _message("", new_id("msg"))
        output.append(message)
        yield MessageDone(message)
    if prepared.conversation_id is not None:
        assert prepared.conversation_store_id is not None  # read with the conversation
        turn_items = [*prepared.input_items, *check_items(output, "output")]
        await conversations.append_turn(
            ctx, principal, prepared.conversation_store_id, prepared.conversation_id, turn_items
        )
    yield Completed(response_object(prepared, "completed", output, usage))


def _options(request: ResponseCreate) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if request.temperature is not None:
        extra["temperature"] = request.temperature
    if request.top_p is not None:
        extra["top_p"] = request.top_p
    if request.max_output_tokens is not None:
        extra["max_tokens"] = request.max_output_tokens
    return extra


def _message(text: str, message_id: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": message_id,
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def _tool_item(tool_call: ToolCall, outcome: Outcome) -> dict[str, Any]:
    """The `mcp_call` item of a tool call the model made, for the response and its conversation."""
    item: dict[str, Any] = {
        "type": "mcp_call",
        "id": new_id("mcp"),
        "server_label": SERVER_LABEL,
        "name": tool_call.name[:128],
        "arguments": tool_call.arguments,
        "status": "completed",
    }
    if outcome.error is not None:
        # OpenAI's shape of a failed MCP tool call
        item["error"] = {
            "type": "mcp_tool_execution_error",
            "content": [{"type": "text", "text": outcome.error}],
        }
        item["status"] = "failed"
    else:
        item["output"] = outcome.answer[:MAX_TOOL_OUTPUT]
    return item


def response_object(
    prepared: Prepared,
    status: str,
    output: list[dict[str, Any]],
    usage: Usage | None,
    error: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The Response object of OpenAI's API, as its clients parse it."""
    body: dict[str, Any] = {
        "id": prepared.response_id,
        "object": "response",
        "created_at": prepared.created_at,
        "status": status,
        "model": prepared.request.model,
        "output": output,
        "parallel_tool_calls": False,
        "tool_choice": prepared.request.tool_choice or "auto",
        "tools": [],
        "error": error,
        "incomplete_details": None,
        "instructions": prepared.request.instructions,
        "metadata": prepared.request.metadata or {},
        "temperature": prepared.request.temperature,
        "top_p": prepared.request.top_p,
    }
    if prepared.conversation_id is not None:
        body["conversation"] = {"id": prepared.conversation_id}
    if usage is not None and usage.total_tokens:
        body["usage"] = {
            "input_tokens": usage.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": usage.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.total_tokens,
        }
    return body
