-- Memory pipelines: a session store distilled into a memory store by runs of memory extraction,
-- executed by a background worker in every server process (catalog/pipelines).
-- One pipeline per (session store, memory store) pair; both go with their store.
CREATE TABLE IF NOT EXISTS memory_pipelines (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),  -- also the public id: memory-pipelines/{id}
    session_store_id uuid NOT NULL REFERENCES memory_stores (id) ON DELETE CASCADE,
    memory_store_id uuid NOT NULL REFERENCES memory_stores (id) ON DELETE CASCADE,
    display_name text,
    model text,  -- the model asked for instead of the server's default (NULL: none)
    instructions text,
    trigger text NOT NULL DEFAULT 'MANUAL_ONLY',
    -- when the trigger last became SCHEDULED: a scheduled run is due an interval after the later
    -- of this and the last run's creation
    scheduled_at timestamptz,
    creator text NOT NULL,  -- the owner: runs act as this principal
    version bigint NOT NULL DEFAULT 1,  -- the etag; every change bumps it
    next_run bigint NOT NULL DEFAULT 1,  -- the number the next run takes (bumped under the row lock)
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (session_store_id, memory_store_id)
);
ALTER TABLE memory_pipelines DROP CONSTRAINT IF EXISTS memory_pipelines_trigger_check;
ALTER TABLE memory_pipelines ADD CONSTRAINT memory_pipelines_trigger_check
    CHECK (trigger IN ('MANUAL_ONLY', 'SCHEDULED'));
CREATE INDEX IF NOT EXISTS memory_pipelines_created ON memory_pipelines (created_at, id);
CREATE INDEX IF NOT EXISTS memory_pipelines_memory_store ON memory_pipelines (memory_store_id);
CREATE INDEX IF NOT EXISTS memory_pipelines_scheduled ON memory_pipelines (id) WHERE trigger = 'SCHEDULED';

-- The runs of a pipeline, numbered 1, 2, ... per pipeline. A worker holds a RUNNING run by its
-- lease (`leased_by` until `lease_until`, renewed while it works); a run whose lease expired is
-- taken over by any worker. Counts are written as sessions finish.
CREATE TABLE IF NOT EXISTS pipeline_runs (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),  -- the audit events' request id: run-{id}
    pipeline uuid NOT NULL REFERENCES memory_pipelines (id) ON DELETE CASCADE,
    run_number bigint NOT NULL,
    state text NOT NULL DEFAULT 'PENDING',
    trigger text NOT NULL,  -- MANUAL (asked for) or SCHEDULED (the worker's)
    requested_by text NOT NULL,
    error text,
    planned boolean NOT NULL DEFAULT false,  -- its sessions are listed in pipeline_run_sessions
    sessions_total integer NOT NULL DEFAULT 0,
    sessions_extracted integer NOT NULL DEFAULT 0,
    sessions_skipped integer NOT NULL DEFAULT 0,
    sessions_failed integer NOT NULL DEFAULT 0,
    entries_written integer NOT NULL DEFAULT 0,
    attempts integer NOT NULL DEFAULT 0,  -- times a worker claimed it (more than one: resumed)
    leased_by text,
    lease_until timestamptz,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    started_at timestamptz,
    ended_at timestamptz,
    UNIQUE (pipeline, run_number)
);
ALTER TABLE pipeline_runs DROP CONSTRAINT IF EXISTS pipeline_runs_state_check;
ALTER TABLE pipeline_runs ADD CONSTRAINT pipeline_runs_state_check
    CHECK (state IN ('PENDING', 'RUNNING', 'SUCCEEDED', 'FAILED'));
ALTER TABLE pipeline_runs DROP CONSTRAINT IF EXISTS pipeline_runs_trigger_check;
ALTER TABLE pipeline_runs ADD CONSTRAINT pipeline_runs_trigger_check CHECK (trigger IN ('MANUAL', 'SCHEDULED'));
-- at most one active run per pipeline, whichever process inserts it
CREATE UNIQUE INDEX IF NOT EXISTS pipeline_runs_one_active ON pipeline_runs (pipeline)
    WHERE state IN ('PENDING', 'RUNNING');
-- what a worker looks for: runs waiting, and runs whose lease may have expired
CREATE INDEX IF NOT EXISTS pipeline_runs_active ON pipeline_runs (created_at)
    WHERE state IN ('PENDING', 'RUNNING');

-- The sessions a run works through, listed once when it starts (in creation order), each with
-- its outcome once done (NULL: not yet): a resumed run goes on with the ones without one.
-- A session is named by its row id and session id, with no reference: one deleted meanwhile is
-- skipped when its turn comes.
CREATE TABLE IF NOT EXISTS pipeline_run_sessions (
    run uuid NOT NULL REFERENCES pipeline_runs (id) ON DELETE CASCADE,
    ordinal integer NOT NULL,
    session uuid NOT NULL,
    session_id text NOT NULL,
    outcome text,
    error text,
    entries_written integer NOT NULL DEFAULT 0,
    PRIMARY KEY (run, ordinal)
);
ALTER TABLE pipeline_run_sessions DROP CONSTRAINT IF EXISTS pipeline_run_sessions_outcome_check;
ALTER TABLE pipeline_run_sessions ADD CONSTRAINT pipeline_run_sessions_outcome_check
    CHECK (outcome IN ('extracted', 'skipped', 'failed'));
