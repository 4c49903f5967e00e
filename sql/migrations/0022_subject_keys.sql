-- The keys of the audit log's pseudonyms (catalog/auditlog/pseudonyms.py): one random key per data
-- subject (what comes before the first ':' of a scope). Outside the hash chain: deleting a key
-- (erasing the subject) unlinks its events without changing them. Not granted to the auditor role.
CREATE TABLE IF NOT EXISTS subject_keys (
    subject text PRIMARY KEY,
    key bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
