"""Memory extraction: a session's transcript into memory entries of its actor.

Rules:
- the caller needs READ on the session store (`sessions.read`, the transcript) and WRITE on the
  memory store (`memories.extract`); the entries are the session's actor's (its scope), held to
  both stores' scope bindings; the model never chooses a scope;
- the model (`catalog.llm`) reads `EXTRACTION_INSTRUCTIONS` (then the request's `instructions`),
  the transcript (message text, and the tool calls named, within a budget, newest kept), and acts
  through the memory tools bound to the memory store and the actor: list, search and read first,
  then save, update or delete, so an existing topic is updated rather than duplicated. Each tool
  call is authorized and audited as its entry operation; writes carry `origin` the session and
  its items (lineage) and, for new entries, `source_type` `MANAGED_MEMORY_ENTRY_SOURCE_TYPE_DREAMER`;
  their provenance names the channel (`extraction`, `pipeline` for a pipeline's run) and the model,
  and a store's trust policy judges them as a model's;
- `dry_run` runs the same model and tools, which then check what they would write (privileges,
  paths, edits) and write nothing; the answer lists those entries (named `.../dry-run-<n>` when
  new);
- an extraction remembers what it read (`extraction_marks`): extracting an unchanged session into
  the same memory store again calls no model and changes nothing;
- an upstream failure is 502 `BAD_GATEWAY`; what the model already wrote stays (each write is a
  whole, audited change), and the session is not marked, so the next extraction reads it again.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from catalog.access import Securable
from catalog.auth import Principal
from catalog.context import Context
from catalog.dialects.agents.schemas import AgentEntry
from catalog.dialects.agents.service import agent_entry, store_id
from catalog.dialects.extraction import repo
from catalog.dialects.extraction.schemas import ExtractionRequest, ExtractionResult
from catalog.dialects.sessions import service as sessions
from catalog.dialects.sessions.repo import ItemRow, SessionRow
from catalog.entries import operations as ops
from catalog.entries import service as entries
from catalog.entries.service import check_binding, resolve_store
from catalog.errors import NotFound, PermissionDenied
from catalog.llm import ToolCall, Turn, content_text, require
from catalog.toolkit import EXTRACTION_INSTRUCTIONS, Bound, Outcome, Ran, converse, function_tools, run_call

TRANSCRIPT_ITEMS = 1000  # the last items of a session read for one extraction
TRANSCRIPT_CHARS = 60_000  # of which the newest are kept, within this many characters
SOURCE_TYPE = "MANAGED_MEMORY_ENTRY_SOURCE_TYPE_DREAMER"  # the SDK's value for pipeline-written memory
WRITES = frozenset({"save_memory", "update_memory"})


@dataclass
class Extraction:
    """What one extraction did: the entries written (or that would be), by path, in order."""

    written: dict[str, AgentEntry] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    skipped: bool = False  # the session had not changed since the last extraction
    steps: int = 0  # model calls


def memory_store_name(value: str) -> str:
    """`memory-stores/{id}` or `{id}` → the id (400 naming `memory_store` otherwise)."""
    bare = value.removeprefix("memory-stores/")
    return store_id(bare, "memory_store")


def render(items: list[ItemRow]) -> str:
    """The transcript as the model reads it: one block per message (role: text), tool calls named,
    newest kept within `TRANSCRIPT_CHARS`."""
    blocks: list[str] = []
    for item in items:
        try:
            data = json.loads(item.data)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        kind = data.get("type", "message")
        if kind == "message" and isinstance(data.get("role"), str):
            text = content_text(data.get("content"))
            if text.strip():
                blocks.append(f"{data['role']}: {text.strip()}")
        elif kind == "function_call" and isinstance(data.get("name"), str):
            blocks.append(f"(tool call {data['name']}({str(data.get('arguments', ''))[:500]}))")
    kept: list[str] = []
    size = 0
    for block in reversed(blocks):
        size += len(block) + 2
        if size > TRANSCRIPT_CHARS:
            break
        kept.append(block)
    return "\n\n".join(reversed(kept))


def digest(items: list[ItemRow]) -> str:
    return hashlib.sha256("\n".join(item.item_id for item in items).encode()).hexdigest()


async def extract(
    ctx: Context, principal: Principal, session_store: str, sid: str, body: ExtractionRequest
) -> ExtractionResult:
    memory_sid = memory_store_name(body.memory_store)
    full_name = f"{ctx.settings.agents_schema}.{memory_sid}"
    # the memory store first: the request's audit event is the extraction, on the memory store
    target = await resolve_store(ctx, principal, full_name, "memories.extract", field="memory_store")
    session_row, store = await sessions.open_session(ctx, principal, session_store, sid, "sessions.read")
    done = await run(
        ctx, principal, session_row, target, memory_sid, body.instructions, body.dry_run, session_store=store
    )
    return ExtractionResult(name=f"extractions/{uuid.uuid4().hex}", entries=list(done.written.values()))


async def run(
    ctx: Context,
    principal: Principal,
    session_row: SessionRow,
    target: Securable,
    memory_sid: str,
    instructions: str | None,
    dry_run: bool,
    *,
    session_store: Securable | None = None,
    model: str | None = None,
    via: ops.Via = "extraction",
) -> Extraction:
    """Extract one session (already authorized for reading) into one memory store (already
    authorized for `memories.extract`); the entries written carry `origin` the session's items
    when its store is given, and their provenance the channel (`via`: `extraction`, or `pipeline`
    for a pipeline's run) and the model. `model` is the model asked for (a pipeline's;
    CATALOG_LLM_MODEL, when set, takes precedence)."""
    actor = session_row.actor_id
    full_name = target.full_name
    await check_binding(ctx, principal, target, [actor])
    chat = require(ctx.llm)
    chosen = chat.model_for(model)  # 501 when no model is configured (nor named by the caller)
    items = await sessions.transcript(ctx, session_row, TRANSCRIPT_ITEMS)
    items_digest = digest(items)
    outcome = Extraction()
    if not dry_run and items_digest == await repo.mark(
        ctx.pool, session_row.store_id, session_row.id, target.node.id
    ):
        outcome.skipped = True
        return outcome
    transcript = render(items)
    if transcript:
        origin = None
        if session_store is not None:
            origin = ops.TranscriptSource(
                kind="session",
                store=session_store.full_name,
                store_id=session_store.node.id,
                scope=actor,
                thread_id=session_row.session_id,
                item_ids=tuple(item.item_id for item in items),
            )
        bound = Bound(
            principal=principal,
            store=full_name,
            scope=actor,
            dry_run=dry_run,
            source_type=SOURCE_TYPE,
            origin=origin,
            channel=ops.Channel(via=via, model=chosen),
        )
        await _converse(
            ctx, bound, memory_sid, session_row.session_id, transcript, instructions, outcome, requested=model
        )
    if not dry_run:
        await repo.set_mark(
            ctx.pool, session_row.store_id, session_row.id, target.node.id, items_digest, principal.name
        )
        await _current(ctx, principal, full_name, memory_sid, actor, outcome)
    return outcome


async def _converse(
    ctx: Context,
    bound: Bound,
    memory_sid: str,
    session_id: str,
    transcript: str,
    instructions: str | None,
    outcome: Extraction,
    *,
    requested: str | None = None,
) -> None:
    model = require(ctx.llm)
    system = EXTRACTION_INSTRUCTIONS + (f"\n\n{instructions}" if instructions else "")
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Transcript of session {session_id}:\n\n{transcript}"},
    ]

    async def run(tool_call: ToolCall) -> Outcome:
        return await run_call(ctx, bound, tool_call.name, tool_call.arguments, {"session_id": session_id})

    steps = ctx.settings.llm_max_steps
    async for event in converse(model, messages, function_tools(), run, steps, model=requested):
        if isinstance(event, Turn):
            outcome.steps += 1
        elif isinstance(event, Ran) and event.outcome.result is not None:
            _note(outcome, memory_sid, bound.scope, event.call, event.outcome.result)


def _note(
    outcome: Extraction, memory_sid: str, actor: str, tool_call: ToolCall, result: dict[str, Any]
) -> None:
    """What a tool call wrote or deleted, in the extraction's report."""
    # a caller who may write but not read is answered the path alone
    memory = result.get("memory") or (
        {"path": result["path"]} if isinstance(result.get("path"), str) else None
    )
    if tool_call.name in WRITES and isinstance(memory, dict):
        path = str(memory["path"])
        outcome.written[path] = _dry_entry(memory_sid, actor, memory, len(outcome.written))
        if path in outcome.deleted:
            outcome.deleted.remove(path)
    elif tool_call.name == "delete_memory":
        # by path, or by query: the paths it deleted (or would, in a dry run)
        deleted = result.get("deleted")
        paths = (
            [str(p) for p in deleted]
            if isinstance(deleted, list)
            else [str(json.loads(tool_call.arguments).get("path", ""))]
        )
        for path in paths:
            outcome.written.pop(path, None)
            outcome.deleted.append(path)


def _dry_entry(memory_sid: str, actor: str, memory: dict[str, Any], n: int) -> AgentEntry:
    """An entry as the tool answered it (replaced by the stored one unless in a dry run)."""
    return AgentEntry(
        name=f"memory-stores/{memory_sid}/entries/dry-run-{n}",
        actor_id=actor,
        path=str(memory["path"]),
        content=memory.get("contents"),
        description=memory.get("description"),
        source_type=SOURCE_TYPE,
    )


async def _current(
    ctx: Context, principal: Principal, full_name: str, memory_sid: str, actor: str, outcome: Extraction
) -> None:
    """Replace each written entry by what is stored now (with its id and times)."""
    for path in list(outcome.written):
        try:
            row = await entries.get(
                ctx, principal, ops.Get(store=full_name, target=ops.ByKey(scope=actor, path=path))
            )
        except NotFound:  # deleted again meanwhile
            outcome.written.pop(path)
            continue
        except PermissionDenied:  # may write but not read: the tool's answer is all there is
            continue
        outcome.written[path] = agent_entry(memory_sid, row)
