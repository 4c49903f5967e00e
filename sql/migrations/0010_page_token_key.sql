-- The key that signs page tokens (HMAC-SHA256, see catalog/pagination.py). It is created once,
-- here, so that every process on this database signs and checks tokens with the same key, and a
-- token issued by one server is good on another. 32 bytes: the SHA-256 of two random UUIDs
-- (gen_random_uuid() draws from pg_strong_random, 244 random bits between them), so no
-- extension is needed. Only the catalog's own role reads it (auditors see the `system` views).
CREATE TABLE IF NOT EXISTS page_token_key (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),  -- one row
    key bytea NOT NULL CHECK (length(key) = 32),
    created_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO page_token_key (key)
SELECT sha256(convert_to(gen_random_uuid()::text || gen_random_uuid()::text, 'UTF8'))
ON CONFLICT (id) DO NOTHING;

REVOKE ALL ON page_token_key FROM PUBLIC;
