"""Wire types of the lineage API: entry provenance edges (from entries, and from conversations and
sessions), and request lineage as OpenLineage RunEvents
(https://openlineage.io/spec/2-0-2/OpenLineage.json)."""

from __future__ import annotations

from typing import Literal

import msgspec

Direction = Literal["upstream", "downstream"]


class LineageEnd(msgspec.Struct, kw_only=True):
    memory_store: str | None  # None once the store itself is deleted
    scope: str
    path: str
    session_id: str | None
    deleted: bool  # the entry no longer exists (its edges are kept)


class LineageEdge(msgspec.Struct, kw_only=True):
    source: LineageEnd
    target: LineageEnd
    depth: int  # hops from the entries asked about


class TranscriptEnd(msgspec.Struct, kw_only=True):
    """A conversation or a session an entry was written from."""

    kind: Literal["conversation", "session"]
    # the conversation's memory store, or the session store (a store of kind session), as
    # catalog.schema.store; None once the store itself is deleted
    memory_store: str | None
    scope: str  # the conversation's scope; the session's actor
    conversation_id: str | None  # kind conversation
    session_id: str | None  # kind session
    item_ids: list[str]  # the items it was derived from; [] for the whole thread
    deleted: bool  # the conversation or session no longer exists (its edges are kept)


class OriginEdge(msgspec.Struct, kw_only=True):
    source: TranscriptEnd
    target: LineageEnd
    depth: int  # hops from the entries (or the store) asked about


class Lineage(msgspec.Struct, kw_only=True):
    securable_full_name: str
    direction: Direction
    edges: list[LineageEdge]  # entry to entry
    origins: list[OriginEdge] = msgspec.field(default_factory=list)  # conversation or session to entry


class Dataset(msgspec.Struct, kw_only=True):
    namespace: str
    name: str


class Job(msgspec.Struct, kw_only=True):
    namespace: str
    name: str


class CatalogRunFacet(msgspec.Struct, kw_only=True):
    principal: str | None
    on_behalf_of: str | None
    request_id: str
    entry_count: int | None


class RunFacets(msgspec.Struct, kw_only=True):
    catalog: CatalogRunFacet


class Run(msgspec.Struct, kw_only=True, rename={"run_id": "runId"}):
    run_id: str
    facets: RunFacets


class RunEvent(
    msgspec.Struct,
    kw_only=True,
    rename={"event_type": "eventType", "event_time": "eventTime", "schema_url": "schemaURL"},
):
    event_type: Literal["COMPLETE"]
    event_time: str  # RFC 3339, UTC
    producer: str
    schema_url: str
    run: Run
    job: Job
    inputs: list[Dataset]
    outputs: list[Dataset]


class OpenLineageEvents(msgspec.Struct, kw_only=True):
    events: list[RunEvent]
