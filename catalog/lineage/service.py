"""Entry provenance: the edges a derived write records, and walking them for auditors; request
lineage as OpenLineage events. Lineage knows entries only by id and key (`EntryRef`), and
conversations and sessions by store id, scope and thread id (`TranscriptRef`).

Two kinds of edge, both recorded in the transaction of the change that derives the entry:
- entry to entry (`entry_lineage`): a write's `derived_from`, checked by the entries service;
- transcript to entry (`transcript_lineage`): a write or edit made from a conversation's or a
  session's items (`origin`). The server's own code that holds the thread builds the origin; this
  module checks its shape and that its store is of the kind named, and keeps one edge per entry
  and thread whose item ids accumulate over the thread's changes to the entry.

Edges outlive the entries, threads and stores at their ends (shown deleted); erasing a scope
deletes every edge with the scope at either end (`erase_scope`).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import UTC, datetime

import asyncpg

from catalog.access import SecurableType
from catalog.auth import Principal
from catalog.context import Context
from catalog.errors import InvalidParameter, NotFound
from catalog.lineage import repo
from catalog.lineage.repo import EntryRef, TranscriptRef
from catalog.lineage.schemas import (
    CatalogRunFacet,
    Dataset,
    Job,
    Lineage,
    LineageEdge,
    LineageEnd,
    OpenLineageEvents,
    OriginEdge,
    Run,
    RunEvent,
    RunFacets,
    TranscriptEnd,
)
from catalog.wire.entry_keys import validate_path, validate_scope, validate_session
from catalog.wire.inputs import has_control
from catalog.wire.names import split_full_name
from catalog.wire.pagination import page_size

MAX_DEPTH = 10
DEFAULT_DEPTH = 5
# the last millisecond a Python datetime (and so a filter) can name: 9999-12-31T23:59:59.999Z
MAX_EPOCH_MS = 253402300799999
MAX_ORIGIN_ITEMS = 1000  # item ids one change may name
MAX_THREAD_ID = 256  # a session id (a conversation id is at most 128)
MAX_ITEM_ID = 128  # a conversation item's id (a session item's is a uuid)
Edge = tuple[asyncpg.Record, int]  # an edge's row and its depth (hops from what was asked about)
_STORE_KIND = {"conversation": "memory", "session": "session"}


def _text(value: object, field: str, limit: int) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= limit or has_control(value):
        raise InvalidParameter(f"{field} must be 1-{limit} characters without control characters", field)
    return value


def check_origin(
    kind: str,
    store: str,
    store_id: str,
    scope: str,
    thread_id: str,
    item_ids: Sequence[str],
    field: str = "origin",
) -> TranscriptRef:
    """A change's transcript origin, checked for shape (400 naming `origin.<field>`); its store
    is checked against its id when the edge is recorded. Repeated item ids count once."""
    if kind not in _STORE_KIND:
        raise InvalidParameter(f"{field}.kind must be conversation or session", f"{field}.kind")
    store_name = ".".join(split_full_name(store, 3, f"{field}.store"))
    try:
        store_uuid = str(uuid.UUID(store_id))
    except (TypeError, ValueError, AttributeError):
        raise InvalidParameter(
            f"{field}.store_id must be a store's id (a uuid)", f"{field}.store_id"
        ) from None
    if len(item_ids) > MAX_ORIGIN_ITEMS:
        raise InvalidParameter(
            f"at most {MAX_ORIGIN_ITEMS} item ids in {field}.item_ids", f"{field}.item_ids"
        )
    items = [_text(item, f"{field}.item_ids[{i}]", MAX_ITEM_ID) for i, item in enumerate(item_ids)]
    return TranscriptRef(
        kind=kind,
        store_id=store_uuid,
        store_name=store_name,
        scope=validate_scope(scope, f"{field}.scope"),
        thread_id=_text(thread_id, f"{field}.thread_id", MAX_THREAD_ID),
        item_ids=tuple(dict.fromkeys(items)),
    )


async def record(
    conn: asyncpg.Connection,
    by: str,
    target: EntryRef,
    sources: Sequence[EntryRef],
    origin: TranscriptRef | None = None,
) -> None:
    """The edges of a change to `target` derived from `sources` and/or a transcript (within the
    change's transaction). An origin whose store id names no store of its kind, or a store of
    another name, is refused (400), and the change with it."""
    if sources:
        await repo.add_edges(conn, target, sources, by)
    if origin is not None:
        found = await repo.store_kind(conn, origin.store_id)
        kind = _STORE_KIND[origin.kind]
        if found is None or found[0] != kind:
            raise InvalidParameter(
                f"origin.store_id: no {kind} store has the id {origin.store_id}", "origin.store_id"
            )
        if found[1] != origin.store_name:
            raise InvalidParameter(
                f"origin.store: the store {origin.store_id} is {found[1]}, not {origin.store_name}",
                "origin.store",
            )
        await repo.add_origin(conn, target, origin, by)


async def erase_scope(
    conn: asyncpg.Connection, store_id: str | None, scope: str, *, subject: bool = False
) -> int:
    """Delete the edges (entry to entry, transcript to entry) with the scope (with `subject`: or
    a scope starting `scope:`) at either end, in one store or (None) in every store, within the
    erasing transaction (`catalog.erasure`); how many."""
    return await repo.erase_scope(conn, store_id, scope, subject=subject)


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
    # a store of either kind: downstream of a session store are the entries written from its sessions
    store = await ctx.access.locate(SecurableType.MEMORY_STORE, parts, store_kind=None)
    if not store.exists:
        raise NotFound(f"memory store {store.full_name} does not exist")
    upstream = direction == "upstream"
    whole_store = scope is None and path is None
    if not whole_store:
        key_scope, key_path = validate_scope(scope), validate_path(path)
        found = await repo.entry_id(
            ctx.pool, store.node.id, key_scope, validate_session(session_id), key_path
        )
        if found is None:
            raise NotFound(f"no entry at {key_path} in scope {key_scope}")
        start = [found]
    else:
        start = await repo.store_entry_ids(ctx.pool, store.node.id, upstream)
    edges: dict[tuple[str, str], Edge] = {}
    if start:
        edges = {_pair(e): (e, e["depth"]) for e in await repo.entry_edges(ctx.pool, start, upstream, hops)}
    if upstream:
        origins = await _origins_upstream(ctx, start, edges, hops)
    elif whole_store:
        origins = await _from_transcripts(ctx, store.node.id, edges, hops)
    else:
        origins = []  # downstream of one entry: no transcript is downstream of an entry
    return Lineage(
        securable_full_name=store.full_name,
        direction="upstream" if upstream else "downstream",
        edges=[
            LineageEdge(source=_end(e, "source"), target=_end(e, "target"), depth=depth)
            for e, depth in sorted(
                edges.values(), key=lambda x: (x[1], x[0]["target_path"], x[0]["source_path"])
            )
        ],
        origins=[
            OriginEdge(source=_transcript_end(row), target=_end(row, "target"), depth=depth)
            for row, depth in sorted(
                origins,
                key=lambda x: (x[1], x[0]["target_path"], x[0]["source_kind"], x[0]["source_thread_id"]),
            )
        ],
    )


def _pair(edge: asyncpg.Record) -> tuple[str, str]:
    return str(edge["target_entry_id"]), str(edge["source_entry_id"])


async def _origins_upstream(
    ctx: Context, start: Sequence[str], edges: dict[tuple[str, str], Edge], hops: int
) -> list[Edge]:
    """The transcripts of every entry reached upstream, one hop past the entry's nearest depth
    (the entries asked about are at 0)."""
    reached = dict.fromkeys(start, 0)
    for e, depth in edges.values():
        source = str(e["source_entry_id"])
        reached[source] = min(reached.get(source, depth), depth)
    near = [entry for entry, depth in reached.items() if depth < hops]
    if not near:
        return []
    rows = await repo.origins_of(ctx.pool, near)
    return [(row, reached[str(row["target_entry_id"])] + 1) for row in rows]


async def _from_transcripts(
    ctx: Context, store_id: str, edges: dict[tuple[str, str], Edge], hops: int
) -> list[Edge]:
    """Downstream of a store's conversations or sessions: the entries written from them (depth 1),
    returned, and what was derived from those entries, merged into `edges` one hop further than
    a walk from them alone (an edge keeps its nearest depth)."""
    rows = await repo.origins_from_store(ctx.pool, store_id)
    written = list(dict.fromkeys(str(row["target_entry_id"]) for row in rows))
    if written and hops > 1:
        for e in await repo.entry_edges(ctx.pool, written, False, hops - 1):
            known = edges.get(_pair(e))
            if known is None or known[1] > e["depth"] + 1:
                edges[_pair(e)] = (e, e["depth"] + 1)
    return [(row, 1) for row in rows]


def _transcript_end(row: asyncpg.Record) -> TranscriptEnd:
    conversation = row["source_kind"] == "conversation"
    return TranscriptEnd(
        kind=row["source_kind"],
        memory_store=row["source_store"],
        scope=row["source_scope"],
        conversation_id=row["source_thread_id"] if conversation else None,
        session_id=None if conversation else row["source_thread_id"],
        item_ids=list(row["source_item_ids"]),
        deleted=not row["source_exists"],
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
