-- OpenAI-compatible conversations. A conversation belongs to one memory store and one scope (the
-- scope binding and the store's grants decide who may use it); its items are kept in order, as
-- sent (JSONB), with the text of message items in a column of its own for later search.

CREATE TABLE IF NOT EXISTS conversations (
    id text PRIMARY KEY,  -- conv_<32 hex>
    store_id uuid NOT NULL REFERENCES memory_stores (id) ON DELETE CASCADE,
    scope text NOT NULL,
    scope_kind text NOT NULL,
    metadata jsonb NOT NULL DEFAULT '{}',
    -- the position of the last item; an append locks this row and numbers its items after it,
    -- so concurrent appends serialize and never reuse or interleave positions
    last_position bigint NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    created_by text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS conversations_store_scope ON conversations (store_id, scope);
-- erasure of a scope in every store
CREATE INDEX IF NOT EXISTS conversations_scope ON conversations (scope);

CREATE TABLE IF NOT EXISTS conversation_items (
    conversation_id text NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
    position bigint NOT NULL,
    id text NOT NULL,
    type text NOT NULL,
    item jsonb NOT NULL,  -- the item as sent (with its id and status)
    text text,  -- the text parts of a message item, joined by newlines; NULL for other items
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    created_by text NOT NULL,
    PRIMARY KEY (conversation_id, position),
    UNIQUE (conversation_id, id)
);
