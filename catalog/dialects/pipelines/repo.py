"""SQL for memory pipelines, their runs and the sessions a run works through. The only module of
this slice that talks to PostgreSQL.

Invariants:
- one pipeline per (session store, memory store) pair (UNIQUE); a pipeline and its runs go with
  either store (ON DELETE CASCADE);
- runs are numbered per pipeline from the pipeline's `next_run`, bumped under the pipeline's row
  lock, in the transaction that inserts the run; at most one run of a pipeline is PENDING or
  RUNNING, whichever process inserts it (the partial unique index `pipeline_runs_one_active`);
- a worker claims a run (PENDING, or RUNNING with an expired lease) with FOR UPDATE SKIP LOCKED,
  so two workers never claim the same run; every later write of the run is conditioned on the
  worker still holding the lease, so a worker that lost it (it stalled, another took over) changes
  nothing any more;
- a session's outcome and the run's counts change in one transaction: counts never disagree with
  the outcomes recorded. The entries a session counts are read, in that transaction, from what the
  run's writes left (`transcript_lineage`, `entries`, `extraction_marks`, `agent_sessions`, read by
  SQL only), so that writes an attempt made before it stopped are counted by the one that finishes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import asyncpg

from catalog import telemetry
from catalog.errors import AlreadyExists

Conn: TypeAlias = asyncpg.Connection | asyncpg.Pool

_MS = "(extract(epoch FROM {col}) * 1000)::bigint"
ACTIVE = ("PENDING", "RUNNING")


@dataclass(frozen=True)
class PipelineRow:
    id: str
    session_store: str  # the session store's name (its id in the agent dialect)
    session_store_id: str
    session_store_full_name: str  # catalog.schema.name
    memory_store: str
    memory_store_id: str
    memory_store_full_name: str
    display_name: str | None
    model: str | None
    instructions: str | None
    trigger: str
    creator: str
    version: int
    steps: tuple[str, ...]  # the steps its runs take after the sessions (catalog.dialects.pipelines.steps)
    created_at: int  # epoch ms
    updated_at: int
    created_us: int  # the list's key, with the id
    # the memory store's chain (catalog, schema, store ids and owners), for list visibility
    chain: tuple[tuple[str, str], ...] = ()
    configured_by: str | None = None  # who last changed what it does (None: only its creator)


@dataclass(frozen=True)
class RunRow:
    id: str
    pipeline: str
    run_number: int
    state: str
    trigger: str
    requested_by: str
    error: str | None
    planned: bool
    sessions_total: int
    sessions_extracted: int
    sessions_skipped: int
    sessions_failed: int
    entries_written: int
    attempts: int
    created_at: int
    started_at: int | None
    ended_at: int | None
    # the steps it takes after the sessions, each with its options (catalog.dialects.pipelines.steps)
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)  # each step's, once done


@dataclass(frozen=True)
class PlannedSession:
    ordinal: int
    session: str  # the session's row id
    session_id: str


_PIPELINE_COLUMNS = (
    "p.id::text AS id, ss.name AS session_store, ss.id::text AS session_store_id, "
    "sc.name || '.' || s2.name || '.' || ss.name AS session_store_full_name, "
    "m.name AS memory_store, m.id::text AS memory_store_id, "
    "c.name || '.' || s.name || '.' || m.name AS memory_store_full_name, "
    "p.display_name, p.model, p.instructions, p.trigger, p.creator, p.version, p.steps, p.configured_by, "
    f"{_MS.format(col='p.created_at')} AS created_at, {_MS.format(col='p.updated_at')} AS updated_at, "
    "(extract(epoch FROM p.created_at) * 1000000)::bigint AS created_us, "
    "c.id::text AS c_id, c.owner AS c_owner, s.id::text AS s_id, s.owner AS s_owner, m.owner AS m_owner"
)
_PIPELINE_FROM = (
    "FROM memory_pipelines p "
    "JOIN memory_stores m ON m.id = p.memory_store_id JOIN schemas s ON s.id = m.schema_id "
    "JOIN catalogs c ON c.id = s.catalog_id "
    "JOIN memory_stores ss ON ss.id = p.session_store_id JOIN schemas s2 ON s2.id = ss.schema_id "
    "JOIN catalogs sc ON sc.id = s2.catalog_id"
)
_RUN_COLUMNS = (
    "id::text AS id, pipeline::text AS pipeline, run_number, state, trigger, requested_by, error, "
    "planned, sessions_total, sessions_extracted, sessions_skipped, sessions_failed, entries_written, "
    f"attempts, {_MS.format(col='created_at')} AS created_at, {_MS.format(col='started_at')} AS started_at, "
    f"{_MS.format(col='ended_at')} AS ended_at, steps, reports"
)


def _pipeline(row: asyncpg.Record) -> PipelineRow:
    return PipelineRow(
        id=row["id"],
        session_store=row["session_store"],
        session_store_id=row["session_store_id"],
        session_store_full_name=row["session_store_full_name"],
        memory_store=row["memory_store"],
        memory_store_id=row["memory_store_id"],
        memory_store_full_name=row["memory_store_full_name"],
        display_name=row["display_name"],
        model=row["model"],
        instructions=row["instructions"],
        trigger=row["trigger"],
        creator=row["creator"],
        version=row["version"],
        steps=tuple(row["steps"]),
        configured_by=row["configured_by"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        created_us=row["created_us"],
        chain=(
            (row["c_id"], row["c_owner"]),
            (row["s_id"], row["s_owner"]),
            (row["memory_store_id"], row["m_owner"]),
        ),
    )


def _run(row: asyncpg.Record) -> RunRow:
    return RunRow(**dict(row))


# --- pipelines -------------------------------------------------------------------------------------


async def insert_pipeline(
    conn: Conn,
    *,
    session_store_id: str,
    memory_store_id: str,
    display_name: str | None,
    model: str | None,
    instructions: str | None,
    trigger: str,
    creator: str,
    steps: Sequence[str] = (),
) -> str:
    try:
        value = await conn.fetchval(
            "INSERT INTO memory_pipelines (session_store_id, memory_store_id, display_name, model, "
            "instructions, trigger, scheduled_at, creator, steps) VALUES ($1, $2, $3, $4, $5, $6, "
            "CASE WHEN $6 = 'SCHEDULED' THEN clock_timestamp() END, $7, $8::text[]) RETURNING id::text",
            session_store_id,
            memory_store_id,
            display_name,
            model,
            instructions,
            trigger,
            creator,
            list(steps),
        )
    except asyncpg.UniqueViolationError as exc:
        raise AlreadyExists(
            "a memory pipeline from this session store into this memory store already exists"
        ) from exc
    return str(value)


async def get_pipeline(conn: Conn, pipeline_id: str) -> PipelineRow | None:
    row = await conn.fetchrow(f"SELECT {_PIPELINE_COLUMNS} {_PIPELINE_FROM} WHERE p.id = $1", pipeline_id)
    return _pipeline(row) if row else None


async def list_pipelines(conn: Conn, *, after: tuple[int, str] | None, limit: int) -> list[PipelineRow]:
    """Pipelines by (create time in µs, id), after the key `after`."""
    rows = await conn.fetch(
        f"SELECT {_PIPELINE_COLUMNS} {_PIPELINE_FROM} "
        "WHERE ($1::bigint IS NULL OR ((extract(epoch FROM p.created_at) * 1000000)::bigint, p.id::text) "
        "> ($1::bigint, $2::text)) "
        "ORDER BY p.created_at, p.id LIMIT $3",
        after[0] if after else None,
        after[1] if after else None,
        limit,
    )
    return [_pipeline(row) for row in rows]


async def update_pipeline(
    conn: Conn,
    pipeline_id: str,
    *,
    display_name: tuple[str | None] | None,
    model: tuple[str | None] | None,
    instructions: tuple[str | None] | None,
    trigger: str | None,
    expected_version: int | None,
    steps: Sequence[str] | None = None,
    configured_by: str | None = None,
) -> int | None:
    """Set the fields given (a 1-tuple holds the new value, None leaves the field), and
    `configured_by` when given; answers the new version, or None when the pipeline is gone or
    (with `expected_version`) changed meanwhile."""
    value = await conn.fetchval(
        "UPDATE memory_pipelines SET "
        "display_name = CASE WHEN $2 THEN $3 ELSE display_name END, "
        "model = CASE WHEN $4 THEN $5 ELSE model END, "
        "instructions = CASE WHEN $6 THEN $7 ELSE instructions END, "
        "scheduled_at = CASE WHEN $8::text = 'SCHEDULED' AND trigger <> 'SCHEDULED' THEN clock_timestamp() "
        "  WHEN $8::text = 'MANUAL_ONLY' THEN NULL ELSE scheduled_at END, "
        "trigger = coalesce($8::text, trigger), steps = coalesce($10::text[], steps), "
        "configured_by = coalesce($11::text, configured_by), "
        "version = version + 1, updated_at = clock_timestamp() "
        "WHERE id = $1 AND ($9::bigint IS NULL OR version = $9) RETURNING version",
        pipeline_id,
        display_name is not None,
        display_name[0] if display_name else None,
        model is not None,
        model[0] if model else None,
        instructions is not None,
        instructions[0] if instructions else None,
        trigger,
        expected_version,
        None if steps is None else list(steps),
        configured_by,
    )
    return None if value is None else int(value)


async def delete_pipeline(conn: Conn, pipeline_id: str) -> bool:
    status: str = await conn.execute("DELETE FROM memory_pipelines WHERE id = $1", pipeline_id)
    return status.endswith(" 1")


# --- runs ------------------------------------------------------------------------------------------


async def active_run(conn: Conn, pipeline_id: str) -> int | None:
    value = await conn.fetchval(
        "SELECT run_number FROM pipeline_runs WHERE pipeline = $1 AND state IN ('PENDING', 'RUNNING')",
        pipeline_id,
    )
    return None if value is None else int(value)


async def insert_run(
    conn: asyncpg.Connection,
    pipeline_id: str,
    trigger: str,
    by: str,
    *,
    due_after: float | None = None,
    steps: dict[str, dict[str, Any]] | None = None,
) -> RunRow | int | None:
    """A new PENDING run, taking `steps` after its sessions (None: those its pipeline names, with
    no options) (in the caller's transaction, under the pipeline's row lock, which orders
    concurrent inserts), or the number of the run already active, or None when the pipeline is
    gone or (`due_after` seconds given: a scheduled run) not due any more."""
    found = await conn.fetchrow(
        "SELECT trigger, greatest(scheduled_at, (SELECT max(created_at) FROM pipeline_runs "
        "WHERE pipeline = $1)) < clock_timestamp() - make_interval(secs => coalesce($2::float8, 0)) AS due "
        "FROM memory_pipelines WHERE id = $1 FOR UPDATE",
        pipeline_id,
        due_after,
    )
    if found is None:
        return None
    active = await active_run(conn, pipeline_id)
    if active is not None:
        return active
    if due_after is not None and not (found["trigger"] == "SCHEDULED" and found["due"]):
        return None
    number = await conn.fetchval(
        "UPDATE memory_pipelines SET next_run = next_run + 1 WHERE id = $1 RETURNING next_run - 1",
        pipeline_id,
    )
    # a run takes the steps asked for, else those its pipeline names
    row = await conn.fetchrow(
        "INSERT INTO pipeline_runs (pipeline, run_number, trigger, requested_by, steps) "
        "VALUES ($1, $2, $3, $4, coalesce($5::jsonb, "
        "(SELECT coalesce(jsonb_object_agg(s, '{}'::jsonb), '{}') "
        "FROM memory_pipelines p, unnest(p.steps) AS s WHERE p.id = $1))) "
        f"ON CONFLICT DO NOTHING RETURNING {_RUN_COLUMNS}",
        pipeline_id,
        number,
        trigger,
        by,
        steps,
    )
    if row is None:  # cannot happen under the row lock; the unique index is the last word
        return await active_run(conn, pipeline_id) or 0
    return _run(row)


async def get_run(conn: Conn, pipeline_id: str, run_number: int) -> RunRow | None:
    row = await conn.fetchrow(
        f"SELECT {_RUN_COLUMNS} FROM pipeline_runs WHERE pipeline = $1 AND run_number = $2",
        pipeline_id,
        run_number,
    )
    return _run(row) if row else None


async def list_runs(conn: Conn, pipeline_id: str, *, before: int | None, limit: int) -> list[RunRow]:
    """Newest first: by run number, descending, below `before`."""
    rows = await conn.fetch(
        f"SELECT {_RUN_COLUMNS} FROM pipeline_runs WHERE pipeline = $1 "
        "AND ($2::bigint IS NULL OR run_number < $2) ORDER BY run_number DESC LIMIT $3",
        pipeline_id,
        before,
        limit,
    )
    return [_run(row) for row in rows]


async def due_pipelines(conn: Conn, interval: float) -> list[str]:
    """SCHEDULED pipelines with no active run whose last run was created (or which were scheduled)
    longer than `interval` seconds ago."""
    rows = await conn.fetch(
        "SELECT p.id::text FROM memory_pipelines p "
        "LEFT JOIN LATERAL (SELECT max(created_at) AS last FROM pipeline_runs r WHERE r.pipeline = p.id) l "
        "ON true WHERE p.trigger = 'SCHEDULED' "
        "AND greatest(l.last, p.scheduled_at) < clock_timestamp() - make_interval(secs => $1) "
        "AND NOT EXISTS (SELECT 1 FROM pipeline_runs a WHERE a.pipeline = p.id "
        "AND a.state IN ('PENDING', 'RUNNING')) ORDER BY p.id LIMIT 100",
        interval,
    )
    return [str(row[0]) for row in rows]


# --- the worker's side: claiming, leases, progress ------------------------------------------------------


async def claim(conn: Conn, worker: str, lease: float) -> RunRow | None:
    """The oldest run waiting (PENDING) or abandoned (RUNNING, its lease expired), now RUNNING and
    leased to `worker` for `lease` seconds; None when there is none."""
    row = await conn.fetchrow(
        "UPDATE pipeline_runs r SET state = 'RUNNING', leased_by = $1, "
        "lease_until = clock_timestamp() + make_interval(secs => $2), attempts = r.attempts + 1, "
        "started_at = coalesce(r.started_at, clock_timestamp()) "
        "WHERE r.id = (SELECT id FROM pipeline_runs WHERE state = 'PENDING' "
        "OR (state = 'RUNNING' AND lease_until < clock_timestamp()) "
        "ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED) "
        f"RETURNING {_RUN_COLUMNS}",
        worker,
        lease,
    )
    return _run(row) if row else None


async def get_run_by_id(conn: Conn, run_id: str) -> RunRow | None:
    row = await conn.fetchrow(f"SELECT {_RUN_COLUMNS} FROM pipeline_runs WHERE id = $1", run_id)
    return _run(row) if row else None


async def renew(conn: Conn, run_id: str, worker: str, lease: float) -> bool:
    """Extend the lease; False when the worker no longer holds it (or the run is gone)."""
    status: str = await conn.execute(
        "UPDATE pipeline_runs SET lease_until = clock_timestamp() + make_interval(secs => $3) "
        "WHERE id = $1 AND leased_by = $2 AND state = 'RUNNING'",
        run_id,
        worker,
        lease,
    )
    return status.endswith(" 1")


_HELD = "id = $1 AND leased_by = $2 AND state = 'RUNNING'"


async def release(conn: Conn, run_id: str, worker: str) -> None:
    """Let the lease go now (the run stays RUNNING): any worker may resume it at once."""
    await conn.execute(
        f"UPDATE pipeline_runs SET lease_until = clock_timestamp() WHERE {_HELD}", run_id, worker
    )


async def plan(conn: asyncpg.Connection, run_id: str, worker: str, sessions: list[tuple[str, str]]) -> bool:
    """List the run's sessions (row id, session id), in order, once; False when the lease is lost."""
    async with conn.transaction():
        held = await conn.fetchval(
            f"UPDATE pipeline_runs SET planned = true, sessions_total = $3 WHERE {_HELD} AND NOT planned "
            "RETURNING true",
            run_id,
            worker,
            len(sessions),
        )
        if not held:
            return bool(await conn.fetchval(f"SELECT true FROM pipeline_runs WHERE {_HELD}", run_id, worker))
        await conn.execute(
            "INSERT INTO pipeline_run_sessions (run, ordinal, session, session_id) "
            "SELECT $1, n, s, i FROM unnest($2::uuid[], $3::text[]) WITH ORDINALITY AS t(s, i, n)",
            run_id,
            [s for s, _ in sessions],
            [i for _, i in sessions],
        )
    return True


