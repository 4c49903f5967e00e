-- Consolidation: an entry may be superseded by another (`superseded`), or merged into another
-- (`merged`); `active` otherwise. Lists and searches leave the others out unless asked.
ALTER TABLE entries ADD COLUMN IF NOT EXISTS state text NOT NULL DEFAULT 'active';
ALTER TABLE entries DROP CONSTRAINT IF EXISTS entries_state_check;
ALTER TABLE entries ADD CONSTRAINT entries_state_check CHECK (state IN ('active', 'superseded', 'merged'));
-- the entry (of the same store) that supersedes this one, or that it was merged into
ALTER TABLE entries ADD COLUMN IF NOT EXISTS superseded_by uuid;
