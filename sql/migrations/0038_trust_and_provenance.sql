-- Trust and provenance (docs/governance/trust.md).
--
-- Provenance: every entry, and every version the history keeps, says where its text came from, as
-- the server saw the write arrive (never as the client claims): the principal, the end user of an
-- on-behalf-of token, the channel (`via`: rest, agents, console, mcp, responses, extraction,
-- pipeline, maintenance, import), the model where one wrote it, what it was derived from (a
-- conversation or a session and its items, source entries), its coarse class (person,
-- application, model), what the store's trust policy decided, and a review's decision. NULL: written
-- before this migration (answered as the author alone, class `unknown`).
ALTER TABLE entries ADD COLUMN IF NOT EXISTS provenance jsonb;
ALTER TABLE entry_versions ADD COLUMN IF NOT EXISTS provenance jsonb;

-- A store's trust policy (MANAGE): which sources are trusted, screened or always reviewed, and the
-- screen's rules. NULL: no policy, nothing is held. Read with the store's chain (one statement).
ALTER TABLE memory_stores ADD COLUMN IF NOT EXISTS trust_policy jsonb;

-- A write the policy holds is kept `quarantined` until a MANAGE holder approves or rejects it.
ALTER TABLE entries DROP CONSTRAINT IF EXISTS entries_state_check;
ALTER TABLE entries ADD CONSTRAINT entries_state_check
    CHECK (state IN ('active', 'superseded', 'merged', 'quarantined'));
-- the review queue of a store
CREATE INDEX IF NOT EXISTS entries_quarantined ON entries (store_id, scope, session_id, path)
    WHERE state = 'quarantined';

-- a review's decision is a version of its own: `approve` (the held text, now active) and `reject`
-- (the entry as it was before the held writes; a held entry that had no earlier text is deleted)
ALTER TABLE entry_versions DROP CONSTRAINT IF EXISTS entry_versions_operation_check;
ALTER TABLE entry_versions ADD CONSTRAINT entry_versions_operation_check
    CHECK (operation IN ('create', 'update', 'restore', 'delete', 'approve', 'reject'));

-- the history trigger of migration 0034, keeping each version's provenance too; a deletion's is
-- its deleter's (`catalog.provenance`, set by the statement that deletes, else the principal alone)
CREATE OR REPLACE FUNCTION entries_keep_version() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    kept bigint;
    days bigint;
    row_ entries%ROWTYPE;
    op text;
    who text;
    origin jsonb;
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
        origin := coalesce(nullif(current_setting('catalog.provenance', true), '')::jsonb, '{}'::jsonb)
                  || jsonb_build_object('principal', who);
    ELSE
        row_ := NEW;
        op := coalesce(nullif(current_setting('catalog.operation', true), ''),
                       CASE WHEN TG_OP = 'INSERT' THEN 'create' ELSE 'update' END);
        who := NEW.updated_by;
        origin := NEW.provenance;
    END IF;
    INSERT INTO entry_versions (store_id, scope, session_id, path, entry_id, version, contents,
                                description, metadata, operation, changed_by, state, superseded_by,
                                provenance)
    VALUES (row_.store_id, row_.scope, row_.session_id, row_.path, row_.id,
            CASE WHEN op = 'delete' THEN row_.version + 1 ELSE row_.version END,
            CASE WHEN op = 'delete' THEN NULL ELSE row_.contents END,
            CASE WHEN op = 'delete' THEN NULL ELSE row_.description END,
            CASE WHEN op = 'delete' THEN NULL ELSE row_.metadata END, op, who,
            row_.state,
            -- the key of the entry replacing it, as it is now (a version keeps it as it was)
            (SELECT jsonb_build_object('scope', s.scope, 'session_id', s.session_id, 'path', s.path)
             FROM entries s WHERE s.store_id = row_.store_id AND s.id = row_.superseded_by),
            origin);
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

-- A provenance without a scope (with `subject`: also every scope starting `scope:`): the source
-- entries of that scope left out, and an end user (`on_behalf_of`) of that scope named `[erased]`.
-- Erasure (catalog/erasure) runs it over what it keeps, as it deletes the lineage edges there.
CREATE OR REPLACE FUNCTION provenance_without_scope(p jsonb, s text, subject boolean) RETURNS jsonb
LANGUAGE sql IMMUTABLE AS $$
    WITH named AS (
        SELECT CASE WHEN p ->> 'on_behalf_of' = s OR (subject AND starts_with(p ->> 'on_behalf_of', s || ':'))
                    THEN jsonb_set(p, '{on_behalf_of}', '"[erased]"') ELSE p END AS q
    ), kept AS (
        SELECT q, (SELECT jsonb_agg(e ORDER BY n) FROM jsonb_array_elements(q -> 'source' -> 'entries')
                   WITH ORDINALITY AS t (e, n)
                   WHERE NOT (e ->> 'scope' = s OR (subject AND starts_with(e ->> 'scope', s || ':')))) AS entries
        FROM named
    )
    SELECT CASE WHEN jsonb_typeof(q -> 'source' -> 'entries') <> 'array' THEN q
                WHEN entries IS NULL THEN q #- '{source,entries}'
                ELSE jsonb_set(q, '{source,entries}', entries) END
    FROM kept
$$;

-- whether a provenance names the scope (as `provenance_without_scope` takes it out)
CREATE OR REPLACE FUNCTION provenance_names_scope(p jsonb, s text, subject boolean) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT p IS NOT NULL AND (
        p ->> 'on_behalf_of' = s OR (subject AND starts_with(p ->> 'on_behalf_of', s || ':'))
        OR (jsonb_typeof(p -> 'source' -> 'entries') = 'array' AND EXISTS (
            SELECT 1 FROM jsonb_array_elements(p -> 'source' -> 'entries') e
            WHERE e ->> 'scope' = s OR (subject AND starts_with(e ->> 'scope', s || ':')))))
$$;

-- For auditors' SQL clients: the provenance of every kept version (no contents), with the store's
-- name (NULL once the store is deleted), readable by catalog_auditor like the other views of
-- schema `system`. A version written before provenance was kept names its author alone.
CREATE OR REPLACE VIEW system.provenance AS
SELECT (SELECT c.name || '.' || s.name || '.' || m.name FROM public.memory_stores m
        JOIN public.schemas s ON s.id = m.schema_id JOIN public.catalogs c ON c.id = s.catalog_id
        WHERE m.id = v.store_id) AS memory_store,
       v.store_id AS memory_store_id, v.entry_id, v.scope, v.session_id, v.path, v.version, v.operation,
       v.changed_at, v.changed_by, v.state,
       coalesce(v.provenance ->> 'principal', v.changed_by) AS principal,
       v.provenance ->> 'on_behalf_of' AS on_behalf_of,
       v.provenance ->> 'via' AS via,
       v.provenance ->> 'model' AS model,
       coalesce(v.provenance ->> 'class', 'unknown') AS class,
       v.provenance -> 'source' AS source,
       v.provenance -> 'trust' AS trust,
       v.provenance -> 'review' AS review,
       v.imported_by
FROM public.entry_versions v;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'catalog_auditor') THEN
        GRANT SELECT ON system.provenance TO catalog_auditor;
    END IF;
END $$;
