-- The whole table's HNSW graph holds the vectors of large scopes only. Inserting a vector into an
-- HNSW graph is the dearest part of a write (0.6-1.0 ms of PostgreSQL's CPU at a few thousand
-- rows, about 3 ms at 100,000), and the graph serves only searches of scope sets too large for an
-- exact scan: a search of a set of at most `EXACT_LIMIT` rows (and, on a large table, many more)
-- is an exact scan already (catalog/search/repo.py). So an entry's vector enters the graph only
-- when its scope holds at least `GRAPH_MIN` entries as the vector is stored (`in_graph`, set by
-- the embedding worker's statement); a search that reads the graph reads the rows of its scopes
-- outside it by an exact scan beside it (through `entries_outside_graph`), so none is missed.
--
-- A row is in the graph unless that statement said otherwise: the rows already there, and rows
-- written with their vector (a restore), keep their vectors in it as before. The graph is built
-- again, as a partial index, under its old name: on a large table this migration takes as long
-- as `catalog reindex` takes to rebuild it (docs/operations/index.md).
ALTER TABLE entries ADD COLUMN IF NOT EXISTS in_graph boolean NOT NULL DEFAULT true;
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE c.relname = 'entries_embedding_hnsw' AND i.indpred IS NOT NULL
    ) THEN
        DROP INDEX IF EXISTS entries_embedding_hnsw;
        CREATE INDEX entries_embedding_hnsw ON entries USING hnsw (embedding vector_cosine_ops) WHERE in_graph;
    END IF;
END $$;
CREATE INDEX IF NOT EXISTS entries_outside_graph ON entries (store_id, scope) WHERE NOT in_graph;
