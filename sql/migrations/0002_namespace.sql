-- The three-level namespace: metastore -> catalogs -> schemas -> memory stores.
-- Names are stored lowercase; the check constraints repeat the API's name rule.

CREATE TABLE IF NOT EXISTS metastore (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    singleton boolean NOT NULL DEFAULT true UNIQUE CHECK (singleton),
    admin text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS catalogs (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9_-]{1,255}$'),
    comment text,
    properties jsonb NOT NULL DEFAULT '{}'::jsonb,
    owner text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text NOT NULL
);

CREATE TABLE IF NOT EXISTS schemas (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    catalog_id uuid NOT NULL REFERENCES catalogs (id) ON DELETE CASCADE,
    name text NOT NULL CHECK (name ~ '^[a-z0-9_-]{1,255}$'),
    comment text,
    properties jsonb NOT NULL DEFAULT '{}'::jsonb,
    owner text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text NOT NULL,
    UNIQUE (catalog_id, name)
);

CREATE TABLE IF NOT EXISTS memory_stores (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    schema_id uuid NOT NULL REFERENCES schemas (id) ON DELETE CASCADE,
    name text NOT NULL CHECK (name ~ '^[a-z0-9_-]{1,255}$'),
    description text,
    properties jsonb NOT NULL DEFAULT '{}'::jsonb,
    owner text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    created_by text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text NOT NULL,
    UNIQUE (schema_id, name)
);
