-- A pipeline's steps after its sessions are a registry (catalog/dialects/pipelines/steps.py)
-- rather than columns of their own: a pipeline names the steps its runs take (`steps`), a run the
-- steps it takes with each one's options (`steps`: {name: {option: value}}) and keeps the report
-- of each one done (`reports`: {name: report}), so that a run taken over does not do it again.
-- The maintenance step's columns (0033) are carried over and dropped: a report left behind in
-- them would be a copy that erasing a data subject no longer reaches.

ALTER TABLE memory_pipelines ADD COLUMN IF NOT EXISTS steps text[] NOT NULL DEFAULT '{}';
ALTER TABLE pipeline_runs ADD COLUMN IF NOT EXISTS steps jsonb NOT NULL DEFAULT '{}';
ALTER TABLE pipeline_runs ADD COLUMN IF NOT EXISTS reports jsonb NOT NULL DEFAULT '{}';

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM information_schema.columns
               WHERE table_schema = current_schema() AND table_name = 'memory_pipelines'
               AND column_name = 'maintain') THEN
        UPDATE memory_pipelines SET steps = ARRAY['maintain'] WHERE maintain;
        ALTER TABLE memory_pipelines DROP COLUMN maintain;
    END IF;
    IF EXISTS (SELECT 1 FROM information_schema.columns
               WHERE table_schema = current_schema() AND table_name = 'pipeline_runs'
               AND column_name = 'maintain') THEN
        UPDATE pipeline_runs
        SET steps = jsonb_build_object('maintain', jsonb_build_object('dry_run', dry_run))
        WHERE maintain;
        UPDATE pipeline_runs SET reports = jsonb_build_object('maintain', maintenance)
        WHERE maintenance IS NOT NULL;
        ALTER TABLE pipeline_runs DROP COLUMN maintain, DROP COLUMN dry_run, DROP COLUMN maintenance;
    END IF;
END
$$;
