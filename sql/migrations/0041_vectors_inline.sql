-- A vector is kept in its row, not in the TOAST table beside it. pgvector's type is stored
-- `external` by default: a 384-dimension vector (1,544 bytes) in a row with a few hundred bytes of
-- text and metadata passes PostgreSQL's 2 kB threshold and is moved out, so that an exact scan of a
-- scope, and every candidate an HNSW search rescores, read each vector again through the TOAST
-- table's index (an exact scan of a 419-entry scope: 834 pages read and 0.69 ms; inline, 186 and
-- 0.38 ms). PLAIN neither moves nor compresses it (a vector does not compress); a long row's text
-- and metadata are still moved out. Rows written before keep their vector where it is until it is
-- written again; `VACUUM FULL entries, transcript_items` moves every one in (it rewrites both
-- tables, holding them locked while it runs: docs/operations/index.md).
ALTER TABLE entries ALTER COLUMN embedding SET STORAGE PLAIN;
ALTER TABLE transcript_items ALTER COLUMN embedding SET STORAGE PLAIN;
