"""Wire types of `POST /responses` (OpenAI's Responses API, the subset an agent uses). The body
accepts the fields OpenAI's clients send (the `openai` client, the OpenAI Agents SDK); the ones
that change nothing here are listed as accepted and ignored, anything else is refused."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from catalog.dialects.conversations.schemas import MAX_ID, MAX_ITEMS_PER_REQUEST
from catalog.wire import Input
from catalog.wire.inputs import NO_NUL

MAX_INPUT_CHARS = 256 * 1024  # a string input
MAX_INSTRUCTIONS = 32 * 1024
MAX_MODEL = 256

ConversationId = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID, pattern=NO_NUL)]


class ConversationRef(Input):
    id: ConversationId


class ResponseCreate(Input, kw_only=True):
    model: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_MODEL, pattern=NO_NUL)]
    input: (
        Annotated[str, msgspec.Meta(pattern=NO_NUL, extra_json_schema={"maxLength": MAX_INPUT_CHARS})]
        | Annotated[
            list[dict[str, Any]],
            msgspec.Meta(
                max_length=MAX_ITEMS_PER_REQUEST,
                description=f"input items (as for conversation items), at most {MAX_ITEMS_PER_REQUEST}",
            ),
        ]
    )
    conversation: ConversationId | ConversationRef | None = None
    instructions: Annotated[str, msgspec.Meta(max_length=MAX_INSTRUCTIONS, pattern=NO_NUL)] | None = None
    stream: bool = False
    tool_choice: Literal["auto", "none"] | dict[str, Any] | None = None  # "none": no memory tools
    tools: list[dict[str, Any]] | None = None  # client tools: only an empty list is accepted
    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] | None = None
    top_p: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    max_output_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    # accepted for compatibility with OpenAI's clients, and ignored
    include: list[str] | None = None
    metadata: dict[str, str] | None = None
    store: bool | None = None
    parallel_tool_calls: bool | None = None
    text: dict[str, Any] | None = None
    truncation: str | None = None
    user: str | None = None
    previous_response_id: str | None = None  # refused when given: the conversation holds the history
