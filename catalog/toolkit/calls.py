"""Running a model's tool call on the server, as the caller: what responses and memory extraction
do with the tool calls an upstream model makes (the MCP server has its own transport).

Each call is an operation with an audit event of its own (`recorder.operation`), recorded like an
MCP tool call: the tool, the scope and the entry's key in `request_params`, never the text. A call
that fails in a way the model can act on (bad JSON, an unknown tool, a missing memory, a refusal)
answers the model an error message and records the status its REST twin would have answered."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from catalog.context import Context
from catalog.recorder import note_outcome, operation
from catalog.toolkit.tools import BY_NAME, TOOLS, Tool, ToolError, call

MAX_KEPT = 1024  # characters of a path kept in the audit event
KEPT = ("path", "path_prefix", "top_k")  # the memory tools' arguments an audit event keeps


@dataclass(frozen=True)
class Outcome:
    result: dict[str, Any] | None  # the tool's answer, or None when it failed
    error: str | None  # what the model is told went wrong

    @property
    def answer(self) -> str:
        """The text the model reads."""
        if self.error is not None:
            return json.dumps({"error": self.error}, ensure_ascii=False)
        return json.dumps(self.result, ensure_ascii=False)


def function_tools(tools: Iterable[Tool] = TOOLS) -> list[dict[str, Any]]:
    """Tools (the memory tools unless given) as Chat Completions function tools."""
    return [
        {
            "type": "function",
            "function": {"name": tool.name, "description": tool.description, "parameters": tool.input_schema},
        }
        for tool in tools
    ]


async def run_call(
    ctx: Context,
    bound: Any,
    name: str,
    arguments: str,
    audit: dict[str, Any] | None = None,
    *,
    tools: Mapping[str, Tool] = BY_NAME,
    kept: Sequence[str] = KEPT,
) -> Outcome:
    """Run one call of a tool of `tools` bound to `bound` (which has the `scope` it acts in), its
    arguments as the model wrote them (JSON text); the audit event keeps the arguments `kept`."""
    params: dict[str, Any] = {"tool": name[:64], "scope": bound.scope, **(audit or {})}
    async with operation(params):
        try:
            try:
                parsed = json.loads(arguments or "{}")
            except ValueError:
                raise ToolError("the arguments are not valid JSON; send a JSON object") from None
            if not isinstance(parsed, dict):
                raise ToolError("the arguments must be a JSON object")
            for key in kept:
                value = parsed.get(key)
                if isinstance(value, str | int) and not isinstance(value, bool):
                    params[key] = value[:MAX_KEPT] if isinstance(value, str) else value
            result = await call(ctx, bound, name, parsed, tools)
        except ToolError as exc:
            note_outcome(exc.status, exc.error_code)
            return Outcome(None, exc.message)
    return Outcome(result, None)
