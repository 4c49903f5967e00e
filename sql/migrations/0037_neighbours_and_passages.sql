-- The order entries were first written in: hybrid ranking lifts an entry's neighbours, the short
-- entries written just before and after it in its scope and session (`catalog.search.neighbours`),
-- from what the server knows rather than from the shape of paths. A sequence gives each new entry
-- its place (in insertion order within one statement too); the entries there are take theirs by
-- creation time. An update keeps an entry's place.

CREATE SEQUENCE IF NOT EXISTS entries_written_seq;
ALTER TABLE entries ADD COLUMN IF NOT EXISTS written bigint;
UPDATE entries e SET written = o.n
FROM (SELECT id, row_number() OVER (ORDER BY created_at, id) AS n FROM entries) o
WHERE e.id = o.id AND e.written IS NULL;
SELECT setval('entries_written_seq', coalesce((SELECT max(written) FROM entries), 0) + 1, false);
ALTER TABLE entries ALTER COLUMN written SET DEFAULT nextval('entries_written_seq');
ALTER TABLE entries ALTER COLUMN written SET NOT NULL;
CREATE INDEX IF NOT EXISTS entries_written ON entries (store_id, scope, session_id, written);

-- How many passages of the vector index an entry's (or a transcript item's) text has: its vector is
-- the mean of its passages' (`catalog.search.passages.VECTOR`), and a vector search weighs it by
-- that count (`PASSAGE_PENALTY`). The texts longer than one passage were embedded from their first
-- 256 tokens only: they are embedded again, whole.
ALTER TABLE entries ADD COLUMN IF NOT EXISTS passages smallint NOT NULL DEFAULT 1;
ALTER TABLE transcript_items ADD COLUMN IF NOT EXISTS passages smallint NOT NULL DEFAULT 1;
UPDATE entries SET embedded_version = NULL
WHERE embedded_version IS NOT NULL
  AND (length(contents) > 96 * 24 OR cardinality(regexp_split_to_array(btrim(coalesce(contents, '')), '\s+')) > 96);
UPDATE transcript_items SET embedded_version = NULL
WHERE embedded_version IS NOT NULL
  AND (length(contents) > 96 * 24 OR cardinality(regexp_split_to_array(btrim(coalesce(contents, '')), '\s+')) > 96);
