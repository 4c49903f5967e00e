-- Memory pipelines' maintenance step: after a run's sessions are extracted, the upstream model
-- reviews the memories of the scopes the run extracted into and merges, splits or supersedes them
-- (`maintain` on the pipeline, or on a run; a run's `dry_run` has the step only report what it
-- would do). A run keeps the step's report (`maintenance`), written once it is done, so a run
-- taken over after the step does not do it again.

ALTER TABLE memory_pipelines ADD COLUMN IF NOT EXISTS maintain boolean NOT NULL DEFAULT false;
ALTER TABLE pipeline_runs ADD COLUMN IF NOT EXISTS maintain boolean NOT NULL DEFAULT false;
ALTER TABLE pipeline_runs ADD COLUMN IF NOT EXISTS dry_run boolean NOT NULL DEFAULT false;
ALTER TABLE pipeline_runs ADD COLUMN IF NOT EXISTS maintenance jsonb;
