-- A legal hold on a store: while it is set, nothing of the store's entries may be deleted or have
-- text removed (deletes, destructive edits, erasure, expiry sweeps), nor the store itself.
ALTER TABLE memory_stores ADD COLUMN IF NOT EXISTS legal_hold boolean NOT NULL DEFAULT false;
