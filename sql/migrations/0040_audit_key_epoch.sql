-- The audit writer keeps the subjects' keys it has used, for a short while, so that a read's or a
-- search's event needs no statement of its own to find its key (catalog/recorder/pseudonyms.py,
-- `KeyCache`). Erasing a subject deletes its key: the epoch below goes up in the same transaction
-- (`delete_subject_key`), and an append keyed with keys read at an older epoch is not made (the
-- writer reads the keys again and keys the events anew). One row; a missing row reads as 0.
CREATE TABLE IF NOT EXISTS audit_key_epoch (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    epoch bigint NOT NULL
);
INSERT INTO audit_key_epoch (epoch) VALUES (0) ON CONFLICT (only_row) DO NOTHING;
