"""Memory pipelines: a session store distilled into a memory store by runs of memory extraction.

Rules:
- a pipeline names one session store and one memory store of the agent dialect; there is one per
  pair (409 ALREADY_EXISTS); it goes with either store. Its id is the server's (a UUID); its
  `creator` owns it, and its runs act as the creator: every session read, every entry written is
  authorized and audited as that principal (see `catalog.dialects.pipelines.worker`);
- a pipeline belongs to its memory store: reading it (and its runs) needs READ_MEMORY_STORE there
  (`pipelines.read`; a list shows only those); a reader whose READ is limited to some scopes reads
  each run's maintenance report held to those scopes (the actions in other scopes left out, the
  counts those of the actions shown, an error shown only when it names one of its scopes). An
  id that names no pipeline is 404 whoever asks (ids are random UUIDs: a 404 tells nothing about
  anybody's pipelines);
- a run acts as the creator over every scope of both stores: it reads every session, reads the
  memories of each session's actor and writes them. So nobody makes a pipeline do what they could
  not do themselves: creating one, changing what it does (`dreamer_policy`: model, instructions,
  trigger, maintenance) and starting a run each need every step of a run (`RUN_STEPS`: WRITE and
  READ on the memory store, READ on the session store, none of them through a grant limited to
  scopes); changing what another principal's pipeline does needs MANAGE on both its stores too
  (`pipelines.configure`). Who last changed it is kept (`configured_by`); every run checks, before
  it starts and before each session and its maintenance step, that its creator, the principal
  who started it and the one who last changed it may still do every step, and fails naming who
  may not; every event of a run names the three. Renaming or deleting a pipeline needs
  `pipelines.manage` (WRITE on the memory store in every scope);
- `dreamer_policy.trigger` is MANUAL_ONLY (runs only when asked for; TRIGGER_UNSPECIFIED means
  it) or SCHEDULED (also a run about every `CATALOG_PIPELINE_INTERVAL` seconds); `enabled` says
  whether scheduled runs are on (the trigger is SCHEDULED). `model` names the model asked for
  (empty: the server's); `etag` changes with every update, and an update that sends a stale one
  is 409 ABORTED;
- a run is asked for with `POST .../run` and done by a worker (PENDING → RUNNING → SUCCEEDED or
  FAILED); while a run of the pipeline is PENDING or RUNNING another is 409 ABORTED naming it
  (`memory-pipelines/{id}/runs/{n}`), whichever server process is asked.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import msgspec

from catalog.access import Node, Securable, SecurableType
from catalog.access.seam import Refusal
from catalog.auth import Principal
from catalog.context import Context
from catalog.dialects.extraction.service import memory_store_name
from catalog.dialects.pipelines import maintenance, repo
from catalog.dialects.pipelines.registry import STEPS
from catalog.dialects.pipelines.repo import PipelineRow, RunRow
from catalog.dialects.pipelines.schemas import (
    PIPELINE_ID_PATTERN,
    RUN_ID_PATTERN,
    UPDATE_FIELDS,
    UPDATE_MASK_PATTERN,
    DreamerPolicy,
    DreamerPolicyInput,
    Maintenance,
    MemoryPipeline,
    MemoryPipelineList,
    PipelineCreate,
    PipelineRun,
    PipelineRunList,
    PipelineUpdate,
    RunRequest,
)
from catalog.dialects.sessions.service import store_name
from catalog.entries.service import resolve_store
from catalog.errors import Aborted, InvalidParameter, NotFound
from catalog.llm import require
from catalog.recorder import audited
from catalog.wire import rfc3339
from catalog.wire.pagination import Pages, collect_page
from catalog.wire.pagination import page_size as page_size_of

MAX_PAGE = 100
_PIPELINE_ID = re.compile(PIPELINE_ID_PATTERN)
_RUN_ID = re.compile(RUN_ID_PATTERN)
_UPDATE_MASK = re.compile(UPDATE_MASK_PATTERN)
_POLICY_FIELDS = ("model", "instructions", "trigger", "maintain")
MAINTAIN = maintenance.STEP.name  # the wire's `maintain` and `maintenance` are this step's

# Whom to tell that a run was created, per pool (the workers of this process on that database):
# the worker starts it at once rather than at its next poll. Other processes find it by polling.
_new_run_listeners: dict[int, list[Callable[[], None]]] = {}


def listen_for_new_runs(ctx: Context, callback: Callable[[], None]) -> Callable[[], None]:
    """Call `callback` whenever this process creates a run on `ctx`'s database; answers how to stop."""
    callbacks = _new_run_listeners.setdefault(id(ctx.pool), [])
    callbacks.append(callback)

    def stop() -> None:
        callbacks.remove(callback)
        if not callbacks:
            _new_run_listeners.pop(id(ctx.pool), None)

    return stop


