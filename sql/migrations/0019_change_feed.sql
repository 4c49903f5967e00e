-- Background workers sleep until there is work: a transaction that writes change-log rows
-- notifies the channel `catalog_changes` (payload: the change log's name) when it commits, so
-- every process's indexer and embedding worker, listening, wakes on any process's write. One
-- statement-level trigger per change log, so that no write path (cascades included) is missed;
-- PostgreSQL sends a transaction's identical notifications once.
CREATE OR REPLACE FUNCTION change_log_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('catalog_changes', TG_TABLE_NAME);
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS entry_changes_notify ON entry_changes;
CREATE TRIGGER entry_changes_notify AFTER INSERT ON entry_changes
    FOR EACH STATEMENT EXECUTE FUNCTION change_log_notify();
DROP TRIGGER IF EXISTS transcript_changes_notify ON transcript_changes;
CREATE TRIGGER transcript_changes_notify AFTER INSERT ON transcript_changes
    FOR EACH STATEMENT EXECUTE FUNCTION change_log_notify();

-- The change logs are pruned of rows older than a retention horizon (catalog.search.indexer).
-- Every row of a log with `seq <= up_to` may be gone: an index whose watermark is below it
-- cannot catch up from the log and is rebuilt from the tables instead.
CREATE TABLE IF NOT EXISTS change_log_pruned (
    changes text PRIMARY KEY,  -- the change log's table name
    up_to bigint NOT NULL
);
