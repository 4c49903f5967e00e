-- Who last changed what a memory pipeline does (its model, instructions, trigger or maintenance):
-- a run never does what that principal, its creator or the one who started it could not do, and
-- every event of a run names them. NULL: nobody but the creator has changed it.

ALTER TABLE memory_pipelines ADD COLUMN IF NOT EXISTS configured_by text;
