"""SQL: the chain of existing objects from the metastore down to a named securable, with the
policy revision read in the same statement (so a request decides on a policy at least as new as
what it sees)."""

from __future__ import annotations

import asyncpg

from catalog.governance.securables import Node, Securable, SecurableType

_LOCATE = """
SELECT c.id AS c_id, c.owner AS c_owner, s.id AS s_id, s.owner AS s_owner, m.id AS m_id, m.owner AS m_owner,
       (SELECT coalesce(max(seq), 0) FROM policy_log) AS revision
FROM (SELECT 1) AS one
LEFT JOIN catalogs c ON c.name = $1
LEFT JOIN schemas s ON s.catalog_id = c.id AND s.name = $2
LEFT JOIN memory_stores m ON m.schema_id = s.id AND m.name = $3 AND ($4::text IS NULL OR m.kind = $4)
"""


async def locate(
    conn: asyncpg.Connection | asyncpg.Pool,
    metastore: Node,
    securable_type: SecurableType,
    parts: list[str],
    store_kind: str | None = "memory",
) -> Securable:
    """The chain of existing objects from the metastore down to `parts`. A store of another kind
    than `store_kind` (`memory` or `session`; None: either) is not found: each dialect's store
    routes see only their own kind, while grants and permissions see every store."""
    full_name = ".".join(parts) if parts else metastore.full_name
    chain = [metastore]
    padded = [*parts, None, None, None][:3]
    row = await conn.fetchrow(_LOCATE, *padded, store_kind)
    assert row is not None
    if parts:
        for depth, (prefix, node_type) in enumerate(
            [("c", SecurableType.CATALOG), ("s", SecurableType.SCHEMA), ("m", SecurableType.MEMORY_STORE)],
            start=1,
        ):
            if depth > len(parts) or row[f"{prefix}_id"] is None:
                break
            chain.append(
                Node(node_type, ".".join(parts[:depth]), str(row[f"{prefix}_id"]), row[f"{prefix}_owner"])
            )
    return Securable(securable_type, full_name, tuple(chain), row["revision"])
