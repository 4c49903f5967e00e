-- Memory entries, their embeddings (pgvector: the source of truth for vectors), and the change
-- log that every process's full-text indexer tails.

CREATE TABLE IF NOT EXISTS entries (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    store_id uuid NOT NULL REFERENCES memory_stores (id) ON DELETE CASCADE,
    scope text NOT NULL,
    session_id text NOT NULL DEFAULT '',  -- '' is "no session": one key space of its own
    path text NOT NULL,
    contents text,
    description text,
    source_type text,
    version bigint NOT NULL DEFAULT 1,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    created_by text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_by text NOT NULL,
    embedding vector(384),
    embedded_version bigint,  -- the version `embedding` was computed from
    UNIQUE (store_id, scope, session_id, path)
);
CREATE INDEX IF NOT EXISTS entries_scope_path ON entries (store_id, scope, path text_pattern_ops);
CREATE INDEX IF NOT EXISTS entries_embedding_hnsw ON entries USING hnsw (embedding vector_cosine_ops);
-- entries waiting for their vector: small, and what searches check for read-your-writes
CREATE INDEX IF NOT EXISTS entries_unembedded ON entries (store_id, scope)
    WHERE embedded_version IS DISTINCT FROM version;

-- One row per change of an entry's searchable state (insert, new version, delete), written by
-- trigger in the writing transaction, so that no write path (cascades included) is missed.
CREATE TABLE IF NOT EXISTS entry_changes (
    seq bigserial PRIMARY KEY,
    entry_id uuid NOT NULL,
    op text NOT NULL CHECK (op IN ('upsert', 'delete')),
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE OR REPLACE FUNCTION entries_log_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO entry_changes (entry_id, op) VALUES (OLD.id, 'delete');
        RETURN OLD;
    END IF;
    INSERT INTO entry_changes (entry_id, op) VALUES (NEW.id, 'upsert');
    RETURN NEW;
END $$;

DROP TRIGGER IF EXISTS entries_insert_log ON entries;
CREATE TRIGGER entries_insert_log AFTER INSERT ON entries FOR EACH ROW EXECUTE FUNCTION entries_log_change();
DROP TRIGGER IF EXISTS entries_update_log ON entries;
CREATE TRIGGER entries_update_log AFTER UPDATE ON entries
    FOR EACH ROW WHEN (OLD.version IS DISTINCT FROM NEW.version) EXECUTE FUNCTION entries_log_change();
DROP TRIGGER IF EXISTS entries_delete_log ON entries;
CREATE TRIGGER entries_delete_log AFTER DELETE ON entries FOR EACH ROW EXECUTE FUNCTION entries_log_change();
