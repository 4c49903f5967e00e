-- What auditors read with any SQL client: views in schema `system`, and a role that can read
-- them and nothing else (not the entries, not the grants).
CREATE SCHEMA IF NOT EXISTS system;

CREATE OR REPLACE VIEW system.audit AS
SELECT seq, event_id, event_time, request_id, principal, on_behalf_of, source_ip, user_agent,
       service_name, action_name, securable_type, securable_full_name, securable_id, privilege,
       decision, reason, status_code, error_code, request_params, result_count, policy_revision,
       prev_hash, hash
FROM public.audit_events;

-- Request lineage: which memory store each answered request read or wrote, for whom, how much.
CREATE OR REPLACE VIEW system.lineage AS
SELECT seq AS event_seq, event_time, request_id, principal, on_behalf_of,
       securable_full_name AS memory_store, securable_id AS memory_store_id,
       CASE WHEN privilege = 'WRITE_MEMORY_STORE' THEN 'write' ELSE 'read' END AS direction,
       action_name, result_count AS entry_count
FROM public.audit_events
WHERE securable_type = 'MEMORY_STORE' AND action_name LIKE 'entries.%'
  AND decision = 'allow' AND status_code = 200;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'catalog_auditor') THEN
        CREATE ROLE catalog_auditor LOGIN;
    END IF;
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'cannot create role catalog_auditor here; create it and grant it SELECT on system.*';
END $$;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'catalog_auditor') THEN
        GRANT USAGE ON SCHEMA system TO catalog_auditor;
        GRANT SELECT ON system.audit, system.lineage TO catalog_auditor;
        REVOKE ALL ON ALL TABLES IN SCHEMA public FROM catalog_auditor;
    END IF;
END $$;
