-- Who holds an embedding claim (0025): the claiming database session, by its backend pid and start
-- time (a pid alone may be reused). A claim whose session is gone (its process died, or PostgreSQL
-- restarted) is free at once instead of when its lease runs out; a claim without a claimer (taken
-- before this migration) lasts its lease.
ALTER TABLE entries ADD COLUMN IF NOT EXISTS embedding_claimer integer;
ALTER TABLE entries ADD COLUMN IF NOT EXISTS embedding_claimer_start timestamptz;
ALTER TABLE transcript_items ADD COLUMN IF NOT EXISTS embedding_claimer integer;
ALTER TABLE transcript_items ADD COLUMN IF NOT EXISTS embedding_claimer_start timestamptz;
