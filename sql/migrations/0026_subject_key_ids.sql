-- The audit keys' table holds no clear-text subject (catalog/auditlog/pseudonyms.py): each key is
-- found by the subject's keyed hash, sha256(pepper || subject), where the pepper is one random
-- value of this database, readable by the server only (not granted to the auditor role). Erasing a
-- subject deletes its key row, and nothing left names the subject.
CREATE TABLE IF NOT EXISTS audit_pepper (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    -- 32 bytes from PostgreSQL's strong random source (two version-4 UUIDs: 244 random bits)
    pepper bytea NOT NULL
);
INSERT INTO audit_pepper (pepper)
SELECT decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex')
ON CONFLICT (only_row) DO NOTHING;

DO $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM information_schema.columns
        WHERE table_schema = current_schema() AND table_name = 'subject_keys' AND column_name = 'subject'
    ) THEN
        ALTER TABLE subject_keys ADD COLUMN IF NOT EXISTS subject_id bytea;
        UPDATE subject_keys k SET subject_id = sha256(p.pepper || convert_to(k.subject, 'UTF8'))
        FROM audit_pepper p WHERE k.subject_id IS NULL;
        ALTER TABLE subject_keys DROP CONSTRAINT IF EXISTS subject_keys_pkey;
        ALTER TABLE subject_keys DROP COLUMN subject;
        ALTER TABLE subject_keys ALTER COLUMN subject_id SET NOT NULL;
        ALTER TABLE subject_keys ADD PRIMARY KEY (subject_id);
    END IF;
END
$$;