def _new_run(ctx: Context) -> None:
    for callback in list(_new_run_listeners.get(id(ctx.pool), ())):
        callback()


# --- names and answers ------------------------------------------------------------------------------


def pipeline_name(pipeline_id: str) -> str:
    return f"memory-pipelines/{pipeline_id}"


def run_name(pipeline_id: str, number: int) -> str:
    return f"memory-pipelines/{pipeline_id}/runs/{number}"


def _pipeline_id(value: str) -> str:
    """A pipeline id; a malformed one names no pipeline (404, like a missing one)."""
    if not _PIPELINE_ID.fullmatch(value):
        raise NotFound(f"memory pipeline {value[:80]} does not exist")
    return value


def _run_number(pipeline_id: str, value: str) -> int:
    if not _RUN_ID.fullmatch(value):
        raise NotFound(f"run {value[:80]} of memory pipeline {pipeline_id} does not exist")
    return int(value)


def _steps(named: tuple[str, ...], maintain: bool | None) -> list[str]:
    """The steps named, in the registry's order, with the maintenance step added or taken away
    (`maintain`; None: as named)."""
    wanted = set(named) if maintain is None else {*named, MAINTAIN} if maintain else set(named) - {MAINTAIN}
    return [name for name in STEPS if name in wanted]


def trigger_value(value: str | None) -> str:
    """The trigger kept: TRIGGER_UNSPECIFIED (and none) is MANUAL_ONLY."""
    return "SCHEDULED" if value == "SCHEDULED" else "MANUAL_ONLY"


def to_pipeline(row: PipelineRow) -> MemoryPipeline:
    return MemoryPipeline(
        name=pipeline_name(row.id),
        display_name=row.display_name,
        session_store=f"session-stores/{row.session_store}",
        memory_store=f"memory-stores/{row.memory_store}",
        dreamer_policy=DreamerPolicy(
            model=row.model,
            instructions=row.instructions,
            trigger="SCHEDULED" if row.trigger == "SCHEDULED" else "MANUAL_ONLY",
            enabled=row.trigger == "SCHEDULED",
            maintain=MAINTAIN in row.steps,
        ),
        etag=str(row.version),
        creator=row.creator,
        configured_by=row.configured_by,
        create_time=rfc3339(row.created_at),
        update_time=rfc3339(row.updated_at),
    )


def to_run(row: RunRow, shown: Callable[[str], bool] | None = None) -> PipelineRun:
    """The run as answered; with `shown`, to a reader of only the scopes it admits (the
    maintenance report held to them, no failure text: it may name other scopes)."""
    error = row.error if row.state == "FAILED" else None
    if error is not None and shown is not None:
        error = "the run failed; its reason names scopes beyond the reader's"
    return PipelineRun(
        name=run_name(row.pipeline, row.run_number),
        state=row.state,  # type: ignore[arg-type]  # the table's CHECK holds it to the four states
        trigger="SCHEDULED" if row.trigger == "SCHEDULED" else "MANUAL",
        requested_by=None if row.trigger == "SCHEDULED" else row.requested_by,
        error=error,
        create_time=rfc3339(row.created_at),
        start_time=rfc3339(row.started_at) if row.started_at is not None else None,
        end_time=rfc3339(row.ended_at) if row.ended_at is not None else None,
        sessions_total=row.sessions_total,
        sessions_extracted=row.sessions_extracted,
        sessions_skipped=row.sessions_skipped,
        sessions_failed=row.sessions_failed,
        entries_written=row.entries_written,
        maintain=MAINTAIN in row.steps,
        maintenance=_report(row.reports[MAINTAIN], shown) if MAINTAIN in row.reports else None,
    )


def _report(kept: dict[str, Any], shown: Callable[[str], bool] | None) -> Maintenance:
    """A run's maintenance report; with `shown`, held to the scopes it admits: the actions in
    other scopes left out, the counts recomputed from those shown, no failure named."""
    report = msgspec.convert(kept, Maintenance)
    if shown is None:
        return report
    actions = [a for a in report.actions if shown(a.scope)]
    return Maintenance(
        dry_run=report.dry_run,
        held=report.held,
        scopes_reviewed=len({a.scope for a in actions}),
        merged=sum(len([s for s in a.sources if s != a.into]) for a in actions if a.action == "merged"),
        split=sum(1 for a in actions if a.action == "split"),
        superseded=sum(1 for a in actions if a.action == "superseded"),
        actions=actions,
        partial=True,
    )


