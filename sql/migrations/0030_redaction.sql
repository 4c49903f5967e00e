-- Redaction of a version (entries:redact): its contents and description in the history are
-- replaced by who redacted it, when and why; the version itself (etag, operation, time, author)
-- stays, so the history still says that it existed.
ALTER TABLE entry_versions ADD COLUMN IF NOT EXISTS redacted_at timestamptz;
ALTER TABLE entry_versions ADD COLUMN IF NOT EXISTS redacted_by text;
ALTER TABLE entry_versions ADD COLUMN IF NOT EXISTS redaction_reason text;
