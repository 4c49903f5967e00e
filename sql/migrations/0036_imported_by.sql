-- Who imported an entry and its versions (catalog/backup): an archive's authors (`created_by`,
-- `changed_by`) are kept as written where it was exported, so the principal whose import wrote
-- them here is kept beside them. NULL: written on this server, not imported. Writes after an
-- import leave an entry's `imported_by` as it is (it says where the entry, and its `created_by`,
-- came from); the versions they add have none (the history trigger does not set it).
ALTER TABLE entries ADD COLUMN IF NOT EXISTS imported_by text;
ALTER TABLE entry_versions ADD COLUMN IF NOT EXISTS imported_by text;