# --- the stores a pipeline names -------------------------------------------------------------------


async def _memory_store(ctx: Context, principal: Principal, full_name: str, action_name: str) -> Securable:
    return await resolve_store(ctx, principal, full_name, action_name, field="memory_store")


async def _session_store(
    ctx: Context, principal: Principal, full_name: str, action_name: str = "pipelines.read_sessions"
) -> Securable:
    return await ctx.access.resolve(
        principal, action_name, SecurableType.MEMORY_STORE, full_name.split("."), store_kind="session"
    )


# every step of a run, and the store it is done on: whoever creates a pipeline, changes what it does
# or starts it must be allowed each (none of them through a grant limited to scopes)
RUN_STEPS = (
    ("pipelines.run", "memory"),
    ("pipelines.read_memories", "memory"),
    ("pipelines.read_sessions", "session"),
)


async def _every_step(ctx: Context, principal: Principal, target: Securable, source: Securable) -> None:
    """403, recorded, unless `principal` may do every step of a run (`RUN_STEPS`, written out: the
    API reference reads the actions a route checks from the names in its calls)."""
    await ctx.access.ensure(principal, "pipelines.run", target)
    await ctx.access.ensure(principal, "pipelines.read_memories", target)
    await ctx.access.ensure(principal, "pipelines.read_sessions", source)


async def refusal(ctx: Context, row: PipelineRow, principals: list[str]) -> Refusal | None:
    """Why a run of the pipeline may not go on (the first of `principals` that may not do every
    step of it, and what it lacks), or None; records nothing (a run's check)."""
    target = await ctx.access.locate(SecurableType.MEMORY_STORE, row.memory_store_full_name.split("."))
    source = await ctx.access.locate(
        SecurableType.MEMORY_STORE, row.session_store_full_name.split("."), "session"
    )
    if not target.exists or not source.exists:
        return Refusal("a store of the pipeline no longer exists")
    for name in principals:
        for action_name, store in RUN_STEPS:
            refused = await ctx.access.refusal(
                Principal(name), action_name, target if store == "memory" else source
            )
            if refused is not None:
                return refused
    return None


def run_principals(row: PipelineRow, requested_by: str | None) -> list[str]:
    """Whom a run answers to: its pipeline's creator, who last changed what it does, and who
    started it (none for a scheduled run: `requested_by` None)."""
    return list(dict.fromkeys(p for p in (row.creator, row.configured_by, requested_by) if p is not None))


async def _load(ctx: Context, pipeline_id: str) -> PipelineRow:
    row = await repo.get_pipeline(ctx.pool, _pipeline_id(pipeline_id))
    if row is None:
        raise NotFound(f"memory pipeline {pipeline_id} does not exist")
    return row


async def _reload(ctx: Context, pipeline_id: str) -> MemoryPipeline:
    return to_pipeline(await _load(ctx, pipeline_id))


def _memory_securable(ctx: Context, row: PipelineRow) -> Securable:
    """The pipeline's memory store as a securable, from the list's own row (no further query)."""
    catalog_name, schema_name, _ = row.memory_store_full_name.split(".")
    (c_id, c_owner), (s_id, s_owner), (m_id, m_owner) = row.chain
    return Securable(
        SecurableType.MEMORY_STORE,
        row.memory_store_full_name,
        (
            ctx.metastore,
            Node(SecurableType.CATALOG, catalog_name, c_id, c_owner),
            Node(SecurableType.SCHEMA, f"{catalog_name}.{schema_name}", s_id, s_owner),
            Node(SecurableType.MEMORY_STORE, row.memory_store_full_name, m_id, m_owner),
        ),
    )


# --- pipelines --------------------------------------------------------------------------------------


async def create(ctx: Context, principal: Principal, body: PipelineCreate) -> MemoryPipeline:
    memory_sid = memory_store_name(body.memory_store)
    session_name = store_name(body.session_store.removeprefix("session-stores/"), "session_store")
    policy = body.dreamer_policy or DreamerPolicyInput()
    # the memory store first: the request's audit event is the creation, on the memory store
    target = await _memory_store(
        ctx, principal, f"{ctx.settings.agents_schema}.{memory_sid}", "pipelines.create"
    )
    source = await ctx.access.resolve(
        principal,
        "pipelines.read_sessions",
        SecurableType.MEMORY_STORE,
        [*ctx.settings.agents_schema.split("."), session_name],
        store_kind="session",
    )
    await _every_step(ctx, principal, target, source)
    async with audited(ctx.pool) as conn:
        pipeline_id = await repo.insert_pipeline(
            conn,
            session_store_id=source.node.id,
            memory_store_id=target.node.id,
            display_name=body.display_name,
            model=policy.model or None,
            instructions=policy.instructions,
            trigger=trigger_value(policy.trigger),
            creator=principal.name,
            steps=[MAINTAIN] if policy.maintain else [],
        )
    return await _reload(ctx, pipeline_id)


