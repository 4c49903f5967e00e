"""The chain of existing objects from the metastore down to a named securable, with the policy
revision read in the same statement (`repo.chain_row`), so a request decides on a policy at least
as new as what it sees."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from catalog.access import repo
from catalog.access.securables import Node, Securable, SecurableType


async def locate(
    conn: asyncpg.Connection | asyncpg.Pool,
    metastore: Node,
    securable_type: SecurableType,
    parts: list[str],
    store_kind: str | None = "memory",
    fresh: Sequence[str] | None = None,
    whole: bool = False,
) -> Securable:
    """The chain of existing objects from the metastore down to `parts`. A store of another kind
    than `store_kind` (`memory` or `session`; None: either) is not found: each dialect's store
    routes see only their own kind, while grants and permissions see every store. With `whole`,
    the securable's own row comes with it (`Securable.row`), read in the same statement; with
    `fresh` (a search: the scopes it reads), what its indexes must hold (`Securable.changes`,
    `Securable.unembedded`)."""
    full_name = ".".join(parts) if parts else metastore.full_name
    chain = [metastore]
    catalog, schema, store = [*parts, None, None, None][:3]
    row = await repo.chain_row(conn, catalog, schema, store, store_kind, fresh, whole)
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
    rules = None
    trust = None
    store_found = securable_type == SecurableType.MEMORY_STORE and len(chain) == 4
    if store_found and row["m_scope_binding"] is not None:
        rules = (str(row["m_scope_binding"]), tuple(row["m_shared_scopes"] or ()))
        trust = row["m_trust_policy"]
    changes, unembedded = (row["changes"], row["unembedded"]) if store_found else (None, None)
    exists = len(chain) == len(parts) + 1
    return Securable(
        securable_type,
        full_name,
        tuple(chain),
        row["revision"],
        rules,
        trust,
        changes,
        unembedded,
        row["row"] if whole and exists else None,
    )
