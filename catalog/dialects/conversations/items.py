"""Conversation items: OpenAI item shapes, checked and kept as sent.

Rules:
- an item's `type` is one of `ITEM_TYPES` (a message may leave it out, as OpenAI's "easy" input
  message does); its required fields are present with the right JSON types, and for the types
  whose fields OpenAI fixes, an unknown top-level field is refused (400 naming `items[i].field`);
- the item is stored as sent, with three completions OpenAI makes too: `type: "message"` when
  left out, an `id` (`msg_...`, `fc_...`, ...) when none is sent, `status: "completed"` when none
  is sent; a message whose `content` is a string becomes one text part (`input_text`, or
  `output_text` for the assistant), the shape OpenAI answers;
- one item is at most `MAX_ITEM_CHARS` characters as JSON (413 naming `items[i]`);
- the text parts of a message, joined by newlines, are returned beside the item for the `text`
  column (what transcript search indexes: `catalog.dialects.transcripts`, migration 0015).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from catalog.dialects.conversations.schemas import MAX_ID, MAX_ITEM_CHARS
from catalog.errors import InvalidParameter, PayloadTooLarge

_ID = re.compile(r"[A-Za-z0-9_-]+")
STATUSES = ("in_progress", "completed", "incomplete")
ROLES = ("user", "assistant", "system", "developer")
TEXT_PARTS = ("input_text", "output_text", "text")
PART_TYPES = (
    *TEXT_PARTS,
    "refusal",
    "input_image",
    "input_file",
    "summary_text",
    "reasoning_text",
)

# type → (id prefix, required fields with their JSON types, the allowed top-level fields or None
# for "as sent")
_SPECS: dict[str, tuple[str, dict[str, tuple[type, ...]], frozenset[str] | None]] = {
    "message": (
        "msg",
        {"role": (str,), "content": (str, list)},
        frozenset({"type", "id", "role", "content", "status", "phase"}),
    ),
    "function_call": (
        "fc",
        {"call_id": (str,), "name": (str,), "arguments": (str,)},
        frozenset({"type", "id", "call_id", "name", "arguments", "status", "namespace"}),
    ),
    "function_call_output": (
        "fco",
        {"call_id": (str,), "output": (str, list)},
        frozenset({"type", "id", "call_id", "output", "status"}),
    ),
    "custom_tool_call": (
        "ctc",
        {"call_id": (str,), "name": (str,), "input": (str,)},
        frozenset({"type", "id", "call_id", "name", "input", "status", "namespace"}),
    ),
    "custom_tool_call_output": (
        "ctco",
        {"call_id": (str,), "output": (str, list)},
        frozenset({"type", "id", "call_id", "output", "status"}),
    ),
    # a tool call the server ran itself (a response's memory tools; OpenAI's hosted MCP calls)
    "mcp_call": (
        "mcp",
        {"name": (str,), "arguments": (str,), "server_label": (str,)},
        frozenset(
            {
                "type",
                "id",
                "name",
                "arguments",
                "server_label",
                "output",
                "error",
                "status",
                "approval_request_id",
            }
        ),
    ),
    "reasoning": ("rs", {"summary": (list,)}, None),
}
ITEM_TYPES = tuple(_SPECS)

_JSON_TYPE: dict[type, str] = {str: "a string", list: "an array", dict: "an object"}


@dataclass(frozen=True)
class Item:
    id: str
    type: str
    item: dict[str, Any]  # as stored and answered
    text: str | None  # a message's text parts, else None


def new_conversation_id() -> str:
    return f"conv_{secrets.token_hex(16)}"


def _expect(value: Any, kinds: tuple[type, ...], field: str) -> None:
    if not isinstance(value, kinds):
        names = " or ".join(_JSON_TYPE[k] for k in kinds)
        raise InvalidParameter(f"{field} must be {names}", field)


def _parts(content: list[Any], field: str) -> list[str]:
    """Check a content list's parts; the texts of its text parts."""
    texts = []
    for j, part in enumerate(content):
        where = f"{field}[{j}]"
        _expect(part, (dict,), where)
        kind = part.get("type")
        if kind not in PART_TYPES:
            raise InvalidParameter(f"{where}.type must be one of {', '.join(PART_TYPES)}", f"{where}.type")
        if kind in TEXT_PARTS or kind in ("refusal", "summary_text", "reasoning_text"):
            key = "refusal" if kind == "refusal" else "text"
            _expect(part.get(key), (str,), f"{where}.{key}")
            if kind in TEXT_PARTS:
                texts.append(part[key])
    return texts


def check_item(raw: dict[str, Any], i: int, name: str = "items") -> Item:
    """One item of a request, checked and completed (see the module's rules); errors name it
    `<name>[i]`."""
    field = f"{name}[{i}]"
    item = dict(raw)
    kind = item.setdefault("type", "message") if "role" in item else item.get("type")
    if not isinstance(kind, str) or kind not in _SPECS:
        raise InvalidParameter(f"{field}.type must be one of {', '.join(ITEM_TYPES)}", f"{field}.type")
    prefix, required, allowed = _SPECS[kind]
    if allowed is not None:
        unknown = sorted(set(item) - allowed)
        if unknown:
            raise InvalidParameter(
                f"{field}.{unknown[0]} is not a field of a {kind} item", f"{field}.{unknown[0]}"
            )
    for name, kinds in required.items():
        if name not in item:
            raise InvalidParameter(f"{field}.{name} is required for a {kind} item", f"{field}.{name}")
        _expect(item[name], kinds, f"{field}.{name}")
    if "id" in item:
        item_id = item["id"]
        if not isinstance(item_id, str) or not 1 <= len(item_id) <= MAX_ID or not _ID.fullmatch(item_id):
            raise InvalidParameter(
                f"{field}.id must be 1-{MAX_ID} letters, digits, '_' or '-'", f"{field}.id"
            )
    else:
        item["id"] = f"{prefix}_{secrets.token_hex(16)}"
    status = item.setdefault("status", "completed")
    statuses = (*STATUSES, "calling", "failed") if kind == "mcp_call" else STATUSES
    if status not in statuses:
        raise InvalidParameter(f"{field}.status must be one of {', '.join(statuses)}", f"{field}.status")
    text = None
    if kind == "message":
        text = _message_text(item, field)
    size = len(msgspec.json.encode(item).decode())
    if size > MAX_ITEM_CHARS:
        raise PayloadTooLarge(f"{field} must be at most {MAX_ITEM_CHARS} characters as JSON", field)
    return Item(id=item["id"], type=kind, item=item, text=text)


def _message_text(item: dict[str, Any], field: str) -> str:
    role = item["role"]
    if role not in ROLES:
        raise InvalidParameter(f"{field}.role must be one of {', '.join(ROLES)}", f"{field}.role")
    content = item["content"]
    if isinstance(content, str):
        part: dict[str, Any] = {
            "type": "output_text" if role == "assistant" else "input_text",
            "text": content,
        }
        if role == "assistant":
            part["annotations"] = []
        item["content"] = [part]
        return content
    return "\n".join(_parts(content, f"{field}.content"))


def check_items(raw: Sequence[dict[str, Any]], name: str = "items") -> list[Item]:
    """A request's items, checked; two items of one request may not share an id."""
    items = [check_item(one, i, name) for i, one in enumerate(raw)]
    seen: set[str] = set()
    for i, item in enumerate(items):
        if item.id in seen:
            raise InvalidParameter(f"{name}[{i}].id {item.id} is given twice", f"{name}[{i}].id")
        seen.add(item.id)
    return items
