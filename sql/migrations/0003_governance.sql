-- Governance: grants, groups and memberships, and the policy log that every process tails to
-- keep its in-memory policy current (a change takes effect on the very next request anywhere).

CREATE TABLE IF NOT EXISTS grants (
    securable_type text NOT NULL CHECK (securable_type IN ('METASTORE', 'CATALOG', 'SCHEMA', 'MEMORY_STORE')),
    securable_id uuid NOT NULL,
    principal text NOT NULL CHECK (length(principal) BETWEEN 1 AND 255),
    privilege text NOT NULL,
    granted_by text NOT NULL,
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (securable_id, principal, privilege)
);
CREATE INDEX IF NOT EXISTS grants_principal ON grants (principal);

CREATE TABLE IF NOT EXISTS groups (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    display_name text NOT NULL UNIQUE CHECK (length(display_name) BETWEEN 1 AND 255),
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by text NOT NULL
);

-- A member is a principal (by name) or a group (by id).
CREATE TABLE IF NOT EXISTS group_members (
    group_id uuid NOT NULL REFERENCES groups (id) ON DELETE CASCADE,
    member_type text NOT NULL CHECK (member_type IN ('principal', 'group')),
    member text NOT NULL CHECK (length(member) BETWEEN 1 AND 255),
    PRIMARY KEY (group_id, member_type, member)
);
CREATE INDEX IF NOT EXISTS group_members_member ON group_members (member_type, member);

-- Every change to grants, groups or memberships appends here (by trigger, so no code path can
-- forget). `seq` is the policy revision. The triggers take one transaction-scoped advisory lock
-- first, so a writer commits before the next one draws a seq: a reader that has seen seq N has
-- seen every change numbered below N.
CREATE TABLE IF NOT EXISTS policy_log (
    seq bigserial PRIMARY KEY,
    kind text NOT NULL,      -- grant | group | member
    op text NOT NULL,        -- add | remove
    a text NOT NULL,
    b text NOT NULL,
    c text NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
);

CREATE OR REPLACE FUNCTION policy_log_grants() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1886350457);  -- serialise policy writers: seq follows commit order
    IF TG_OP = 'INSERT' THEN
        INSERT INTO policy_log (kind, op, a, b, c)
        VALUES ('grant', 'add', NEW.securable_id::text, NEW.principal, NEW.privilege);
        RETURN NEW;
    END IF;
    INSERT INTO policy_log (kind, op, a, b, c)
    VALUES ('grant', 'remove', OLD.securable_id::text, OLD.principal, OLD.privilege);
    RETURN OLD;
END $$;

CREATE OR REPLACE FUNCTION policy_log_groups() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1886350457);  -- serialise policy writers: seq follows commit order
    IF TG_OP = 'INSERT' THEN
        INSERT INTO policy_log (kind, op, a, b, c) VALUES ('group', 'add', NEW.id::text, NEW.display_name, '');
        RETURN NEW;
    END IF;
    INSERT INTO policy_log (kind, op, a, b, c) VALUES ('group', 'remove', OLD.id::text, OLD.display_name, '');
    RETURN OLD;
END $$;

CREATE OR REPLACE FUNCTION policy_log_members() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(1886350457);  -- serialise policy writers: seq follows commit order
    IF TG_OP = 'INSERT' THEN
        INSERT INTO policy_log (kind, op, a, b, c)
        VALUES ('member', 'add', NEW.group_id::text, NEW.member_type, NEW.member);
        RETURN NEW;
    END IF;
    INSERT INTO policy_log (kind, op, a, b, c)
    VALUES ('member', 'remove', OLD.group_id::text, OLD.member_type, OLD.member);
    RETURN OLD;
END $$;

-- Grants on an object go with it (cascaded deletes of schemas and stores fire these too).
CREATE OR REPLACE FUNCTION drop_object_grants() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM grants WHERE securable_id = OLD.id;
    RETURN OLD;
END $$;

DROP TRIGGER IF EXISTS grants_log ON grants;
CREATE TRIGGER grants_log AFTER INSERT OR DELETE ON grants FOR EACH ROW EXECUTE FUNCTION policy_log_grants();
DROP TRIGGER IF EXISTS groups_log ON groups;
CREATE TRIGGER groups_log AFTER INSERT OR DELETE ON groups FOR EACH ROW EXECUTE FUNCTION policy_log_groups();
DROP TRIGGER IF EXISTS members_log ON group_members;
CREATE TRIGGER members_log AFTER INSERT OR DELETE ON group_members
    FOR EACH ROW EXECUTE FUNCTION policy_log_members();

DROP TRIGGER IF EXISTS catalogs_drop_grants ON catalogs;
CREATE TRIGGER catalogs_drop_grants AFTER DELETE ON catalogs FOR EACH ROW EXECUTE FUNCTION drop_object_grants();
DROP TRIGGER IF EXISTS schemas_drop_grants ON schemas;
CREATE TRIGGER schemas_drop_grants AFTER DELETE ON schemas FOR EACH ROW EXECUTE FUNCTION drop_object_grants();
DROP TRIGGER IF EXISTS stores_drop_grants ON memory_stores;
CREATE TRIGGER stores_drop_grants AFTER DELETE ON memory_stores
    FOR EACH ROW EXECUTE FUNCTION drop_object_grants();
