-- The audit log: one row per request (and per system event), chained by SHA-256 so that an edit,
-- deletion, insertion or reordering is detectable even when done by a database superuser.
CREATE TABLE IF NOT EXISTS audit_events (
    seq bigint PRIMARY KEY,
    event_id uuid NOT NULL UNIQUE,
    event_time timestamptz NOT NULL,
    request_id text NOT NULL,
    principal text,
    on_behalf_of text,
    source_ip text,
    user_agent text,
    service_name text NOT NULL,
    action_name text NOT NULL,
    securable_type text,
    securable_full_name text,
    securable_id text,
    privilege text,
    decision text NOT NULL CHECK (decision IN ('allow', 'deny', 'unauthenticated', 'system')),
    reason text,
    status_code integer,
    error_code text,
    request_params jsonb NOT NULL DEFAULT '{}'::jsonb,
    result_count integer,
    policy_revision bigint,
    prev_hash text NOT NULL,
    hash text NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_events_time ON audit_events (event_time);
CREATE INDEX IF NOT EXISTS audit_events_principal ON audit_events (principal, seq);

-- Append-only for everyone who does not disable triggers (the application's role cannot).
CREATE OR REPLACE FUNCTION audit_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit events are append-only' USING ERRCODE = 'insufficient_privilege';
END $$;
DROP TRIGGER IF EXISTS audit_events_no_change ON audit_events;
CREATE TRIGGER audit_events_no_change BEFORE UPDATE OR DELETE ON audit_events
    FOR EACH ROW EXECUTE FUNCTION audit_events_append_only();
DROP TRIGGER IF EXISTS audit_events_no_truncate ON audit_events;
CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
    FOR EACH STATEMENT EXECUTE FUNCTION audit_events_append_only();
