"""From conversation items (OpenAI Responses shapes) to Chat Completions messages, and the memory
tools as Chat Completions function tools.

Rules:
- messages keep their role (`developer` is sent as `system`, which every server knows) and the
  text of their text parts; a function call or a server-run tool call (`mcp_call`) becomes an
  assistant message with a tool call followed by the tool's answer; reasoning items and parts
  that are not text are left out;
- the history is cut to the last `HISTORY_CHARS` characters, oldest first out, never between a
  tool call and its answer (a tool answer without its call is refused by most servers).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from catalog.llm import content_text

HISTORY_CHARS = 48_000


def _error_text(error: Any) -> str:
    """A failed tool call's message (a string, or OpenAI's error objects)."""
    if isinstance(error, dict):
        if isinstance(error.get("message"), str):
            return str(error["message"])
        return content_text(error.get("content")) or json.dumps(error, ensure_ascii=False)
    return str(error)


def _output_text(output: Any) -> str:
    return output if isinstance(output, str) else json.dumps(output, ensure_ascii=False)


def _turns(item: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat messages of one item (none, one, or a tool call and its answer)."""
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        role = "system" if role == "developer" else role
        if role not in ("user", "assistant", "system"):
            return []
        return [{"role": role, "content": content_text(item.get("content"))}]
    if kind in ("function_call", "mcp_call"):
        call_id = str(item.get("call_id") or item.get("id"))
        call = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": str(item.get("name")),
                        "arguments": str(item.get("arguments") or "{}"),
                    },
                }
            ],
        }
        if kind == "function_call":
            return [call]
        error = item.get("error")
        answer = item.get("output") if error is None else json.dumps({"error": _error_text(error)})
        return [call, {"role": "tool", "tool_call_id": call_id, "content": _output_text(answer or "")}]
    if kind == "function_call_output":
        return [
            {
                "role": "tool",
                "tool_call_id": str(item.get("call_id")),
                "content": _output_text(item.get("output")),
            }
        ]
    return []


def _size(message: dict[str, Any]) -> int:
    return len(json.dumps(message, ensure_ascii=False))


def history_messages(
    history: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The chat for the model: the history within the budget, then the new input (whole)."""
    old = [message for item in history for message in _turns(item)]
    fresh = [message for item in new for message in _turns(item)]
    budget = HISTORY_CHARS - sum(_size(m) for m in fresh)
    kept: list[dict[str, Any]] = []
    for message in reversed(old):
        budget -= _size(message)
        if budget < 0:
            break
        kept.append(message)
    kept.reverse()
    # a tool answer whose call was cut off goes too; so does a call whose answers are missing
    answered = {m["tool_call_id"] for m in kept + fresh if m["role"] == "tool"}
    while kept and kept[0]["role"] == "tool":
        kept.pop(0)
    called = {c["id"] for m in kept if m.get("tool_calls") for c in m["tool_calls"]}
    kept = [
        m
        for m in kept
        if not (m["role"] == "tool" and m["tool_call_id"] not in called)
        and not (m.get("tool_calls") and any(c["id"] not in answered for c in m["tool_calls"]))
    ]
    return kept + fresh
