-- Entry provenance from transcripts: "this entry was written from these items of that conversation
-- (or session)". The target is named by id and key, as in entry_lineage; the source by kind, store
-- id, scope (a conversation's scope, a session's actor) and thread id (the conversation id, the
-- session id), so an edge outlives the entry, the thread and the store and shows them deleted.
-- One row per entry and thread: a later change from the same thread adds its item ids to the row
-- (in first-seen order); an empty list means the whole thread and absorbs any other.
CREATE TABLE IF NOT EXISTS transcript_lineage (
    target_entry_id uuid NOT NULL,
    target_store_id uuid NOT NULL,
    target_scope text NOT NULL,
    target_session_id text NOT NULL,
    target_path text NOT NULL,
    source_kind text NOT NULL CHECK (source_kind IN ('conversation', 'session')),
    source_store_id uuid NOT NULL,
    source_scope text NOT NULL,
    source_thread_id text NOT NULL,
    source_item_ids text[] NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text NOT NULL,
    PRIMARY KEY (target_entry_id, source_kind, source_store_id, source_thread_id)
);
-- a store's edges (lineage of a whole store; erasing a scope in one store) at either end
CREATE INDEX IF NOT EXISTS transcript_lineage_target_store ON transcript_lineage (target_store_id, target_scope);
CREATE INDEX IF NOT EXISTS transcript_lineage_source_store ON transcript_lineage (source_store_id, source_scope);
-- erasing a scope in every store
CREATE INDEX IF NOT EXISTS transcript_lineage_target_scope ON transcript_lineage (target_scope);
CREATE INDEX IF NOT EXISTS transcript_lineage_source_scope ON transcript_lineage (source_scope);

-- Erasing a scope now deletes the entry-to-entry edges at either end of it too.
CREATE INDEX IF NOT EXISTS entry_lineage_target_scope ON entry_lineage (target_scope);
CREATE INDEX IF NOT EXISTS entry_lineage_source_scope ON entry_lineage (source_scope);

-- For auditors' SQL clients: the transcript edges with the stores' names (NULL once a store is
-- deleted), readable by catalog_auditor like the other views of schema `system`.
CREATE OR REPLACE VIEW system.transcript_lineage AS
SELECT l.target_entry_id,
       (SELECT c.name || '.' || s.name || '.' || m.name FROM public.memory_stores m
        JOIN public.schemas s ON s.id = m.schema_id JOIN public.catalogs c ON c.id = s.catalog_id
        WHERE m.id = l.target_store_id) AS target_memory_store,
       l.target_store_id, l.target_scope, l.target_session_id, l.target_path,
       l.source_kind,
       (SELECT c.name || '.' || s.name || '.' || m.name FROM public.memory_stores m
        JOIN public.schemas s ON s.id = m.schema_id JOIN public.catalogs c ON c.id = s.catalog_id
        WHERE m.id = l.source_store_id) AS source_store,
       l.source_store_id, l.source_scope, l.source_thread_id, l.source_item_ids,
       l.created_at, l.created_by, l.updated_at, l.updated_by
FROM public.transcript_lineage l;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'catalog_auditor') THEN
        GRANT SELECT ON system.transcript_lineage TO catalog_auditor;
    END IF;
END $$;
