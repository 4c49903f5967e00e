"""The worker that does memory pipelines' runs, in every server process (started and stopped by
`catalog.runtime`).

Rules:
- runs are durable jobs in PostgreSQL (`pipeline_runs`). A worker claims the oldest run that is
  PENDING, or RUNNING with an expired lease (its process crashed or stalled), with
  FOR UPDATE SKIP LOCKED, and holds it by a lease (`leased_by`, `lease_until`) that it renews
  every third of `LEASE_SECONDS` while it works and with every session it finishes. Every write
  of the run is conditioned on the lease: a worker that lost it stops and changes nothing more.
  A worker wakes when this process creates a run, and polls every `POLL_SECONDS` for the others'
  (and for expired leases); it works on at most `MAX_RUNS` runs at once;
- a run lists the session store's sessions once, in creation order (`pipeline_run_sessions`), and
  extracts them one after another into the memory store (`catalog.dialects.extraction.service.run`, not a
  dry run): a session unchanged since its last extraction there is skipped. Each session's outcome
  (extracted, skipped, failed) and the run's counts are written together as it finishes;
- resuming is safe because each session's work is idempotent: its extraction mark is set only
  after all its writes, and a finished session has its outcome recorded, so a run taken over
  redoes at most the session that was in progress;
- what a session counts is read from the database as its outcome is recorded, not from what the
  attempt that finished it saw: `entries_written` is the entries the run's writes from the session
  left (their lineage edges renewed since the run began), so the writes of an attempt stopped
  half-way (a shut-down, a crash) count once, whatever the attempt that redoes the session does
  (the model may find them and write nothing, or save them again and be refused); and a session
  whose extraction ended (marked) before the stop is counted extracted, not skipped, when the
  attempt that redoes it finds nothing to do. A failed session counts what it wrote before failing;
- a run answers to its pipeline's creator, to whoever last changed what it does and to whoever
  started it (`service.run_principals`): before it plans, before each session and before its
  maintenance step it checks that each of them may still do every step of it
  (`service.refusal`), and else ends FAILED naming who may not, doing nothing more;
- a run acts as its pipeline's creator: each session is authorized as theirs (`memories.extract`
  on the memory store, `sessions.read` on the session store, the stores' scope bindings) and each
  tool call of the model as its entry operation. A session that fails (the creator lost a
  privilege, the upstream model failed or refused) is counted failed and the run goes on; the
  next run reads it again (it is not marked). The run is FAILED when sessions were attempted
  (not skipped) and every one of them failed, with `error` saying how many and the first reason;
  else it SUCCEEDED (the failures are in its counts and the audit log);
- audit (`catalog.recorder.background`): the events of a run carry the request id `run-<uuid>`
  (the same after a takeover), the creator as principal, and the pipeline, the run, who asked for
  it (`requested_by`: a principal, or `schedule`) and who last changed what it does
  (`configured_by`) in their parameters: a `pipelines.run` event (decision `system`) when a
  worker starts it (`phase` start, or resume), one `memories.extract` event per session (its
  outcome as the status: 403 when refused, 502 when the model failed), one event per tool call,
  and a `pipelines.run` event when it ends (its state and counts);
- a SCHEDULED pipeline gets a run when `CATALOG_PIPELINE_INTERVAL` seconds have passed since its
  last run was created (or since it was scheduled, whichever is later) and none is active; the
  check is repeated under the pipeline's row lock, so two processes never both create it. Nothing
  is scheduled while no upstream model is configured;
- at shut-down a worker stops its runs and lets their leases go at once, so another process
  resumes them without waiting for the lease to expire.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import Callable
from typing import Any

from catalog.access import limits
from catalog.access.seam import Refusal
from catalog.auth import Principal
from catalog.context import Context
from catalog.dialects.extraction import service as extraction
from catalog.dialects.pipelines import repo
from catalog.dialects.pipelines.registry import STEPS
from catalog.dialects.pipelines.repo import PipelineRow, PlannedSession, RunRow
from catalog.dialects.pipelines.service import (
    listen_for_new_runs,
    pipeline_name,
    refusal,
    run_name,
    run_principals,
)
from catalog.dialects.pipelines.steps import Step, StepRun
from catalog.dialects.sessions import repo as sessions_repo
from catalog.dialects.sessions import service as sessions
from catalog.entries.service import resolve_store
from catalog.errors import CatalogError, NotFound, is_unavailable, log_unexpected
from catalog.recorder import AuditWriter, background, mark, note_outcome, operation, record_background

log = logging.getLogger("catalog.pipelines")

POLL_SECONDS = 5.0
LEASE_SECONDS = 60.0
MAX_RUNS = 2
PLAN_BATCH = 1000  # sessions listed per query when a run is planned
MAX_ERROR = 2000  # characters of a failure kept
SCHEDULED_BY = "schedule"  # `requested_by` of a run the schedule created


class PipelineWorker:
    def __init__(
        self,
        ctx: Context,
        audit: AuditWriter,
        *,
        interval: float,
        poll: float = POLL_SECONDS,
        lease: float = LEASE_SECONDS,
        slots: int = MAX_RUNS,
    ) -> None:
        self.ctx = ctx
        self.audit = audit
        self.interval = interval
        self.poll = poll
        self.lease = lease
        self.slots = slots
        self.name = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._runs: dict[str, asyncio.Task[None]] = {}
        self._unlisten: Callable[[], None] | None = None
        self._failing = False

    def start(self) -> None:
        self._unlisten = listen_for_new_runs(self.ctx, self.wake)
        self._task = asyncio.create_task(self._loop(), name="pipeline-worker")

    def wake(self) -> None:
        self._wake.set()

    async def close(self) -> None:
        if self._unlisten is not None:
            self._unlisten()
        running = list(self._runs)  # (a run's task leaves `_runs` as it ends)
        tasks = [t for t in (self._task, *self._runs.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for run_id in running:
            with contextlib.suppress(Exception):  # else its lease expires and another resumes it
                await repo.release(self.ctx.pool, run_id, self.name)
                log.info("pipeline run let go at shut-down", extra={"run_id": run_id})

    # --- the loop ----------------------------------------------------------------------------------------

    async def _loop(self) -> None:
        while True:
            self._wake.clear()  # before looking: a wake while looking makes the next wait return
            try:
                if self.ctx.llm is not None:
                    await self._schedule()
                while len(self._runs) < self.slots:
                    claimed = await repo.claim(self.ctx.pool, self.name, self.lease)
                    if claimed is None:
                        break
                    self._spawn(claimed)
                if self._failing:
                    log.info("pipeline worker: the database answers again")
                self._failing = False
            except Exception as exc:
                if not self._failing:
                    if is_unavailable(exc):
                        log.warning("pipeline worker: the database is unavailable; retrying")
                    else:
                        log_unexpected(exc, request_id=None, route="pipeline worker")
                self._failing = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.poll)

    async def _schedule(self) -> None:
        for pipeline_id in await repo.due_pipelines(self.ctx.pool, self.interval):
            async with self.ctx.pool.acquire() as conn, conn.transaction():
                created = await repo.insert_run(
                    conn, pipeline_id, "SCHEDULED", SCHEDULED_BY, due_after=self.interval
                )
            if isinstance(created, RunRow):
                log.info("pipeline run scheduled", extra={"run": run_name(pipeline_id, created.run_number)})

    def _spawn(self, run: RunRow) -> None:
        task = asyncio.create_task(self._execute(run), name=f"pipeline-run-{run.id}")
        self._runs[run.id] = task

        def done(_: asyncio.Task[None]) -> None:
            self._runs.pop(run.id, None)
            self._wake.set()  # a slot is free

        task.add_done_callback(done)

    # --- one run -----------------------------------------------------------------------------------------

    async def _execute(self, run: RunRow) -> None:
        """Work on a claimed run while the lease holds (the lease keeper cancels the work when it
        is lost)."""
        work = asyncio.create_task(self._work(run))
        lost = False

        async def keep() -> None:
            nonlocal lost
            while True:
                await asyncio.sleep(self.lease / 3)
                try:
                    held = await repo.renew(self.ctx.pool, run.id, self.name, self.lease)
                except Exception as exc:  # the database is away: the next write of the work finds out
                    log.debug("pipeline run: lease not renewed (%s)", type(exc).__name__)
                    continue
                if not held:
                    lost = True
                    work.cancel()
                    return

        keeper = asyncio.create_task(keep())
        try:
            await work
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not lost or (current is not None and current.cancelling()):
                raise
            log.warning("pipeline run: lease lost, stopped", extra={"run_id": run.id})
        except Exception as exc:
            if is_unavailable(exc):
                log.warning("pipeline run stopped: the database is unavailable", extra={"run_id": run.id})
                with contextlib.suppress(Exception):
                    await repo.release(self.ctx.pool, run.id, self.name)
            else:
                log_unexpected(exc, request_id=f"run-{run.id}", route="pipeline run")
                with contextlib.suppress(Exception):
                    await repo.finish(
                        self.ctx.pool,
                        run.id,
                        self.name,
                        "FAILED",
                        f"internal error (request id run-{run.id})",
                    )
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper

    async def _work(self, run: RunRow) -> None:
        pipeline = await repo.get_pipeline(self.ctx.pool, run.pipeline)
        if pipeline is None:
            return  # deleted meanwhile: its runs went with it
        name = run_name(pipeline.id, run.run_number)
        store: dict[str, Any] = {
            "securable_type": "MEMORY_STORE",
            "securable_full_name": pipeline.memory_store_full_name,
            "securable_id": pipeline.memory_store_id,
        }
        # every event of the run names whom it answers to besides its creator (the principal)
        requested_by = None if run.requested_by == SCHEDULED_BY else run.requested_by
        params = {
            "pipeline": pipeline_name(pipeline.id),
            "run": name,
            "requested_by": run.requested_by,
            "configured_by": pipeline.configured_by or pipeline.creator,
        }
        answers_to = run_principals(pipeline, requested_by)
        with background(
            self.audit,
            request_id=f"run-{run.id}",
            principal=pipeline.creator,
            params=params,
            reached=limits.scopes_reached,
        ) as audit:
            phase = "start" if run.attempts <= 1 else "resume"
            await record_background(
                audit,
                action_name="pipelines.run",
                **store,
                params={"phase": phase, "trigger": run.trigger, "requested_by": run.requested_by},
            )
            log.info(
                "pipeline run started" if phase == "start" else "pipeline run resumed",
                extra={"run": name, "worker": self.name},
            )
            refused = await refusal(self.ctx, pipeline, answers_to)
            if refused is not None:
                await self._refused(run, name, audit, store, refused)
                return
            if not run.planned and not await self._plan(pipeline, run):
                return
            owner = Principal(pipeline.creator)
            for planned in await repo.pending_sessions(self.ctx.pool, run.id):
                # whom the run answers to may have lost a privilege since it started
                refused = await refusal(self.ctx, pipeline, answers_to)
                if refused is not None:
                    await self._refused(run, name, audit, store, refused)
                    return
                outcome, error = await self._session(pipeline, owner, planned)
                async with self.ctx.pool.acquire() as conn:
                    recorded = await repo.record_outcome(
                        conn,
                        run.id,
                        self.name,
                        planned,
                        outcome,
                        error,
                        self.lease,
                        session_store_id=pipeline.session_store_id,
                        memory_store_id=pipeline.memory_store_id,
                    )
                if recorded is None:
                    log.warning("pipeline run: lease lost, stopped", extra={"run": name})
                    return
            counts = await repo.get_run_by_id(self.ctx.pool, run.id)
            if counts is None:
                return
            # the steps after the sessions, each unless done before a takeover
            for step in STEPS.values():
                if step.name not in counts.steps or step.name in counts.reports:
                    continue
                refused = await refusal(self.ctx, pipeline, answers_to)
                if refused is not None:
                    await self._refused(run, name, audit, store, refused)
                    return
                if not await self._step(step, pipeline, owner, counts, audit, store):
                    log.warning("pipeline run: lease lost, stopped", extra={"run": name})
                    return
            state, error = "SUCCEEDED", None
            if counts.sessions_failed and not counts.sessions_extracted:
                first = await repo.first_failure(self.ctx.pool, run.id)
                state = "FAILED"
                failed = counts.sessions_failed
                error = f"every session that needed extracting failed ({failed}); the first: {first}"[
                    :MAX_ERROR
                ]
            finished = await repo.finish(self.ctx.pool, run.id, self.name, state, error)
            if finished is None:
                return
            await record_background(
                audit,
                action_name="pipelines.run",
                **store,
                params={
                    "phase": "end",
                    "state": state,
                    "sessions_total": finished.sessions_total,
                    "sessions_extracted": finished.sessions_extracted,
                    "sessions_skipped": finished.sessions_skipped,
                    "sessions_failed": finished.sessions_failed,
                },
                result_count=finished.entries_written,
                reason=error,
            )
            log.info("pipeline run ended", extra={"run": name, "state": state})

    async def _refused(
        self, run: RunRow, name: str, audit: Any, store: dict[str, Any], refused: Refusal
    ) -> None:
        """End the run FAILED, doing nothing more: whom it answers to may not do every step. (The
        run's error keeps the reason as it is, erased with a subject it names; its event keeps the
        scope patterns it names as pseudonyms.)"""
        error = f"the run may not go on: {refused.reason}"[:MAX_ERROR]
        finished = await repo.finish(self.ctx.pool, run.id, self.name, "FAILED", error)
        if finished is None:
            return
        await record_background(
            audit,
            action_name="pipelines.run",
            **store,
            params={
                "phase": "end",
                "state": "FAILED",
                "sessions_total": finished.sessions_total,
                "sessions_extracted": finished.sessions_extracted,
                "sessions_skipped": finished.sessions_skipped,
                "sessions_failed": finished.sessions_failed,
            },
            result_count=finished.entries_written,
            reason=mark(error, patterns=refused.named),
        )
        log.info("pipeline run refused", extra={"run": name})

    async def _step(
        self,
        step: Step,
        pipeline: PipelineRow,
        owner: Principal,
        run: RunRow,
        audit: Any,
        store: dict[str, Any],
    ) -> bool:
        """A step over the scopes of the run's sessions, its report kept on the run and in a
        `pipelines.run` event (phase: the step's name); False when the lease is lost."""
        scopes = await repo.run_scopes(self.ctx.pool, run.id)
        done = await step.run(StepRun(self.ctx, owner, pipeline, scopes, run.steps.get(step.name) or {}))
        if not await repo.record_report(self.ctx.pool, run.id, self.name, step.name, done.report):
            return False
        await record_background(
            audit,
            action_name="pipelines.run",
            **store,
            params={"phase": step.name, **done.params},
            result_count=done.result_count,
            reason=done.reason,
        )
        return True

    async def _plan(self, pipeline: PipelineRow, run: RunRow) -> bool:
        """List the session store's sessions for the run, once; False when the lease is lost."""
        found: list[tuple[str, str]] = []
        after: tuple[int, str] | None = None
        while True:
            rows = await sessions_repo.list_sessions(
                self.ctx.pool,
                pipeline.session_store_id,
                descending=False,
                after=after,
                limit=PLAN_BATCH,
                actor_id=None,
                root_session_id=None,
                parent_session_id=None,
            )
            found.extend((row.id, row.session_id) for row in rows)
            if len(rows) < PLAN_BATCH:
                break
            after = (rows[-1].created_us, rows[-1].session_id)
        async with self.ctx.pool.acquire() as conn:
            return await repo.plan(conn, run.id, self.name, found)

    async def _session(
        self, pipeline: PipelineRow, owner: Principal, planned: PlannedSession
    ) -> tuple[str, str | None]:
        """Extract one session as the pipeline's creator: (outcome, error). Its own audit event
        records the outcome. (The entries it wrote are counted from the database as its outcome is
        recorded: `repo.record_outcome`.)"""
        params = {
            "session_store": f"session-stores/{pipeline.session_store}",
            "session_id": planned.session_id,
        }
        async with operation(params):
            try:
                target = await resolve_store(
                    self.ctx, owner, pipeline.memory_store_full_name, "memories.extract", field="memory_store"
                )
                row, store = await sessions.open_session(
                    self.ctx, owner, pipeline.session_store, planned.session_id, "sessions.read"
                )
                done = await extraction.run(
                    self.ctx,
                    owner,
                    row,
                    target,
                    pipeline.memory_store,
                    pipeline.instructions,
                    False,
                    session_store=store,
                    model=pipeline.model,
                    via="pipeline",
                )
            except NotFound as exc:  # the session was deleted meanwhile: nothing to extract
                note_outcome(exc.status_code, exc.memory_store_error_code)
                return "skipped", None
            except CatalogError as exc:
                note_outcome(exc.status_code, exc.error_code)
                return "failed", f"session {planned.session_id}: {exc.message}"[:MAX_ERROR]
            except Exception as exc:
                if is_unavailable(exc):
                    raise  # the run stops here; it resumes (with this session) once the database is back
                log_unexpected(exc, request_id=None, route="pipeline run")
                note_outcome(500, "INTERNAL_ERROR")
                return "failed", f"session {planned.session_id}: internal error"
        return ("skipped" if done.skipped else "extracted"), None