async def get(ctx: Context, principal: Principal, pipeline_id: str) -> MemoryPipeline:
    row = await _load(ctx, pipeline_id)
    await _memory_store(ctx, principal, row.memory_store_full_name, "pipelines.read")
    return to_pipeline(row)


async def list_pipelines(
    ctx: Context, principal: Principal, page_size: int | None, page_token: str | None
) -> MemoryPipelineList:
    size = page_size_of(page_size, default=MAX_PAGE, cap=MAX_PAGE, field="page_size")
    await ctx.access.resolve(principal, "pipelines.list", SecurableType.METASTORE)
    pages = Pages(ctx.pool, "memory_pipelines")
    after = await pages.after(page_token, tuple[int, str])
    rows, token = await collect_page(
        lambda cursor, limit: repo.list_pipelines(ctx.pool, after=cursor, limit=limit),
        lambda row: (row.created_us, row.id),
        lambda row: ctx.access.visible(principal, "pipelines.read", _memory_securable(ctx, row)),
        pages=pages,
        after=after,
        size=size,
    )
    return MemoryPipelineList(memory_pipelines=[to_pipeline(row) for row in rows], next_page_token=token)


def _update_fields(update_mask: str | None, body: PipelineUpdate) -> set[str]:
    """The fields an update sets: those the mask names (`dreamer_policy` is its three fields), or
    without a mask those the body holds."""
    if update_mask is not None and update_mask.strip():
        if not _UPDATE_MASK.fullmatch(update_mask):
            raise InvalidParameter(
                f"update_mask must be a comma-separated list of {', '.join(UPDATE_FIELDS)}", "update_mask"
            )
        named = {f.strip() for f in update_mask.split(",") if f.strip()}
    else:
        named = {"display_name"} if body.display_name is not None else set()
        if body.dreamer_policy is not None:
            named |= {
                f"dreamer_policy.{key}"
                for key in _POLICY_FIELDS
                if getattr(body.dreamer_policy, key) is not None
            }
    if "dreamer_policy" in named:
        named = (named - {"dreamer_policy"}) | {f"dreamer_policy.{key}" for key in _POLICY_FIELDS}
    if not named:
        raise InvalidParameter(
            f"update_mask must name the fields to change: {', '.join(UPDATE_FIELDS)}", "update_mask"
        )
    return named


async def update(
    ctx: Context, principal: Principal, pipeline_id: str, update_mask: str | None, body: PipelineUpdate
) -> MemoryPipeline:
    row = await _load(ctx, pipeline_id)
    if body.name is not None and body.name.removeprefix("memory-pipelines/") != row.id:
        raise InvalidParameter(f"name must be {pipeline_name(row.id)} (the pipeline of the path)", "name")
    fields = _update_fields(update_mask, body)
    expected = None
    if body.etag is not None:
        expected = int(body.etag) if body.etag.isdigit() and len(body.etag) < 19 else -1
    policy = body.dreamer_policy or DreamerPolicyInput()
    configures = bool(fields - {"display_name"})  # what the pipeline does, not only its name
    if not configures:
        await _memory_store(ctx, principal, row.memory_store_full_name, "pipelines.manage")
    else:
        if principal.name != row.creator:
            target = await _memory_store(ctx, principal, row.memory_store_full_name, "pipelines.configure")
            source = await _session_store(ctx, principal, row.session_store_full_name, "pipelines.configure")
        else:
            target = await _memory_store(ctx, principal, row.memory_store_full_name, "pipelines.run")
            source = await _session_store(ctx, principal, row.session_store_full_name)
        await _every_step(ctx, principal, target, source)
        if "display_name" in fields:
            await ctx.access.ensure(principal, "pipelines.manage", target)
    async with audited(ctx.pool) as conn:
        version = await repo.update_pipeline(
            conn,
            row.id,
            display_name=(body.display_name,) if "display_name" in fields else None,
            # an empty model clears the override
            model=(policy.model or None,) if "dreamer_policy.model" in fields else None,
            instructions=(policy.instructions,) if "dreamer_policy.instructions" in fields else None,
            trigger=trigger_value(policy.trigger) if "dreamer_policy.trigger" in fields else None,
            expected_version=expected,
            steps=_steps(row.steps, bool(policy.maintain)) if "dreamer_policy.maintain" in fields else None,
            configured_by=principal.name if configures else None,
        )
        if version is None:
            if expected is not None and await repo.get_pipeline(conn, row.id) is not None:
                raise Aborted(
                    f"etag {body.etag} is not the pipeline's current one: read it again and retry the update"
                )
            raise NotFound(f"memory pipeline {pipeline_id} does not exist")
    return await _reload(ctx, row.id)