async def pending_sessions(conn: Conn, run_id: str) -> list[PlannedSession]:
    rows = await conn.fetch(
        "SELECT ordinal, session::text AS session, session_id FROM pipeline_run_sessions "
        "WHERE run = $1 AND outcome IS NULL ORDER BY ordinal",
        run_id,
    )
    return [PlannedSession(row["ordinal"], row["session"], row["session_id"]) for row in rows]


async def record_outcome(
    conn: asyncpg.Connection,
    run_id: str,
    worker: str,
    planned: PlannedSession,
    outcome: str,
    error: str | None,
    lease: float,
    *,
    session_store_id: str,
    memory_store_id: str,
) -> tuple[str, int] | None:
    """A session's outcome and the run's counts (its lease renewed), together: (the outcome kept,
    the entries counted), or None when the lease is lost (nothing written then).

    What the run did to the session is read from what its writes left, in this transaction, not
    from what the last attempt saw (an attempt stopped half-way wrote what it wrote, and the one
    that redoes the session cannot tell):
    - written: the session's entries in the memory store that exist and whose lineage edge from
      the session was made or renewed since the run began (each write of an extraction renews it
      in its own transaction, and within a run only this run extracts the session into the store:
      a manual extraction of the same session into the same store meanwhile counts too);
    - an outcome `skipped` becomes `extracted` when the session's extraction mark was set since the
      run began: an attempt stopped after its extraction ended, before this was recorded."""
    async with conn.transaction():
        started = await conn.fetchval(
            f"SELECT started_at FROM pipeline_runs WHERE {_HELD} FOR UPDATE", run_id, worker
        )
        if started is None:
            return None
        # the session's actor is the scope of its edges (their index); a session deleted meanwhile
        # has none any more, and its edges are looked for by thread alone
        actor = await conn.fetchval(
            "SELECT actor_id FROM agent_sessions WHERE id = $1::uuid", planned.session
        )
        written = int(
            await conn.fetchval(
                "SELECT count(*) FROM transcript_lineage l JOIN entries e ON e.id = l.target_entry_id "
                "AND e.store_id = l.target_store_id WHERE l.source_kind = 'session' "
                "AND l.source_store_id = $1::uuid "
                + ("AND l.source_scope = $5 " if actor is not None else "AND $5::text IS NULL ")
                + "AND l.source_thread_id = $2 AND l.target_store_id = $3::uuid AND l.updated_at >= $4",
                session_store_id,
                planned.session_id,
                memory_store_id,
                started,
                actor,
            )
        )
        if outcome == "skipped" and await conn.fetchval(
            "SELECT true FROM extraction_marks WHERE session = $1::uuid AND memory_store_id = $2::uuid "
            "AND extracted_at >= $3",
            planned.session,
            memory_store_id,
            started,
        ):
            outcome = "extracted"
        column = {
            "extracted": "sessions_extracted",
            "skipped": "sessions_skipped",
            "failed": "sessions_failed",
        }[outcome]
        await conn.execute(
            f"UPDATE pipeline_runs SET {column} = {column} + 1, entries_written = entries_written + $3, "
            f"lease_until = clock_timestamp() + make_interval(secs => $4) WHERE {_HELD}",
            run_id,
            worker,
            written,
            lease,
        )
        await conn.execute(
            "UPDATE pipeline_run_sessions SET outcome = $3, error = $4, entries_written = $5 "
            "WHERE run = $1 AND ordinal = $2 AND outcome IS NULL",
            run_id,
            planned.ordinal,
            outcome,
            error,
            written,
        )
    return outcome, written


