-- Shard keys: every table that holds a store's data is keyed by its store, so the schema can be
-- distributed by store with Citus (catalog/db/sharding.py names every table's place; the rule is
-- checked by tests/test_sharding.py): a distributed table's primary key and unique keys hold its
-- distribution column, and a foreign key between two distributed tables goes through it on both
-- sides. The distribution column is the store's id: `store_id`, or `target_store_id` for the
-- lineage edges (an edge belongs to the store of the entry it explains); the conversations'
-- directory (`conversation_stores`) is distributed by conversation id.
--
-- What changes:
-- - the item tables (`conversation_items`, `session_items`), the extraction marks and the change
--   logs (`entry_changes`, `transcript_changes`) get a `store_id` column, filled from their parent
--   rows (a change row of a row that no longer exists is resolved through the history, else it
--   goes and the log's prune mark rises past it: an index that had not read it is rebuilt from the
--   tables, as after any pruning, see catalog/search/indexer.py);
-- - primary and unique keys lead with the store; the foreign keys from items to their
--   conversation or session, and from extraction marks to their session, go by (store, id);
-- - lookups that do not know the store (background work: the indexer, the embedding worker, the
--   pipelines' worker; lineage walks) keep an index on the id alone;
-- - `conversation_stores` tells a conversation's store from its id alone (the OpenAI API names a
--   conversation by id), so every statement after that lookup names the store;
-- - the triggers write and join through the store.
-- Rewriting the keys rebuilds their indexes: on a large database this takes a while, in one
-- transaction like every migration.

-- helpers of this migration (pg_temp: gone with the connection, dropped at the end anyway)
CREATE OR REPLACE FUNCTION pg_temp.columns_of(tbl regclass, attnums smallint[]) RETURNS text[]
LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(a.attname::text ORDER BY k.o), '{}')
    FROM unnest(attnums) WITH ORDINALITY AS k (n, o)
    JOIN pg_attribute a ON a.attrelid = tbl AND a.attnum = k.n
$$;

-- A primary key or unique constraint named `con` on exactly `cols` (replacing one of that name on
-- other columns); nothing when it is there already.
CREATE OR REPLACE FUNCTION pg_temp.shard_key(tbl regclass, con text, kind text, cols text[]) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM pg_constraint c
        WHERE c.conrelid = tbl AND c.conname = con
            AND c.contype = CASE kind WHEN 'PRIMARY KEY' THEN 'p' ELSE 'u' END
            AND pg_temp.columns_of(tbl, c.conkey) = cols
    ) THEN
        RETURN;
    END IF;
    EXECUTE format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS %I', tbl, con);
    EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I %s (%s)', tbl, con, kind,
        (SELECT string_agg(quote_ident(c), ', ' ORDER BY o) FROM unnest(cols) WITH ORDINALITY AS u (c, o)));
END $$;

-- A foreign key named `con` from `cols` to `target (target_cols)`, ON DELETE CASCADE.
CREATE OR REPLACE FUNCTION pg_temp.shard_reference(
    tbl regclass, con text, cols text[], target regclass, target_cols text[]
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM pg_constraint c
        WHERE c.conrelid = tbl AND c.conname = con AND c.contype = 'f' AND c.confrelid = target
            AND pg_temp.columns_of(tbl, c.conkey) = cols
            AND pg_temp.columns_of(target, c.confkey) = target_cols
    ) THEN
        RETURN;
    END IF;
    EXECUTE format('ALTER TABLE %s DROP CONSTRAINT IF EXISTS %I', tbl, con);
    EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I FOREIGN KEY (%s) REFERENCES %s (%s) ON DELETE CASCADE',
        tbl, con,
        (SELECT string_agg(quote_ident(c), ', ' ORDER BY o) FROM unnest(cols) WITH ORDINALITY AS u (c, o)),
        target,
        (SELECT string_agg(quote_ident(c), ', ' ORDER BY o) FROM unnest(target_cols) WITH ORDINALITY AS u (c, o)));
END $$;

-- 1. The foreign keys on the ids alone go first (they hold the old primary keys).
ALTER TABLE conversation_items DROP CONSTRAINT IF EXISTS conversation_items_conversation_id_fkey;
ALTER TABLE session_items DROP CONSTRAINT IF EXISTS session_items_session_fkey;
ALTER TABLE extraction_marks DROP CONSTRAINT IF EXISTS extraction_marks_session_fkey;

