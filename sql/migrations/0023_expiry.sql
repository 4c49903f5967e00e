-- Expiry: an entry with `expires_at` in the past is gone at once from every read (the reads filter
-- on it) and deleted from storage by the background sweep; a store's `default_ttl_seconds`
-- applies to writes that name no `ttl_seconds`.
ALTER TABLE entries ADD COLUMN IF NOT EXISTS expires_at timestamptz;
CREATE INDEX IF NOT EXISTS entries_expiry ON entries (expires_at) WHERE expires_at IS NOT NULL;
ALTER TABLE memory_stores ADD COLUMN IF NOT EXISTS default_ttl_seconds integer;
