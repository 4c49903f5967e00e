-- The entries' change log names each change's scope, so that a search learns what its full-text
-- index must hold from the changes of the scopes it reads, not of the whole store: under writes to
-- a store's other scopes (other users' memories) the index's watermark is nearly always past the
-- last change of the searched scopes, and the search need not wait for the indexer's next pass
-- (catalog/access/repo.py reads the head; catalog/search/indexer.py, `holds`). An entry's scope
-- is part of its key and never changes, so a change's scope is its row's, before or after.
--
-- Rows logged before this migration have no scope (NULL): every search of their store counts
-- them, as it counted every row before, until the log's pruning takes them.
ALTER TABLE entry_changes ADD COLUMN IF NOT EXISTS scope text;
CREATE INDEX IF NOT EXISTS entry_changes_scope ON entry_changes (store_id, scope, seq);

CREATE OR REPLACE FUNCTION entries_log_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO entry_changes (store_id, scope, entry_id, op) VALUES (OLD.store_id, OLD.scope, OLD.id, 'delete');
        RETURN OLD;
    END IF;
    INSERT INTO entry_changes (store_id, scope, entry_id, op) VALUES (NEW.store_id, NEW.scope, NEW.id, 'upsert');
    RETURN NEW;
END $$;
