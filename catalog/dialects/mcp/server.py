"""The memory tools as an MCP server (streamable HTTP, the `mcp` package), one per memory store at
`/mcp/memory-stores/{catalog.schema.store}` on the server's own port.

Each HTTP request is one JSON-RPC message, served statelessly with a JSON answer (no session to
keep between requests, no server-to-client stream): so the request's audit event is written after
its message was handled and records what it did. `catalog.dialects.mcp.routes` authenticates the request,
authorizes `mcp.connect` on the store and binds the scope before the message reaches this server;
each tool call is then authorized again, by the entry operation it runs, and audited as that
operation (the tool named in the event's parameters).

Errors, as the MCP specification sorts them:
- a request the server cannot act on is a JSON-RPC error: `-32602` invalid params for an unknown
  tool or prompt (the message names it; the request's audit event records a 400) and for params of
  the wrong shape, `-32601` for a method the server does not offer (resources), `-32600` for an id
  MCP does not allow (answered by the route, before the message reaches this server). These are
  expected refusals: nothing is logged but the request line;
- a tool call the model can correct (bad arguments, a missing memory, a privilege it lacks) is a
  tool result with `isError`, its message written for the model;
- only a fault of the server is logged with its trace (once, with the request id).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.shared.exceptions import MCPError

from catalog import __version__
from catalog.context import Context
from catalog.errors import InvalidParameter, RetryLater, is_unavailable, log_unexpected
from catalog.recorder import PendingEvent, begin_operation, current, note_outcome, note_params
from catalog.toolkit.instructions import MEMORY_INSTRUCTIONS
from catalog.toolkit.tools import TOOLS, Bound, ToolError, call

STATE_KEY = "memory_tools"  # where the route leaves the `Binding` in the ASGI scope's state
PROMPT = "memory_instructions"
TOOL_NAMES = tuple(tool.name for tool in TOOLS)


@dataclass(frozen=True)
class Binding:
    """What the route decided for one request: the tools' store and scope, the server's context,
    and the request's audit context (the tool call records its operation there)."""

    ctx: Context
    bound: Bound
    audit: PendingEvent | None
    request_id: str


def _binding(request_context: Any) -> Binding:
    request = request_context.request
    binding = request.scope["state"].get(STATE_KEY) if request is not None else None
    if not isinstance(binding, Binding):  # only the route reaches this server
        raise RuntimeError("an MCP request without its binding")
    if binding.audit is not None:
        current.set(binding.audit)  # this task's context: the request's audit event
    return binding


def _invalid_params(message: str) -> MCPError:
    """The JSON-RPC error of a request naming something this server does not have. An `MCPError`
    is answered as it is and logged by nobody; any other exception a handler raised would be
    answered with code 0 and logged with its whole trace, once per request."""
    note_outcome(InvalidParameter.status_code, InvalidParameter.error_code)
    return MCPError(code=types.INVALID_PARAMS, message=message)


def _tool(tool: Any) -> types.Tool:
    return types.Tool(
        name=tool.name,
        title=tool.title,
        description=tool.description,
        input_schema=tool.input_schema,
        annotations=types.ToolAnnotations(
            title=tool.title,
            read_only_hint=tool.read_only,
            destructive_hint=tool.destructive,
            idempotent_hint=tool.read_only,
            open_world_hint=False,
        ),
    )


async def _list_tools(request_context: Any, params: Any) -> types.ListToolsResult:
    _binding(request_context)
    return types.ListToolsResult(tools=[_tool(tool) for tool in TOOLS])


def _failed(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


async def _call_tool(request_context: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    binding = _binding(request_context)
    if params.name not in TOOL_NAMES:
        # no operation to authorize or record: the event stays the request's `mcp.connect`
        note_params({"tool": params.name[:64]})
        raise _invalid_params(f"unknown tool {params.name[:64]!r}; the tools are {', '.join(TOOL_NAMES)}")
    arguments = dict(params.arguments or {})
    begin_operation(_audited_arguments(params.name, arguments, binding.bound))
    try:
        result = await call(binding.ctx, binding.bound, params.name, arguments)
    except ToolError as exc:
        note_outcome(exc.status, exc.error_code)
        return _failed(exc.message)
    except RetryLater:
        raise  # the request fails as a whole: 503/429 with Retry-After
    except Exception as exc:
        if is_unavailable(exc):
            raise
        log_unexpected(exc, request_id=binding.request_id, route=f"tool {params.name}")
        note_outcome(500, "INTERNAL_ERROR")
        return _failed(f"internal error (request id {binding.request_id}); try again later")
    text = json.dumps(result, ensure_ascii=False)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)], structured_content=result
    )


def _audited_arguments(name: str, arguments: dict[str, Any], bound: Bound) -> dict[str, Any]:
    """What the audit event keeps of a call: the tool, the scope and the entry's key, never the
    text of a memory or a query."""
    kept: dict[str, Any] = {"tool": name[:64], "scope": bound.scope}
    for key in ("path", "path_prefix", "top_k"):
        value = arguments.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool):
            kept[key] = value[:1024] if isinstance(value, str) else value
    return kept


async def _list_prompts(request_context: Any, params: Any) -> types.ListPromptsResult:
    _binding(request_context)
    return types.ListPromptsResult(
        prompts=[
            types.Prompt(
                name=PROMPT,
                title="How to use memory",
                description="The system prompt that teaches a model when to recall, save, update and "
                "delete memories",
            )
        ]
    )


async def _get_prompt(request_context: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    _binding(request_context)
    if params.name != PROMPT:
        raise _invalid_params(f"unknown prompt {params.name[:64]!r}; the prompt is {PROMPT!r}")
    return types.GetPromptResult(
        description="How to use memory",
        messages=[
            types.PromptMessage(role="user", content=types.TextContent(type="text", text=MEMORY_INSTRUCTIONS))
        ],
    )


def build_server() -> Server[Any]:
    return Server(
        "memory-catalog",
        version=__version__,
        title="Memory Catalog: memory tools",
        instructions=MEMORY_INSTRUCTIONS,
        on_list_tools=_list_tools,
        on_call_tool=_call_tool,
        on_list_prompts=_list_prompts,
        on_get_prompt=_get_prompt,
    )


@asynccontextmanager
async def serving(max_body_bytes: int) -> AsyncIterator[StreamableHTTPSessionManager]:
    """The MCP transport for the application's lifetime."""
    manager = StreamableHTTPSessionManager(
        build_server(), json_response=True, stateless=True, max_request_body_size=max_body_bytes
    )
    async with manager.run():
        yield manager
