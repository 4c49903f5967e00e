"""Entry provenance: checking `derived_from` on writes, and walking the edges for auditors."""

from __future__ import annotations

from datetime import UTC, datetime

import asyncpg

from catalog.auth import Principal
from catalog.context import Context
from catalog.entries import repo as entries_repo
from catalog.entries.schemas import MAX_SOURCES, SourceRef
from catalog.errors import InvalidParameter, NotFound
from catalog.governance import SecurableType, action
from catalog.lineage import repo
from catalog.lineage.schemas import (
    CatalogRunFacet,
    Dataset,
    Job,
    Lineage,
    LineageEdge,
    LineageEnd,
    OpenLineageEvents,
    Run,
    RunEvent,
    RunFacets,
)
from catalog.names import split_full_name
from catalog.namespace.repo import locate
from catalog.pagination import page_size

MAX_DEPTH = 10
DEFAULT_DEPTH = 5
# the last millisecond a Python datetime (and so a filter) can name: 9999-12-31T23:59:59.999Z
MAX_EPOCH_MS = 253402300799999


async def resolve_sources(
    ctx: Context, principal: Principal, refs: list[SourceRef] | None
) -> list[asyncpg.Record]:
    """Each source must exist (400 naming `derived_from[i]`, whether its store or its entry is
    missing) and be readable by the caller (403, also when a missing store's parents are not
    usable: no existence leak)."""
    from catalog.entries import service as entries

    if not refs:
        return []
    if len(refs) > MAX_SOURCES:
        raise InvalidParameter(f"at most {MAX_SOURCES} sources in derived_from", "derived_from")
    rows = []
    for i, ref in enumerate(refs):
        field = f"derived_from[{i}]"
        split_full_name(ref.memory_store, 3, f"{field}.memory_store")
        scope = entries.validate_scope(ref.scope, f"{field}.scope")
        path = entries.validate_path(ref.path, f"{field}.path")
        session = entries.validate_session(ref.session_id, f"{field}.session_id")
        try:
            store = await entries.resolve_store(ctx, principal, ref.memory_store, "entries.read", [scope])
        except NotFound:
            raise InvalidParameter(
                f"{field}: memory store {ref.memory_store} does not exist", field
            ) from None
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


def _end(row: asyncpg.Record, side: str) -> LineageEnd:
    return LineageEnd(
        memory_store=row[f"{side}_store"],
        scope=row[f"{side}_scope"],
        path=row[f"{side}_path"],
        session_id=row[f"{side}_session_id"] or None,
        deleted=not row[f"{side}_exists"],
    )


async def lineage(
    ctx: Context,
    principal: Principal,
    securable_full_name: str | None,
    direction: str | None,
    scope: str | None,
    path: str | None,
    session_id: str | None,
    depth: int | None,
) -> Lineage:
    from catalog.entries import service as entries

    if not securable_full_name:
        raise InvalidParameter("securable_full_name is required", "securable_full_name")
    direction = direction or "upstream"
    if direction not in ("upstream", "downstream"):
        raise InvalidParameter("direction must be upstream or downstream", "direction")
    hops = DEFAULT_DEPTH if depth is None else depth
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
    return Lineage(
        securable_full_name=store.full_name,
        direction="upstream" if upstream else "downstream",
        edges=[
            LineageEdge(source=_end(e, "source"), target=_end(e, "target"), depth=e["depth"])
            for e in sorted(edges, key=lambda e: (e["depth"], e["target_path"], e["source_path"]))
        ],
    )


OPENLINEAGE_PRODUCER = "https://memory-catalog.local/openlineage"
OPENLINEAGE_SCHEMA = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"


def epoch_ms(value: int | None, field: str) -> datetime | None:
    """An epoch-milliseconds filter as a time (the routes bound it to what a datetime holds)."""
    if value is None:
        return None
    if not 0 <= value <= MAX_EPOCH_MS:
        raise InvalidParameter(f"{field} must be epoch milliseconds between 0 and {MAX_EPOCH_MS}", field)
    return datetime.fromtimestamp(value / 1000, tz=UTC)


async def openlineage_events(
    ctx: Context, principal: Principal, start_time: int | None, end_time: int | None, size: int | None
) -> OpenLineageEvents:
    """Request lineage as OpenLineage RunEvents: each answered request that read or wrote entries
    is a run of the job named by its action, with the store as input (read) or output (write)."""
    from catalog.audit import repo as audit_repo

    start, end = epoch_ms(start_time, "start_time"), epoch_ms(end_time, "end_time")
    limit = page_size(size, default=ctx.settings.page_default, cap=ctx.settings.page_cap, field="page_size")
    metastore = await locate(ctx.pool, ctx.metastore, SecurableType.METASTORE, [])
    await ctx.authorizer.ensure(principal, action("lineage.read"), metastore)
    rows = await audit_repo.request_lineage(ctx.pool, start=start, end=end, limit=limit)
    events = []
    for row in rows:
        dataset = Dataset(namespace="memory-catalog", name=row["memory_store"])
        write = row["direction"] == "write"
        events.append(
            RunEvent(
                event_type="COMPLETE",
                event_time=row["event_time"].astimezone(UTC).isoformat().replace("+00:00", "Z"),
                producer=OPENLINEAGE_PRODUCER,
                schema_url=OPENLINEAGE_SCHEMA,
                run=Run(
                    run_id=str(row["event_id"]),
                    facets=RunFacets(
                        catalog=CatalogRunFacet(
                            principal=row["principal"],
                            on_behalf_of=row["on_behalf_of"],
                            request_id=row["request_id"],
                            entry_count=row["entry_count"],
                        )
                    ),
                ),
                job=Job(namespace="memory-catalog", name=row["action_name"]),
                inputs=[] if write else [dataset],
                outputs=[dataset] if write else [],
            )
        )
    return OpenLineageEvents(events=events)