async def delete(ctx: Context, principal: Principal, pipeline_id: str) -> None:
    """Deletes the pipeline with its runs; a run in progress stops at its next step (its worker
    finds it gone)."""
    row = await _load(ctx, pipeline_id)
    await _memory_store(ctx, principal, row.memory_store_full_name, "pipelines.manage")
    async with audited(ctx.pool) as conn:
        if not await repo.delete_pipeline(conn, row.id):
            raise NotFound(f"memory pipeline {pipeline_id} does not exist")


# --- runs -------------------------------------------------------------------------------------------


def _active(pipeline_id: str, number: int) -> Aborted:
    name = run_name(pipeline_id, number)
    return Aborted(f"memory pipeline {pipeline_name(pipeline_id)} has a run in progress: {name}")


async def run(
    ctx: Context, principal: Principal, pipeline_id: str, body: RunRequest | None = None
) -> PipelineRun:
    row = await _load(ctx, pipeline_id)
    target = await _memory_store(ctx, principal, row.memory_store_full_name, "pipelines.run")
    source = await _session_store(ctx, principal, row.session_store_full_name)
    await _every_step(ctx, principal, target, source)
    require(ctx.llm)  # 501 when no upstream model is configured: no run could do anything
    asked = body or RunRequest()
    steps = None  # as the pipeline says when the run is created
    if asked.maintain is not None or asked.dry_run:
        names = _steps(row.steps, asked.maintain)
        if asked.dry_run and MAINTAIN not in names:
            raise InvalidParameter("dry_run is the maintenance step's: give maintain: true too", "dry_run")
        steps = {name: {"dry_run": True} if name == MAINTAIN and asked.dry_run else {} for name in names}
    async with audited(ctx.pool) as conn:
        created = await repo.insert_run(conn, row.id, "MANUAL", principal.name, steps=steps)
        if created is None:
            raise NotFound(f"memory pipeline {pipeline_id} does not exist")
        if isinstance(created, int):
            raise _active(row.id, created)
    _new_run(ctx)
    return to_run(created)


async def get_run(ctx: Context, principal: Principal, pipeline_id: str, run_id: str) -> PipelineRun:
    row = await _load(ctx, pipeline_id)
    number = _run_number(row.id, run_id)
    target = await _memory_store(ctx, principal, row.memory_store_full_name, "pipelines.read")
    found = await repo.get_run(ctx.pool, row.id, number)
    if found is None:
        raise NotFound(f"{run_name(row.id, number)} does not exist")
    return to_run(found, _scopes_shown(ctx, principal, target))


async def list_runs(
    ctx: Context, principal: Principal, pipeline_id: str, page_size: int | None, page_token: str | None
) -> PipelineRunList:
    """Newest first."""
    size = page_size_of(page_size, default=MAX_PAGE, cap=MAX_PAGE, field="page_size")
    row = await _load(ctx, pipeline_id)
    target = await _memory_store(ctx, principal, row.memory_store_full_name, "pipelines.read")
    shown = _scopes_shown(ctx, principal, target)
    pages = Pages(ctx.pool, "pipeline_runs", pipeline=row.id)
    before = await pages.after(page_token, int)
    rows = await repo.list_runs(ctx.pool, row.id, before=before, limit=size + 1)
    token = await pages.token(rows[size - 1].run_number) if len(rows) > size else None
    return PipelineRunList(pipeline_runs=[to_run(r, shown) for r in rows[:size]], next_page_token=token)


def _scopes_shown(ctx: Context, principal: Principal, target: Securable) -> Callable[[str], bool] | None:
    """None for a reader of every scope of the memory store; else whether a scope may be shown
    (a reader whose READ is limited to some scopes: a run's report is held to them)."""
    if ctx.access.visible(principal, "entries.read", target):
        return None
    return lambda scope: ctx.access.visible(principal, "entries.read", target, [scope])
