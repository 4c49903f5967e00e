-- Entry history: every version of an entry (its contents and description as written, the
-- operation, who and when), kept by triggers in the writing transaction, so no write path is
-- missed. Rows are keyed by the entry's key, so a path deleted and written again keeps one
-- history. Bounds per store (its properties): `history.max_versions` (default 100, pruned every
-- tenth version) and `history.retention_days` (default: no limit).
CREATE TABLE IF NOT EXISTS entry_versions (
    seq bigserial PRIMARY KEY,
    store_id uuid NOT NULL REFERENCES memory_stores (id) ON DELETE CASCADE,
    scope text NOT NULL,
    session_id text NOT NULL,
    path text NOT NULL,
    entry_id uuid NOT NULL,
    version bigint NOT NULL,
    contents text,
    description text,
    operation text NOT NULL CHECK (operation IN ('create', 'update', 'restore', 'delete')),
    changed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    changed_by text NOT NULL
);
CREATE INDEX IF NOT EXISTS entry_versions_key ON entry_versions (store_id, scope, session_id, path, seq DESC);
-- erasure of a scope in every store
CREATE INDEX IF NOT EXISTS entry_versions_scope ON entry_versions (scope);

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
                                description, operation, changed_by)
    VALUES (row_.store_id, row_.scope, row_.session_id, row_.path, row_.id,
            CASE WHEN op = 'delete' THEN row_.version + 1 ELSE row_.version END,
            CASE WHEN op = 'delete' THEN NULL ELSE row_.contents END,
            CASE WHEN op = 'delete' THEN NULL ELSE row_.description END, op, who);
    IF row_.version % 10 = 0 OR op = 'delete' THEN
        -- a property that is not a whole number is ignored (properties are free strings)
        SELECT CASE WHEN properties ->> 'history.max_versions' ~ '^[0-9]{1,9}$'
                    THEN (properties ->> 'history.max_versions')::bigint ELSE 100 END,
               CASE WHEN properties ->> 'history.retention_days' ~ '^[0-9]{1,6}$'
                    THEN (properties ->> 'history.retention_days')::bigint END
            INTO kept, days FROM memory_stores WHERE id = row_.store_id;
        DELETE FROM entry_versions v WHERE v.seq IN (
            SELECT seq FROM entry_versions
            WHERE store_id = row_.store_id AND scope = row_.scope AND session_id = row_.session_id
                AND path = row_.path
            ORDER BY seq DESC OFFSET greatest(kept, 1))
            OR (days IS NOT NULL AND v.store_id = row_.store_id AND v.scope = row_.scope
                AND v.session_id = row_.session_id AND v.path = row_.path
                AND v.changed_at < clock_timestamp() - make_interval(days => days::int));
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS entries_history_insert ON entries;
CREATE TRIGGER entries_history_insert AFTER INSERT ON entries
    FOR EACH ROW EXECUTE FUNCTION entries_keep_version();
DROP TRIGGER IF EXISTS entries_history_update ON entries;
CREATE TRIGGER entries_history_update AFTER UPDATE ON entries
    FOR EACH ROW WHEN (OLD.version IS DISTINCT FROM NEW.version) EXECUTE FUNCTION entries_keep_version();
DROP TRIGGER IF EXISTS entries_history_delete ON entries;
CREATE TRIGGER entries_history_delete AFTER DELETE ON entries
    FOR EACH ROW EXECUTE FUNCTION entries_keep_version();

-- the entries there are now: their current version is their first known one
INSERT INTO entry_versions (store_id, scope, session_id, path, entry_id, version, contents, description,
                            operation, changed_at, changed_by)
SELECT e.store_id, e.scope, e.session_id, e.path, e.id, e.version, e.contents, e.description,
       CASE WHEN e.version = 1 THEN 'create' ELSE 'update' END, e.updated_at, e.updated_by
FROM entries e
WHERE NOT EXISTS (SELECT 1 FROM entry_versions v WHERE v.entry_id = e.id);
