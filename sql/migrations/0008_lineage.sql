-- Entry provenance: "this entry was derived from those". Edges are kept when entries change or
-- go (a deleted source is shown as deleted), so they name entries by key as well as by id.
CREATE TABLE IF NOT EXISTS entry_lineage (
    target_entry_id uuid NOT NULL,
    target_store_id uuid NOT NULL,
    target_scope text NOT NULL,
    target_session_id text NOT NULL,
    target_path text NOT NULL,
    source_entry_id uuid NOT NULL,
    source_store_id uuid NOT NULL,
    source_scope text NOT NULL,
    source_session_id text NOT NULL,
    source_path text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by text NOT NULL,
    PRIMARY KEY (target_entry_id, source_entry_id)
);
CREATE INDEX IF NOT EXISTS entry_lineage_source ON entry_lineage (source_entry_id);
CREATE INDEX IF NOT EXISTS entry_lineage_target_store ON entry_lineage (target_store_id);
CREATE INDEX IF NOT EXISTS entry_lineage_source_store ON entry_lineage (source_store_id);
