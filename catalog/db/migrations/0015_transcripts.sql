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

CREATE OR REPLACE FUNCTION transcript_items_log_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO transcript_changes (item_id, op) VALUES (OLD.id, 'delete');
        RETURN OLD;
    END IF;
    INSERT INTO transcript_changes (item_id, op) VALUES (NEW.id, 'upsert');
    RETURN NEW;
END $$;

DROP TRIGGER IF EXISTS transcript_items_insert_log ON transcript_items;
CREATE TRIGGER transcript_items_insert_log AFTER INSERT ON transcript_items
    FOR EACH ROW EXECUTE FUNCTION transcript_items_log_change();
DROP TRIGGER IF EXISTS transcript_items_delete_log ON transcript_items;
CREATE TRIGGER transcript_items_delete_log AFTER DELETE ON transcript_items
    FOR EACH ROW EXECUTE FUNCTION transcript_items_log_change();

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

CREATE OR REPLACE FUNCTION conversation_items_transcript() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM transcript_items
            WHERE source = 'conversation' AND thread_id = OLD.conversation_id AND item_id = OLD.id;
        RETURN OLD;
    END IF;
    IF NEW.type = 'message' AND nullif(btrim(NEW.text), '') IS NOT NULL THEN
        INSERT INTO transcript_items
            (store_id, scope, source, thread_id, item_id, position, path, contents, created_at)
        SELECT c.store_id, c.scope, 'conversation', c.id, NEW.id, NEW.position,
            coalesce(NEW.item ->> 'role', ''), NEW.text, NEW.created_at
        FROM conversations c WHERE c.id = NEW.conversation_id
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NEW;
END $$;

DROP TRIGGER IF EXISTS conversation_items_transcript_insert ON conversation_items;
CREATE TRIGGER conversation_items_transcript_insert AFTER INSERT ON conversation_items
    FOR EACH ROW EXECUTE FUNCTION conversation_items_transcript();
DROP TRIGGER IF EXISTS conversation_items_transcript_delete ON conversation_items;
CREATE TRIGGER conversation_items_transcript_delete AFTER DELETE ON conversation_items
    FOR EACH ROW EXECUTE FUNCTION conversation_items_transcript();

CREATE OR REPLACE FUNCTION session_items_transcript() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    body text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        DELETE FROM transcript_items WHERE source = 'session' AND item_id = OLD.item_id::text;
        RETURN OLD;
    END IF;
    body := transcript_text(NEW.data);
    IF body IS NOT NULL THEN
        INSERT INTO transcript_items
            (store_id, scope, source, thread_id, item_id, position, path, contents, created_at)
        SELECT s.store_id, s.actor_id, 'session', s.session_id, NEW.item_id::text, NEW.position,
            NEW.data ->> 'role', body, NEW.created_at
        FROM agent_sessions s WHERE s.id = NEW.session
        ON CONFLICT DO NOTHING;
    END IF;
    RETURN NEW;
END $$;

DROP TRIGGER IF EXISTS session_items_transcript_insert ON session_items;
CREATE TRIGGER session_items_transcript_insert AFTER INSERT ON session_items
    FOR EACH ROW EXECUTE FUNCTION session_items_transcript();
DROP TRIGGER IF EXISTS session_items_transcript_delete ON session_items;
CREATE TRIGGER session_items_transcript_delete AFTER DELETE ON session_items
    FOR EACH ROW EXECUTE FUNCTION session_items_transcript();
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
