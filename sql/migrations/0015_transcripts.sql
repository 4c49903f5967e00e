-- Transcripts as episodic memory: the text of conversation and session items, searchable like
-- entries (keyword through Tantivy, semantic through pgvector) by the same search engine. The
-- rows are derived from the item tables by triggers, in the writing transaction, so no write path
-- (append, fork, pop, clear, delete, cascades, erasure) can leave them out of step.
--
-- The searchable columns are named as in `entries` (catalog.search.corpus): `session_id` is
-- `conversation:<conversation id>` or `session:<session id>`, `path` the item's role, `contents`
-- its text. Items are never edited, so `version` stays 1.

CREATE TABLE IF NOT EXISTS transcript_items (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    store_id uuid NOT NULL REFERENCES memory_stores (id) ON DELETE CASCADE,
    scope text NOT NULL,  -- the conversation's scope, the session's actor
    source text NOT NULL CHECK (source IN ('conversation', 'session')),
    thread_id text NOT NULL,  -- the conversation id or the session id
    session_id text GENERATED ALWAYS AS (source || ':' || thread_id) STORED,
    item_id text NOT NULL,
    position bigint NOT NULL,
    path text NOT NULL,  -- the role (user, assistant, system, developer)
    contents text NOT NULL,
    description text,
    created_at timestamptz NOT NULL,
    version bigint NOT NULL DEFAULT 1,
    embedding vector(384),
    embedded_version bigint,
    UNIQUE (source, thread_id, item_id)
);
CREATE INDEX IF NOT EXISTS transcript_items_scope ON transcript_items (store_id, scope);
CREATE INDEX IF NOT EXISTS transcript_items_embedding_hnsw
    ON transcript_items USING hnsw (embedding vector_cosine_ops);
CREATE INDEX IF NOT EXISTS transcript_items_unembedded ON transcript_items (store_id, scope)
    WHERE embedded_version IS DISTINCT FROM version;

CREATE TABLE IF NOT EXISTS transcript_changes (
    seq bigserial PRIMARY KEY,
    item_id uuid NOT NULL,
    op text NOT NULL CHECK (op IN ('upsert', 'delete')),
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Statement-level triggers with transition tables: one statement per append (of up to 100 items)
-- instead of one per item.
CREATE OR REPLACE FUNCTION transcript_items_log_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO transcript_changes (item_id, op) SELECT id, 'upsert' FROM added ORDER BY position;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION transcript_items_log_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO transcript_changes (item_id, op) SELECT id, 'delete' FROM removed;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS transcript_items_insert_log ON transcript_items;
CREATE TRIGGER transcript_items_insert_log AFTER INSERT ON transcript_items
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION transcript_items_log_insert();
DROP TRIGGER IF EXISTS transcript_items_delete_log ON transcript_items;
CREATE TRIGGER transcript_items_delete_log AFTER DELETE ON transcript_items
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION transcript_items_log_delete();

-- The text of a message item as OpenAI shapes it (`content` a string, or parts whose `text` is
-- kept: input_text, output_text, text), for session items, which are kept as sent; NULL for
-- anything else (function calls, checkpoints, ...) and for a message without text.
CREATE OR REPLACE FUNCTION transcript_text(item jsonb) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT nullif(btrim(CASE
        WHEN jsonb_typeof(item) <> 'object' OR jsonb_typeof(item -> 'role') <> 'string'
            OR coalesce(item ->> 'type', 'message') <> 'message' THEN NULL
        WHEN jsonb_typeof(item -> 'content') = 'string' THEN item ->> 'content'
        WHEN jsonb_typeof(item -> 'content') = 'array' THEN (
            SELECT string_agg(part ->> 'text', E'\n' ORDER BY n)
            FROM jsonb_array_elements(item -> 'content') WITH ORDINALITY AS parts (part, n)
            WHERE jsonb_typeof(part) = 'object' AND jsonb_typeof(part -> 'text') = 'string'
                AND coalesce(part ->> 'type', 'text') IN ('input_text', 'output_text', 'text'))
    END), '')
$$;

CREATE OR REPLACE FUNCTION conversation_items_transcript_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO transcript_items
        (store_id, scope, source, thread_id, item_id, position, path, contents, created_at)
    SELECT c.store_id, c.scope, 'conversation', c.id, n.id, n.position, coalesce(n.item ->> 'role', ''),
        n.text, n.created_at
    FROM added n JOIN conversations c ON c.id = n.conversation_id
    WHERE n.type = 'message' AND nullif(btrim(n.text), '') IS NOT NULL
    ORDER BY n.position
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION conversation_items_transcript_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM transcript_items t USING removed r
        WHERE t.source = 'conversation' AND t.thread_id = r.conversation_id AND t.item_id = r.id;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS conversation_items_transcript_insert ON conversation_items;
CREATE TRIGGER conversation_items_transcript_insert AFTER INSERT ON conversation_items
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION conversation_items_transcript_insert();
DROP TRIGGER IF EXISTS conversation_items_transcript_delete ON conversation_items;
CREATE TRIGGER conversation_items_transcript_delete AFTER DELETE ON conversation_items
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION conversation_items_transcript_delete();

CREATE OR REPLACE FUNCTION session_items_transcript_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO transcript_items
        (store_id, scope, source, thread_id, item_id, position, path, contents, created_at)
    SELECT s.store_id, s.actor_id, 'session', s.session_id, n.item_id::text, n.position,
        n.data ->> 'role', t.body, n.created_at
    FROM added n JOIN agent_sessions s ON s.id = n.session
        CROSS JOIN LATERAL (SELECT transcript_text(n.data) AS body) t
    WHERE t.body IS NOT NULL
    ORDER BY n.position
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION session_items_transcript_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM transcript_items t USING removed r
        WHERE t.source = 'session' AND t.item_id = r.item_id::text;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS session_items_transcript_insert ON session_items;
CREATE TRIGGER session_items_transcript_insert AFTER INSERT ON session_items
    REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION session_items_transcript_insert();
DROP TRIGGER IF EXISTS session_items_transcript_delete ON session_items;
CREATE TRIGGER session_items_transcript_delete AFTER DELETE ON session_items
    REFERENCING OLD TABLE AS removed FOR EACH STATEMENT EXECUTE FUNCTION session_items_transcript_delete();
CREATE INDEX IF NOT EXISTS transcript_items_session_item ON transcript_items (item_id) WHERE source = 'session';

-- what was appended before this migration
INSERT INTO transcript_items (store_id, scope, source, thread_id, item_id, position, path, contents, created_at)
SELECT c.store_id, c.scope, 'conversation', c.id, i.id, i.position, coalesce(i.item ->> 'role', ''), i.text,
    i.created_at
FROM conversation_items i JOIN conversations c ON c.id = i.conversation_id
WHERE i.type = 'message' AND nullif(btrim(i.text), '') IS NOT NULL
ON CONFLICT DO NOTHING;

INSERT INTO transcript_items (store_id, scope, source, thread_id, item_id, position, path, contents, created_at)
SELECT s.store_id, s.actor_id, 'session', s.session_id, i.item_id::text, i.position, i.data ->> 'role',
    transcript_text(i.data), i.created_at
FROM session_items i JOIN agent_sessions s ON s.id = i.session
WHERE transcript_text(i.data) IS NOT NULL
ON CONFLICT DO NOTHING;
