-- The token subjects that have authenticated to the server (SCIM `Users`, catalog/principals):
-- each recorded once, at its first authenticated request (insert-if-absent; every process
-- remembers whom it recorded, so a request writes nothing after its subject's first).
CREATE TABLE IF NOT EXISTS principals (
    name text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 255),
    first_seen_at timestamptz NOT NULL DEFAULT now()
);
