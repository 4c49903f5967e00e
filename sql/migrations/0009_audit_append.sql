-- Appending to the audit chain inside PostgreSQL: take the chain's lock, read the head, number
-- and hash the new events, insert them. Doing it here (rather than hashing in the application
-- against a head it read earlier) lets a change send its events and its COMMIT in one message,
-- so the chain's lock is held only while PostgreSQL works, never while a busy application gets
-- round to committing.
--
-- events: a JSON array of audit_events rows without seq, prev_hash and hash;
-- heads, tails: each event's canonical encoding (see catalog/audit/chain.py) cut around its seq:
--   hash = sha256(prev_hash || head || seq || tail), hex; the first prev_hash is 64 zeros.
-- Returns the last seq appended. The lock (0x61756474, "audt") is held until the transaction ends.
CREATE OR REPLACE FUNCTION audit_append(events jsonb, heads bytea[], tails bytea[])
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
    PERFORM pg_advisory_xact_lock(1635083380);
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
REVOKE ALL ON FUNCTION audit_append(jsonb, bytea[], bytea[]) FROM PUBLIC;
