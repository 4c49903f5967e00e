"""A memory store for a test: what several test modules create the same way."""

from __future__ import annotations

from rest import UC


def make_store(client, token, name: str, **properties: str) -> str:  # type: ignore[no-untyped-def]
    """Create `main.default.<name>` as the admin; the store's base URL."""
    body = {"name": name, "catalog_name": "main", "schema_name": "default", "properties": properties}
    r = client.post(f"{UC}/memory-stores", headers=token(), json=body)
    assert r.status_code == 200, r.text
    return f"{UC}/memory-stores/main.default.{name}"
