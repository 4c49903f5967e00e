-- audit_append() of 0009_audit_append.sql, with two arguments more.
--
-- wait: with false, the chain's lock is asked for without waiting, and when another transaction
--   holds it nothing is appended and NULL is answered. The audit writer's batches of reads' events
--   (catalog/recorder/writer.py) ask so: a batch appended while the lock is free is one statement
--   committed synchronously (the lock held through its flush: nobody waits for it); while other
--   processes append, the writer sends its batches as a change sends its event instead, committed
--   with synchronous_commit off and then a synchronous flush marker, so that the lock is let go
--   before the disk is reached (docs: benchmarks, the audit chain's ceiling).
-- key_epoch: the epoch of audit_key_epoch (0040_audit_key_epoch.sql) the events' pseudonyms were
--   made with; when it has moved on (a subject's key erased since), nothing is appended and the
--   function raises SQLSTATE CAK01, for the writer to key the events again. Read under the lock.
--
-- The three-argument calls of earlier releases are this function with the defaults.
DROP FUNCTION IF EXISTS audit_append(jsonb, bytea[], bytea[]);
CREATE OR REPLACE FUNCTION audit_append(
    events jsonb, heads bytea[], tails bytea[], wait boolean DEFAULT true, key_epoch bigint DEFAULT NULL
)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    last_seq bigint;
    last_hash text;
    seqs bigint[] := '{}';
    prevs text[] := '{}';
    hashes text[] := '{}';
BEGIN
    IF jsonb_array_length(events) <> cardinality(heads) OR cardinality(heads) <> cardinality(tails) THEN
        RAISE EXCEPTION 'audit_append: % events, % heads, % tails',
            jsonb_array_length(events), cardinality(heads), cardinality(tails);
    END IF;
    IF wait THEN
        PERFORM pg_advisory_xact_lock(1635083380);
    ELSIF NOT pg_try_advisory_xact_lock(1635083380) THEN
        RETURN NULL;
    END IF;
    IF key_epoch IS NOT NULL
       AND coalesce((SELECT k.epoch FROM audit_key_epoch k), 0) <> audit_append.key_epoch THEN
        RAISE EXCEPTION 'audit_append: a subject''s key was erased since these events were keyed'
            USING ERRCODE = 'CAK01';
    END IF;
    SELECT a.seq, a.hash INTO last_seq, last_hash FROM audit_events a ORDER BY a.seq DESC LIMIT 1;
    IF NOT FOUND THEN
        last_seq := 0;
        last_hash := repeat('0', 64);
    END IF;
    FOR i IN 1 .. cardinality(heads) LOOP
        prevs[i] := last_hash;
        last_seq := last_seq + 1;
        last_hash := encode(sha256(
            convert_to(last_hash, 'UTF8') || heads[i] || convert_to(last_seq::text, 'UTF8') || tails[i]
        ), 'hex');
        seqs[i] := last_seq;
        hashes[i] := last_hash;
    END LOOP;
    INSERT INTO audit_events (
        seq, event_id, event_time, request_id, principal, on_behalf_of, source_ip, user_agent,
        service_name, action_name, securable_type, securable_full_name, securable_id, privilege,
        decision, reason, status_code, error_code, request_params, result_count, policy_revision,
        prev_hash, hash
    )
    SELECT c.seq, e.event_id, e.event_time, e.request_id, e.principal, e.on_behalf_of, e.source_ip,
           e.user_agent, e.service_name, e.action_name, e.securable_type, e.securable_full_name,
           e.securable_id, e.privilege, e.decision, e.reason, e.status_code, e.error_code,
           e.request_params, e.result_count, e.policy_revision, c.prev, c.hash
    FROM jsonb_populate_recordset(NULL::audit_events, events) WITH ORDINALITY AS e
    JOIN unnest(seqs, prevs, hashes) WITH ORDINALITY AS c (seq, prev, hash, n) ON c.n = e.ordinality;
    RETURN last_seq;
END $$;
REVOKE ALL ON FUNCTION audit_append(jsonb, bytea[], bytea[], boolean, bigint) FROM PUBLIC;
