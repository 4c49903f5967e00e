-- Memory extraction: per session and memory store, a digest of the items the last extraction read,
-- so that extracting an unchanged session again does nothing and a pipeline run picks the
-- sessions that changed since.
CREATE TABLE IF NOT EXISTS extraction_marks (
    session uuid NOT NULL REFERENCES agent_sessions (id) ON DELETE CASCADE,
    memory_store_id uuid NOT NULL REFERENCES memory_stores (id) ON DELETE CASCADE,
    items_digest text NOT NULL,
    extracted_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    extracted_by text NOT NULL,
    PRIMARY KEY (session, memory_store_id)
);
CREATE INDEX IF NOT EXISTS extraction_marks_store ON extraction_marks (memory_store_id);
