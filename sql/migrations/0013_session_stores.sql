-- Session stores (the agent dialect's `session-stores`): securables in the same namespace as memory
-- stores, told apart by `kind`, so privileges, ownership, grants, scope binding and audit are the
-- ones of memory stores. Names stay unique per schema across both kinds (the existing UNIQUE).
ALTER TABLE memory_stores ADD COLUMN IF NOT EXISTS kind text NOT NULL DEFAULT 'memory';
ALTER TABLE memory_stores DROP CONSTRAINT IF EXISTS memory_stores_kind_check;
ALTER TABLE memory_stores ADD CONSTRAINT memory_stores_kind_check CHECK (kind IN ('memory', 'session'));

-- A session of one actor (a scope) in a session store. `next_position` is the position the next
-- appended item takes; it only grows, and is read and bumped under the session's row lock.
CREATE TABLE IF NOT EXISTS agent_sessions (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    store_id uuid NOT NULL REFERENCES memory_stores (id) ON DELETE CASCADE,
    session_id text NOT NULL,
    actor_id text NOT NULL,
    parent_session_id text,
    root_session_id text NOT NULL,
    metadata jsonb NOT NULL DEFAULT '{}'::jsonb,
    next_position bigint NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_activity_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (store_id, session_id)
);
-- erasure of an actor, and a store's sessions in creation order
CREATE INDEX IF NOT EXISTS agent_sessions_actor ON agent_sessions (actor_id);
CREATE INDEX IF NOT EXISTS agent_sessions_created ON agent_sessions (store_id, created_at, session_id);

-- The ordered items of a session, kept as the JSON that was sent.
CREATE TABLE IF NOT EXISTS session_items (
    session uuid NOT NULL REFERENCES agent_sessions (id) ON DELETE CASCADE,
    position bigint NOT NULL,
    item_id uuid NOT NULL DEFAULT gen_random_uuid() UNIQUE,
    data jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (session, position)
);