-- 2. The store of every row, from its parent.
ALTER TABLE conversation_items ADD COLUMN IF NOT EXISTS store_id uuid;
UPDATE conversation_items i SET store_id = c.store_id
FROM conversations c WHERE i.store_id IS NULL AND c.id = i.conversation_id;
ALTER TABLE conversation_items ALTER COLUMN store_id SET NOT NULL;

ALTER TABLE session_items ADD COLUMN IF NOT EXISTS store_id uuid;
UPDATE session_items i SET store_id = s.store_id
FROM agent_sessions s WHERE i.store_id IS NULL AND s.id = i.session;
ALTER TABLE session_items ALTER COLUMN store_id SET NOT NULL;

-- the session's store (the session store), beside the memory store the mark is for
ALTER TABLE extraction_marks ADD COLUMN IF NOT EXISTS store_id uuid;
UPDATE extraction_marks m SET store_id = s.store_id
FROM agent_sessions s WHERE m.store_id IS NULL AND s.id = m.session;
ALTER TABLE extraction_marks ALTER COLUMN store_id SET NOT NULL;

ALTER TABLE entry_changes ADD COLUMN IF NOT EXISTS store_id uuid;
UPDATE entry_changes c SET store_id = e.store_id
FROM entries e WHERE c.store_id IS NULL AND e.id = c.entry_id;
UPDATE entry_changes c SET store_id = v.store_id  -- deleted since: its history names the store
FROM (SELECT DISTINCT ON (entry_id) entry_id, store_id FROM entry_versions ORDER BY entry_id, seq DESC) v
WHERE c.store_id IS NULL AND v.entry_id = c.entry_id;
-- what is left names an entry whose history went too (an erased scope, a deleted store): the rows
-- go, and the prune mark rises past them
INSERT INTO change_log_pruned AS p (changes, up_to)
SELECT 'entry_changes', max(seq) FROM entry_changes WHERE store_id IS NULL HAVING count(*) > 0
ON CONFLICT (changes) DO UPDATE SET up_to = greatest(p.up_to, excluded.up_to);
DELETE FROM entry_changes WHERE store_id IS NULL;
ALTER TABLE entry_changes ALTER COLUMN store_id SET NOT NULL;

ALTER TABLE transcript_changes ADD COLUMN IF NOT EXISTS store_id uuid;
UPDATE transcript_changes c SET store_id = t.store_id
FROM transcript_items t WHERE c.store_id IS NULL AND t.id = c.item_id;
INSERT INTO change_log_pruned AS p (changes, up_to)
SELECT 'transcript_changes', max(seq) FROM transcript_changes WHERE store_id IS NULL HAVING count(*) > 0
ON CONFLICT (changes) DO UPDATE SET up_to = greatest(p.up_to, excluded.up_to);
DELETE FROM transcript_changes WHERE store_id IS NULL;
ALTER TABLE transcript_changes ALTER COLUMN store_id SET NOT NULL;

-- 3. Primary and unique keys that lead with the store.
SELECT pg_temp.shard_key('entries', 'entries_pkey', 'PRIMARY KEY', ARRAY['store_id', 'id']);
SELECT pg_temp.shard_key('entry_versions', 'entry_versions_pkey', 'PRIMARY KEY', ARRAY['store_id', 'seq']);
SELECT pg_temp.shard_key('entry_changes', 'entry_changes_pkey', 'PRIMARY KEY', ARRAY['store_id', 'seq']);
SELECT pg_temp.shard_key('conversations', 'conversations_pkey', 'PRIMARY KEY', ARRAY['store_id', 'id']);
SELECT pg_temp.shard_key('conversation_items', 'conversation_items_pkey', 'PRIMARY KEY',
    ARRAY['store_id', 'conversation_id', 'position']);
ALTER TABLE conversation_items DROP CONSTRAINT IF EXISTS conversation_items_conversation_id_id_key;
SELECT pg_temp.shard_key('conversation_items', 'conversation_items_store_id_conversation_id_id_key', 'UNIQUE',
    ARRAY['store_id', 'conversation_id', 'id']);
SELECT pg_temp.shard_key('agent_sessions', 'agent_sessions_pkey', 'PRIMARY KEY', ARRAY['store_id', 'id']);
SELECT pg_temp.shard_key('session_items', 'session_items_pkey', 'PRIMARY KEY',
    ARRAY['store_id', 'session', 'position']);
