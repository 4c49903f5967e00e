"""Entry provenance: checking `derived_from` on writes, and walking the edges for auditors."""

from __future__ import annotations

from typing import Any

import asyncpg

from catalog.auth import Principal
from catalog.context import Context
from catalog.entries import repo as entries_repo
from catalog.entries.schemas import SourceRef
from catalog.errors import InvalidParameter, NotFound
from catalog.governance import SecurableType, action
from catalog.lineage import repo
from catalog.names import split_full_name
from catalog.namespace.repo import locate

MAX_SOURCES = 100
MAX_DEPTH = 10


async def resolve_sources(
    ctx: Context, principal: Principal, refs: list[SourceRef] | None
) -> list[asyncpg.Record]:
    """Each source must exist (400) and be readable by the caller (403)."""
    from catalog.entries import service as entries

    if not refs:
        return []
    if len(refs) > MAX_SOURCES:
        raise InvalidParameter(f"at most {MAX_SOURCES} sources in derived_from", "derived_from")
    rows = []
    for i, ref in enumerate(refs):
        field = f"derived_from[{i}]"
        scope = entries.validate_scope(ref.scope, f"{field}.scope")
        path = entries.validate_path(ref.path, f"{field}.path")
        session = entries.validate_session(ref.session_id, f"{field}.session_id")
        store = await entries.resolve_store(ctx, principal, ref.memory_store, "entries.read", [scope])
        row = await entries_repo.get(ctx.pool, (store.node.id, scope, session, path))
        if row is None:
            raise InvalidParameter(
                f"{field}: no entry at {path} in scope {scope} of {ref.memory_store}", field
            )
        rows.append(row)
    return rows


async def record(
    conn: asyncpg.Connection, principal: Principal, target: asyncpg.Record, sources: list[asyncpg.Record]
) -> None:
    """Within the write's transaction."""
    if sources:
        await repo.add_edges(conn, target, sources, principal.name)


def _end(row: asyncpg.Record, side: str) -> dict[str, Any]:
    return {
        "memory_store": row[f"{side}_store"],
        "scope": row[f"{side}_scope"],
        "path": row[f"{side}_path"],
        "session_id": row[f"{side}_session_id"] or None,
        "deleted": not row[f"{side}_exists"],
    }


async def lineage(
    ctx: Context,
    principal: Principal,
    securable_full_name: str | None,
    direction: str | None,
    scope: str | None,
    path: str | None,
    session_id: str | None,
    depth: int | None,
) -> dict[str, Any]:
    from catalog.entries import service as entries

    if not securable_full_name:
        raise InvalidParameter("securable_full_name is required", "securable_full_name")
    direction = direction or "upstream"
    if direction not in ("upstream", "downstream"):
        raise InvalidParameter("direction must be upstream or downstream", "direction")
    hops = depth or 5
    if not 1 <= hops <= MAX_DEPTH:
        raise InvalidParameter(f"depth must be between 1 and {MAX_DEPTH}", "depth")
    metastore = await locate(ctx.pool, ctx.metastore, SecurableType.METASTORE, [])
    await ctx.authorizer.ensure(principal, action("lineage.read"), metastore)
    parts = split_full_name(securable_full_name, 3, "securable_full_name")
    store = await locate(ctx.pool, ctx.metastore, SecurableType.MEMORY_STORE, parts)
    if not store.exists:
        raise NotFound(f"memory store {store.full_name} does not exist")
    upstream = direction == "upstream"
    if scope is not None or path is not None:
        key = (
            store.node.id,
            entries.validate_scope(scope),
            entries.validate_session(session_id),
            entries.validate_path(path),
        )
        row = await entries_repo.get(ctx.pool, key)
        if row is None:
            raise NotFound(f"no entry at {key[3]} in scope {key[1]}")
        start = [str(row["id"])]
    else:
        start = await repo.store_entry_ids(ctx.pool, store.node.id, upstream)
    edges = await repo.entry_edges(ctx.pool, start, upstream, hops) if start else []
    return {
        "securable_full_name": store.full_name,
        "direction": direction,
        "edges": [
            {"source": _end(e, "source"), "target": _end(e, "target"), "depth": e["depth"]}
            for e in sorted(edges, key=lambda e: (e["depth"], e["target_path"], e["source_path"]))
        ],
    }


OPENLINEAGE_PRODUCER = "https://memory-catalog.local/openlineage"
OPENLINEAGE_SCHEMA = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"


async def openlineage_events(
    ctx: Context, principal: Principal, start_time: int | None, end_time: int | None, size: int | None
) -> dict[str, Any]:
    """Request lineage as OpenLineage RunEvents: each answered request that read or wrote entries
    is a run of the job named by its action, with the store as input (read) or output (write)."""
    from datetime import UTC, datetime

    from catalog.audit import repo as audit_repo
    from catalog.pagination import page_size

    metastore = await locate(ctx.pool, ctx.metastore, SecurableType.METASTORE, [])
    await ctx.authorizer.ensure(principal, action("lineage.read"), metastore)
    limit = page_size(size, default=ctx.settings.page_default, cap=ctx.settings.page_cap, field="page_size")
    rows = await audit_repo.request_lineage(
        ctx.pool,
        start=datetime.fromtimestamp(start_time / 1000, tz=UTC) if start_time else None,
        end=datetime.fromtimestamp(end_time / 1000, tz=UTC) if end_time else None,
        limit=limit,
    )
    events = []
    for row in rows:
        dataset = {"namespace": "memory-catalog", "name": row["memory_store"]}
        write = row["direction"] == "write"
        events.append(
            {
                "eventType": "COMPLETE",
                "eventTime": row["event_time"].astimezone(UTC).isoformat().replace("+00:00", "Z"),
                "producer": OPENLINEAGE_PRODUCER,
                "schemaURL": OPENLINEAGE_SCHEMA,
                "run": {
                    "runId": str(row["event_id"]),
                    "facets": {
                        "catalog": {
                            "principal": row["principal"],
                            "on_behalf_of": row["on_behalf_of"],
                            "request_id": row["request_id"],
                            "entry_count": row["entry_count"],
                        }
                    },
                },
                "job": {"namespace": "memory-catalog", "name": row["action_name"]},
                "inputs": [] if write else [dataset],
                "outputs": [dataset] if write else [],
            }
        )
    return {"events": events}
