-- Scope grants (row-filter style): a grant of READ_MEMORY_STORE or WRITE_MEMORY_STORE may be
-- limited to scopes, each an exact scope or a prefix ending in '*' (`team-a`, `team-a:*`). NULL
-- is every scope, as before. The policy log carries the patterns in `d` (a JSON array, '' for
-- none) so that every process applies a limit as soon as it is granted; a change of the patterns
-- of a grant already there is an UPDATE, logged as an `add` with the new patterns.

ALTER TABLE grants ADD COLUMN IF NOT EXISTS scopes text[]
    CHECK (scopes IS NULL OR (cardinality(scopes) BETWEEN 1 AND 20));
ALTER TABLE policy_log ADD COLUMN IF NOT EXISTS d text NOT NULL DEFAULT '';

CREATE OR REPLACE FUNCTION policy_log_grants() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1886350457);  -- serialise policy writers: seq follows commit order
    IF TG_OP = 'INSERT' OR TG_OP = 'UPDATE' THEN
        INSERT INTO policy_log (kind, op, a, b, c, d)
        VALUES ('grant', 'add', NEW.securable_id::text, NEW.principal, NEW.privilege,
                coalesce(array_to_json(NEW.scopes)::text, ''));
        RETURN NEW;
    END IF;
    INSERT INTO policy_log (kind, op, a, b, c)
    VALUES ('grant', 'remove', OLD.securable_id::text, OLD.principal, OLD.privilege);
    RETURN OLD;
END $$;

DROP TRIGGER IF EXISTS grants_log ON grants;
CREATE TRIGGER grants_log AFTER INSERT OR UPDATE OR DELETE ON grants
    FOR EACH ROW EXECUTE FUNCTION policy_log_grants();
