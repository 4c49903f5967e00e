"""The model's tool loop, one for every caller that lets an upstream model call tools: responses,
memory extraction and a pipeline's maintenance step.

Rules:
- the model is offered the tools at each step but the last, which must answer (at most `steps`
  calls of the model: `CATALOG_LLM_MAX_STEPS`); a turn without tool calls ends the loop;
- each tool call is run by the caller's `run` (an operation with an audit event of its own:
  `calls.run_call`), in the order the model made them, and its answer goes back to the model as
  the tool's message; a call the model cannot make is an error it reads, never an exception;
- with `stream`, the model's text arrives as `TextDelta`s while it is written;
- the loop yields what happened, in order: text deltas, each `Turn`, and each call with its
  outcome (`Ran`), so that a caller shapes its own answer (a response's items, an extraction's
  report) without a loop of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from catalog.llm import ChatModel, TextDelta, ToolCall, Turn, assistant_message
from catalog.toolkit.calls import Outcome


@dataclass(frozen=True)
class Ran:
    """A tool call the model made, and its outcome."""

    call: ToolCall
    outcome: Outcome


async def converse(
    chat: ChatModel,
    messages: list[dict[str, Any]],
    tools: Sequence[dict[str, Any]],
    run: Callable[[ToolCall], Awaitable[Outcome]],
    steps: int,
    *,
    model: str | None = None,
    stream: bool = False,
    extra: dict[str, Any] | None = None,
) -> AsyncIterator[TextDelta | Turn | Ran]:
    """Converse with the model until it answers without tool calls (or the steps run out);
    `messages` grows with the conversation."""
    options = {"extra": extra} if extra else {}
    for step in range(steps):
        offered = tools if step < steps - 1 else []  # the last call must answer
        turn: Turn | None = None
        if stream:
            async for part in chat.stream(messages, offered, model=model, **options):
                if isinstance(part, TextDelta):
                    yield part
                else:
                    turn = part
        else:
            turn = await chat.complete(messages, offered, model=model, **options)
        assert turn is not None
        yield turn
        calls = list(turn.tool_calls) if offered else []
        if not calls:
            return
        messages.append(assistant_message(turn.text, calls))
        for tool_call in calls:
            outcome = await run(tool_call)
            yield Ran(tool_call, outcome)
            messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": outcome.answer})