@telemetry.pipeline_run_end
async def finish(conn: Conn, run_id: str, worker: str, state: str, error: str | None) -> RunRow | None:
    """End the run (SUCCEEDED or FAILED) and let go of its lease; None when the lease is lost. Its
    list of sessions goes (it only served resuming): an ended run keeps its counts, and no session
    id outlives its session in a run's history."""
    row = await conn.fetchrow(
        "WITH ended AS (UPDATE pipeline_runs SET state = $3, error = $4, ended_at = clock_timestamp(), "
        f"leased_by = NULL, lease_until = NULL WHERE {_HELD} RETURNING {_RUN_COLUMNS}), "
        "listed AS (DELETE FROM pipeline_run_sessions WHERE run = $1 AND EXISTS (SELECT 1 FROM ended)) "
        "SELECT * FROM ended",
        run_id,
        worker,
        state,
        error,
    )
    return _run(row) if row else None


async def first_failure(conn: Conn, run_id: str) -> str | None:
    value = await conn.fetchval(
        "SELECT error FROM pipeline_run_sessions WHERE run = $1 AND outcome = 'failed' "
        "ORDER BY ordinal LIMIT 1",
        run_id,
    )
    return None if value is None else str(value)


# --- the steps after the sessions --------------------------------------------------------------------


