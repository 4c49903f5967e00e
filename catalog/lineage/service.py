"""Entry provenance: the edges a derived write records, and walking them for auditors; request
lineage as OpenLineage events. Lineage knows entries only by id and key (`EntryRef`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import asyncpg

from catalog.auth import Principal
from catalog.context import Context
from catalog.errors import InvalidParameter, NotFound
from catalog.governance import SecurableType
from catalog.keys import validate_path, validate_scope, validate_session
from catalog.lineage import repo
from catalog.lineage.repo import EntryRef
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
from catalog.pagination import page_size

MAX_DEPTH = 10
DEFAULT_DEPTH = 5
# the last millisecond a Python datetime (and so a filter) can name: 9999-12-31T23:59:59.999Z
MAX_EPOCH_MS = 253402300799999


async def record(conn: asyncpg.Connection, by: str, target: EntryRef, sources: Sequence[EntryRef]) -> None:
    """The edges of a write derived from `sources` (within the write's transaction)."""
    if sources:
        await repo.add_edges(conn, target, sources, by)


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
    if not securable_full_name:
        raise InvalidParameter("securable_full_name is required", "securable_full_name")
    direction = direction or "upstream"
    if direction not in ("upstream", "downstream"):
        raise InvalidParameter("direction must be upstream or downstream", "direction")
    hops = DEFAULT_DEPTH if depth is None else depth
    if not 1 <= hops <= MAX_DEPTH:
        raise InvalidParameter(f"depth must be between 1 and {MAX_DEPTH}", "depth")
    await ctx.access.resolve(principal, "lineage.read", SecurableType.METASTORE)
    parts = split_full_name(securable_full_name, 3, "securable_full_name")
    store = await ctx.access.locate(SecurableType.MEMORY_STORE, parts)
    if not store.exists:
        raise NotFound(f"memory store {store.full_name} does not exist")
    upstream = direction == "upstream"
    if scope is not None or path is not None:
        key_scope, key_path = validate_scope(scope), validate_path(path)
        found = await repo.entry_id(
            ctx.pool, store.node.id, key_scope, validate_session(session_id), key_path
        )
        if found is None:
            raise NotFound(f"no entry at {key_path} in scope {key_scope}")
        start = [found]
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
    start, end = epoch_ms(start_time, "start_time"), epoch_ms(end_time, "end_time")
    limit = page_size(size, default=ctx.settings.page_default, cap=ctx.settings.page_cap, field="page_size")
    await ctx.access.resolve(principal, "lineage.read", SecurableType.METASTORE)
    rows = await repo.request_lineage(ctx.pool, start=start, end=end, limit=limit)
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
