-- How an entry came to be, as the writer says (free strings, e.g. Databricks' managed-memory tools
-- send `CREATION_REASON_AGENT_INFERRED` and `CREATION_SOURCE_ONLINE_AGENT`). Nullable: entries
-- written before, or by clients that do not send them, have none.
ALTER TABLE entries ADD COLUMN IF NOT EXISTS creation_reason text;
ALTER TABLE entries ADD COLUMN IF NOT EXISTS creation_source text;
