-- The history keeps each version's consolidation state (migration 0031): `state` and the key of
-- the entry replacing it, so that reading the store as it was (`as_of`) answers an entry's state
-- then, and lists and searches of then leave out what was superseded or merged then. Versions
-- kept before this migration read as active.

ALTER TABLE entry_versions ADD COLUMN IF NOT EXISTS state text NOT NULL DEFAULT 'active';
ALTER TABLE entry_versions ADD COLUMN IF NOT EXISTS superseded_by jsonb;

-- the history trigger of migration 0028, keeping the state too
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
                                description, metadata, operation, changed_by, state, superseded_by)
    VALUES (row_.store_id, row_.scope, row_.session_id, row_.path, row_.id,
            CASE WHEN op = 'delete' THEN row_.version + 1 ELSE row_.version END,
            CASE WHEN op = 'delete' THEN NULL ELSE row_.contents END,
            CASE WHEN op = 'delete' THEN NULL ELSE row_.description END,
            CASE WHEN op = 'delete' THEN NULL ELSE row_.metadata END, op, who,
            row_.state,
            -- the key of the entry replacing it, as it is now (a version keeps it as it was)
            (SELECT jsonb_build_object('scope', s.scope, 'session_id', s.session_id, 'path', s.path)
             FROM entries s WHERE s.store_id = row_.store_id AND s.id = row_.superseded_by));
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
