"""Memory entries: keyed by (store, scope, session, path), versioned, searchable."""