ALTER TABLE session_items DROP CONSTRAINT IF EXISTS session_items_item_id_key;
SELECT pg_temp.shard_key('session_items', 'session_items_store_id_item_id_key', 'UNIQUE',
    ARRAY['store_id', 'item_id']);
SELECT pg_temp.shard_key('extraction_marks', 'extraction_marks_pkey', 'PRIMARY KEY',
    ARRAY['store_id', 'session', 'memory_store_id']);
SELECT pg_temp.shard_key('transcript_items', 'transcript_items_pkey', 'PRIMARY KEY', ARRAY['store_id', 'id']);
ALTER TABLE transcript_items DROP CONSTRAINT IF EXISTS transcript_items_source_thread_id_item_id_key;
SELECT pg_temp.shard_key('transcript_items', 'transcript_items_store_id_source_thread_id_item_id_key', 'UNIQUE',
    ARRAY['store_id', 'source', 'thread_id', 'item_id']);
SELECT pg_temp.shard_key('transcript_changes', 'transcript_changes_pkey', 'PRIMARY KEY',
    ARRAY['store_id', 'seq']);
SELECT pg_temp.shard_key('entry_lineage', 'entry_lineage_pkey', 'PRIMARY KEY',
    ARRAY['target_store_id', 'target_entry_id', 'source_entry_id']);
SELECT pg_temp.shard_key('transcript_lineage', 'transcript_lineage_pkey', 'PRIMARY KEY',
    ARRAY['target_store_id', 'target_entry_id', 'source_kind', 'source_store_id', 'source_thread_id']);

-- 4. Foreign keys between a store's tables, through the store.
SELECT pg_temp.shard_reference('conversation_items', 'conversation_items_store_id_conversation_id_fkey',
    ARRAY['store_id', 'conversation_id'], 'conversations', ARRAY['store_id', 'id']);
SELECT pg_temp.shard_reference('session_items', 'session_items_store_id_session_fkey',
    ARRAY['store_id', 'session'], 'agent_sessions', ARRAY['store_id', 'id']);
SELECT pg_temp.shard_reference('extraction_marks', 'extraction_marks_store_id_session_fkey',
    ARRAY['store_id', 'session'], 'agent_sessions', ARRAY['store_id', 'id']);

-- 5. Lookups by id alone (background work, lineage walks) and the change logs read in seq order.
CREATE INDEX IF NOT EXISTS entries_id ON entries (id);
CREATE INDEX IF NOT EXISTS transcript_items_id ON transcript_items (id);
CREATE INDEX IF NOT EXISTS agent_sessions_id ON agent_sessions (id);
CREATE INDEX IF NOT EXISTS entry_changes_seq ON entry_changes (seq);
CREATE INDEX IF NOT EXISTS transcript_changes_seq ON transcript_changes (seq);
CREATE INDEX IF NOT EXISTS entry_lineage_target ON entry_lineage (target_entry_id);
CREATE INDEX IF NOT EXISTS transcript_lineage_target ON transcript_lineage (target_entry_id);

