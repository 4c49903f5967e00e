-- Scope binding: a store may tie every entry request to the caller's verified end user.
ALTER TABLE memory_stores ADD COLUMN IF NOT EXISTS scope_binding text NOT NULL DEFAULT 'caller';
ALTER TABLE memory_stores DROP CONSTRAINT IF EXISTS memory_stores_scope_binding_check;
ALTER TABLE memory_stores ADD CONSTRAINT memory_stores_scope_binding_check
    CHECK (scope_binding IN ('caller', 'end_user'));
ALTER TABLE memory_stores ADD COLUMN IF NOT EXISTS shared_scopes text[] NOT NULL DEFAULT '{}';