async def run_scopes(conn: Conn, run_id: str) -> list[str]:
    """The scopes of a run's sessions (their actors), extracted or unchanged since their last
    extraction, not failed: in order of first appearance (read by SQL only)."""
    rows = await conn.fetch(
        "SELECT a.actor_id, min(r.ordinal) AS first FROM pipeline_run_sessions r "
        "JOIN agent_sessions a ON a.id = r.session "
        "WHERE r.run = $1 AND r.outcome IN ('extracted', 'skipped') GROUP BY a.actor_id ORDER BY first",
        run_id,
    )
    return [row["actor_id"] for row in rows]


async def record_report(conn: Conn, run_id: str, worker: str, step: str, report: dict[str, Any]) -> bool:
    """Keep a step's report on the run (while the worker holds its lease)."""
    status: str = await conn.execute(
        "UPDATE pipeline_runs SET reports = reports || jsonb_build_object($3::text, $4::jsonb) "
        "WHERE id = $1 AND leased_by = $2",
        run_id,
        worker,
        step,
        report,  # (the pool's codec encodes JSON)
    )
    return status.endswith(" 1")


# --- erasing a data subject --------------------------------------------------------------------------

ERASED = "[erased]"  # an error that named an erased data subject


async def erase_subject(
    conn: asyncpg.Connection,
    subject: str,
    erasers: Mapping[str, Callable[[dict[str, Any], str], dict[str, Any] | None]],
) -> int:
    """Take a data subject out of the runs, in the caller's transaction (`catalog.erasure`): each
    step's report by that step's own rule (`erasers`, by step name: `catalog.dialects.pipelines.
    registry`); an error of a run or a session that names the subject anywhere (free text: any
    mention counts) becomes ERASED. The counts stay (what was done). How many runs changed."""
    changed: set[str] = set()
    # the reports that mention it anywhere (as their JSON text spells it): each step then decides
    rows = await conn.fetch(
        "SELECT id::text, reports FROM pipeline_runs WHERE reports <> '{}' "
        "AND strpos(reports::text, btrim(to_jsonb($1::text)::text, '\"')) > 0 FOR UPDATE",
        subject,
    )
    for row in rows:
        reports = dict(row["reports"])
        for step, report in row["reports"].items():
            erase = erasers.get(step)
            erased = erase(dict(report), subject) if erase is not None and isinstance(report, dict) else None
            if erased is not None:
                reports[step] = erased
        if reports != row["reports"]:
            await conn.execute("UPDATE pipeline_runs SET reports = $2 WHERE id = $1::uuid", row[0], reports)
            changed.add(row[0])
    errors = await conn.fetch(
        "UPDATE pipeline_runs SET error = $2 WHERE strpos(error, $1) > 0 RETURNING id::text", subject, ERASED
    )
    changed.update(row[0] for row in errors)
    sessions = await conn.fetch(
        "UPDATE pipeline_run_sessions SET error = $2 WHERE strpos(error, $1) > 0 RETURNING run::text",
        subject,
        ERASED,
    )
    changed.update(row[0] for row in sessions)
    return len(changed)
