-- Embedding claims: the embedding worker marks the rows it is embedding with a lease instead of
-- holding their row locks while the model runs (which made a write to such a row wait for the
-- whole pass: seconds). A claim is taken and released in short transactions; a row whose lease
-- has run out (its process died) may be claimed again. A claim never changes `version`, so it
-- writes nothing to the change logs or the history.
ALTER TABLE entries ADD COLUMN IF NOT EXISTS embedding_claim timestamptz;
ALTER TABLE transcript_items ADD COLUMN IF NOT EXISTS embedding_claim timestamptz;