-- 6. A conversation's store from its id alone; kept by catalog/dialects/conversations/repo.py in
-- the transaction that creates or deletes the conversation, and gone with the store.
CREATE TABLE IF NOT EXISTS conversation_stores (
    conversation_id text PRIMARY KEY,
    store_id uuid NOT NULL REFERENCES memory_stores (id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS conversation_stores_store ON conversation_stores (store_id);
INSERT INTO conversation_stores (conversation_id, store_id)
SELECT id, store_id FROM conversations ON CONFLICT DO NOTHING;

-- 7. The triggers, writing and joining through the store (each touches only rows of the store of
-- the row that fired it, and reads memory_stores).
CREATE OR REPLACE FUNCTION entries_log_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO entry_changes (store_id, entry_id, op) VALUES (OLD.store_id, OLD.id, 'delete');
        RETURN OLD;
    END IF;
    INSERT INTO entry_changes (store_id, entry_id, op) VALUES (NEW.store_id, NEW.id, 'upsert');
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION transcript_items_log_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO transcript_changes (store_id, item_id, op)
    SELECT store_id, id, 'upsert' FROM added ORDER BY position;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION transcript_items_log_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO transcript_changes (store_id, item_id, op) SELECT store_id, id, 'delete' FROM removed;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION conversation_items_transcript_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO transcript_items
        (store_id, scope, source, thread_id, item_id, position, path, contents, created_at)
    SELECT c.store_id, c.scope, 'conversation', c.id, n.id, n.position, coalesce(n.item ->> 'role', ''),
        n.text, n.created_at
    FROM added n JOIN conversations c ON c.store_id = n.store_id AND c.id = n.conversation_id
    WHERE n.type = 'message' AND nullif(btrim(n.text), '') IS NOT NULL
    ORDER BY n.position
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION conversation_items_transcript_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM transcript_items t USING removed r
        WHERE t.store_id = r.store_id AND t.source = 'conversation' AND t.thread_id = r.conversation_id
            AND t.item_id = r.id;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION session_items_transcript_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO transcript_items
        (store_id, scope, source, thread_id, item_id, position, path, contents, created_at)
    SELECT s.store_id, s.actor_id, 'session', s.session_id, n.item_id::text, n.position,
        n.data ->> 'role', t.body, n.created_at
    FROM added n JOIN agent_sessions s ON s.store_id = n.store_id AND s.id = n.session
        CROSS JOIN LATERAL (SELECT transcript_text(n.data) AS body) t
    WHERE t.body IS NOT NULL
    ORDER BY n.position
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE OR REPLACE FUNCTION session_items_transcript_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM transcript_items t USING removed r
        WHERE t.store_id = r.store_id AND t.source = 'session' AND t.item_id = r.item_id::text;
    RETURN NULL;
END $$;

-- the history trigger of migrations 0020 and 0024, its pruning held to the entry's store
CREATE OR REPLACE FUNCTION entries_keep_version() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    kept bigint;
    days bigint;
    row_ entries%ROWTYPE;
    op text;
    who text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        -- the store itself is being deleted (a cascade), or the entry's scope is being erased: its
        -- history goes with it, so no deletion is recorded
        IF current_setting('catalog.erasing', true) = 'on'
            OR NOT EXISTS (SELECT 1 FROM memory_stores WHERE id = OLD.store_id) THEN
            RETURN NULL;
        END IF;
        row_ := OLD;
        op := 'delete';
        who := coalesce(nullif(current_setting('catalog.principal', true), ''), OLD.updated_by);
    ELSE
        row_ := NEW;
        op := coalesce(nullif(current_setting('catalog.operation', true), ''),
                       CASE WHEN TG_OP = 'INSERT' THEN 'create' ELSE 'update' END);
        who := NEW.updated_by;
    END IF;
    INSERT INTO entry_versions (store_id, scope, session_id, path, entry_id, version, contents,
                                description, metadata, operation, changed_by)
    VALUES (row_.store_id, row_.scope, row_.session_id, row_.path, row_.id,
            CASE WHEN op = 'delete' THEN row_.version + 1 ELSE row_.version END,
            CASE WHEN op = 'delete' THEN NULL ELSE row_.contents END,
            CASE WHEN op = 'delete' THEN NULL ELSE row_.description END,
            CASE WHEN op = 'delete' THEN NULL ELSE row_.metadata END, op, who);
    IF row_.version % 10 = 0 OR op = 'delete' THEN
        -- a property that is not a whole number is ignored (properties are free strings)
        SELECT CASE WHEN properties ->> 'history.max_versions' ~ '^[0-9]{1,9}$'
                    THEN (properties ->> 'history.max_versions')::bigint ELSE 100 END,
               CASE WHEN properties ->> 'history.retention_days' ~ '^[0-9]{1,6}$'
                    THEN (properties ->> 'history.retention_days')::bigint END
            INTO kept, days FROM memory_stores WHERE id = row_.store_id;
        DELETE FROM entry_versions v
        WHERE v.store_id = row_.store_id AND v.scope = row_.scope AND v.session_id = row_.session_id
            AND v.path = row_.path
            AND (v.seq IN (
                    SELECT seq FROM entry_versions
                    WHERE store_id = row_.store_id AND scope = row_.scope AND session_id = row_.session_id
                        AND path = row_.path
                    ORDER BY seq DESC OFFSET greatest(kept, 1))
                OR (days IS NOT NULL AND v.changed_at < clock_timestamp() - make_interval(days => days::int)));
    END IF;
    RETURN NULL;
END $$;

DROP FUNCTION pg_temp.shard_reference(regclass, text, text[], regclass, text[]);
DROP FUNCTION pg_temp.shard_key(regclass, text, text, text[]);
DROP FUNCTION pg_temp.columns_of(regclass, smallint[]);
