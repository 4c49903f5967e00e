"""Wire types of the entries API (Unity Catalog dialect). Inputs forbid unknown fields."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from catalog.entries.operations import EntryState, SearchMode, WriteMode
from catalog.search import Explained, HitScores
from catalog.wire import Degraded, Input, Output
from catalog.wire.entry_keys import MAX_SCOPES, EntryPath, PathPrefix, SessionId
from catalog.wire.inputs import NO_NUL, NOT_BLANK, Scope
from catalog.wire.metadata import Metadata
from catalog.wire.names import StoreFullName

MAX_CONTENTS = 512 * 1024  # characters
MAX_DESCRIPTION = 4096
MAX_SOURCE_TYPE = 64
MAX_CREATION_FIELD = 64  # creation_reason, creation_source
MAX_QUERY = 4096
MAX_TOP_K = 100
MAX_SOURCES = 100
MAX_TTL_SECONDS = 10 * 366 * 24 * 3600  # ten years

# Too long is 413 (PAYLOAD_TOO_LARGE), answered by the service: the length is documented here.
Contents = Annotated[str, msgspec.Meta(pattern=NO_NUL, extra_json_schema={"maxLength": MAX_CONTENTS})]
Description = Annotated[str, msgspec.Meta(pattern=NO_NUL, extra_json_schema={"maxLength": MAX_DESCRIPTION})]
SourceType = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_SOURCE_TYPE, pattern=NO_NUL)]
CreationField = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_CREATION_FIELD, pattern=NO_NUL)]


# the latest time an as-of read may name (9999-12-31T23:59:59.999Z, epoch ms); later than now is refused
AS_OF_MAX = 253_402_300_799_999


class SourceRef(Input, kw_only=True):
    """An entry this one was derived from."""

    memory_store: StoreFullName
    scope: Scope
    path: EntryPath
    session_id: SessionId | None = None


class EntryFields(Input, kw_only=True):
    path: EntryPath
    contents: Contents | None = None
    description: Description | None = None
    session_id: SessionId | None = None
    source_type: SourceType | None = None
    # free strings naming why and from where the entry was written (Databricks' managed-memory
    # tools send CREATION_REASON_AGENT_INFERRED and CREATION_SOURCE_ONLINE_AGENT)
    creation_reason: CreationField | None = None
    creation_source: CreationField | None = None
    write_mode: WriteMode | None = None
    derived_from: Annotated[list[SourceRef], msgspec.Meta(max_length=MAX_SOURCES)] | None = None
    # the entry expires this long after the write (else the store's default_ttl_seconds, if any)
    ttl_seconds: Annotated[int, msgspec.Meta(ge=1, le=MAX_TTL_SECONDS)] | None = None
    # at most 32 keys with string, number or boolean values; an overwrite or append without it
    # keeps the entry's, `{}` clears it
    metadata: Metadata | None = None


class EntryCreate(EntryFields, kw_only=True):
    """`{path, contents?, ...}` with `?scope=`, or `{scope, memory_entry: {...}}`."""

    scope: Scope | None = None
    memory_entry: EntryFields | None = None
    path: EntryPath | None = None  # type: ignore[assignment]


class StrReplace(Input, kw_only=True):
    old_str: Annotated[str, msgspec.Meta(min_length=1, pattern=NO_NUL)]
    new_str: Annotated[str, msgspec.Meta(pattern=NO_NUL)]


class Insert(Input, kw_only=True):
    insert_text: Annotated[str, msgspec.Meta(pattern=NO_NUL)]
    # a line number of the contents: 0 inserts before the first line (contents hold at most
    # MAX_CONTENTS characters, so at most MAX_CONTENTS + 1 lines); absent: after the last line
    insert_line: Annotated[int, msgspec.Meta(ge=0, le=MAX_CONTENTS + 1)] | None = None


class ReplaceAll(Input, kw_only=True):
    contents: Contents


class Append(Input, kw_only=True):
    text: Annotated[str, msgspec.Meta(pattern=NO_NUL)]


class EntryEdit(Input, kw_only=True):
    scope: Scope
    path: EntryPath
    session_id: SessionId | None = None
    description: Description | None = None
    str_replace: StrReplace | None = None
    insert: Insert | None = None
    replace_all: ReplaceAll | None = None
    append: Append | None = None
    metadata: Metadata | None = None  # replaces the entry's metadata (`{}` clears it)
    # renews the expiry: the entry expires this long from now; alone, it changes nothing else
    # (no new version: the contents are the same)
    ttl_seconds: Annotated[int, msgspec.Meta(ge=1, le=MAX_TTL_SECONDS)] | None = None


class SearchRequest(Input, kw_only=True):
    query: Annotated[str, msgspec.Meta(max_length=MAX_QUERY, pattern=NOT_BLANK)]
    scope: Scope | None = None
    scopes: Annotated[list[Scope], msgspec.Meta(max_length=MAX_SCOPES)] | None = None
    top_k: Annotated[int, msgspec.Meta(ge=1, le=MAX_TOP_K)] = 10
    path_prefix: PathPrefix | None = None
    session_id: SessionId | None = None
    min_score: float | None = None
    mode: SearchMode = "hybrid"
    # only entries whose metadata equals every pair given (inside the keyword and vector searches)
    filter: Metadata | None = None
    explain: bool = False  # each hit's score_details and the request's legs (SearchResponse.explain)
    include_superseded: bool = False  # superseded and merged entries too
    # entries held for review too: all of them for a MANAGE holder, one's own for anyone else
    include_quarantined: bool = False
    # epoch ms: search the entries as they were then, from the kept history
    as_of: Annotated[int, msgspec.Meta(ge=0, le=AS_OF_MAX)] | None = None


# forget by query: a hundred entries at most per request, at or above the recommended floor of a
# search's scores (docs/entries/search.md) unless the request names another
MAX_DELETE_MATCHING = 100
DELETE_MATCHING_FLOOR = 0.5
MinScoreFloor = Annotated[
    float,
    msgspec.Meta(gt=0, le=1, description="the score a match needs (default: a search's recommended floor)"),
]


class DeleteMatchingRequest(Input, kw_only=True):
    """Delete the entries a search for `query` answers at or above `min_score`."""

    query: Annotated[str, msgspec.Meta(max_length=MAX_QUERY, pattern=NOT_BLANK)]
    scope: Scope | None = None
    scopes: Annotated[list[Scope], msgspec.Meta(max_length=MAX_SCOPES)] | None = None
    mode: SearchMode = "hybrid"
    min_score: MinScoreFloor = DELETE_MATCHING_FLOOR
    path_prefix: PathPrefix | None = None
    session_id: SessionId | None = None
    dry_run: bool = False  # name the entries that would be deleted, and delete nothing


class DeletedEntry(msgspec.Struct, omit_defaults=True, kw_only=True):
    scope: str
    path: str
    session_id: str | None = None


class DeleteMatchingResponse(msgspec.Struct, kw_only=True):
    deleted: list[DeletedEntry]  # best match first (in a dry run: the entries that would be deleted)
    truncated: bool  # more entries matched than one request deletes: send it again


class SourceEntry(msgspec.Struct, omit_defaults=True, kw_only=True):
    memory_store: str
    scope: str
    path: str
    session_id: str | None = None


class ProvenanceSource(msgspec.Struct, omit_defaults=True, kw_only=True):
    """What a version was derived from (the lineage recorded with it)."""

    conversation: str | None = None  # a conversation id (responses) ...
    memory_store: str | None = None  # ... and the memory store it is kept in
    session: str | None = None  # a session id (extraction, a pipeline) ...
    session_store: str | None = None  # ... and its session store
    items: list[str] | None = None  # the conversation's or session's items (at most 20 named)
    items_total: int | None = None  # how many items, when more than are named
    entries: list[SourceEntry] | None = None  # the entries it was derived from (`derived_from`)
    restored_version: int | None = None  # `entries:restore`: the version written again


class TrustNote(msgspec.Struct, omit_defaults=True, kw_only=True):
    """What the store's trust policy decided for the change."""

    decision: str  # trust | screen | review
    held: bool  # kept quarantined until reviewed
    rules: list[str] | None = None  # the screen's rules that matched
    classifier: str | None = None  # instruction | data | unavailable, when the upstream model judged it


class ReviewNote(msgspec.Struct, omit_defaults=True, kw_only=True):
    decision: str  # approved | rejected
    by: str
    at: int  # epoch milliseconds
    via: str | None = None  # rest | console
    reason: str | None = None


class Provenance(msgspec.Struct, omit_defaults=True, kw_only=True, rename={"class_": "class"}):
    """Where a version's text came from, as the server saw the change arrive (never as the client
    said): docs/governance/trust.md."""

    principal: str  # who wrote it (the token's subject)
    on_behalf_of: str | None = None  # the end user the token acted for
    # rest | agents | console | mcp | responses | extraction | pipeline | maintenance | import;
    # absent: written before provenance was kept
    via: str | None = None
    model: str | None = None  # the upstream model that wrote it, where one did
    class_: str  # person | application | model | unknown
    source: ProvenanceSource | None = None
    trust: TrustNote | None = None
    review: ReviewNote | None = None


class Entry(msgspec.Struct, omit_defaults=True, kw_only=True):
    scope: str
    path: str
    session_id: str | None = None
    contents: str | None = None
    description: str | None = None
    source_type: str | None = None
    creation_reason: str | None = None
    creation_source: str | None = None
    created_at: int
    created_by: str
    updated_at: int
    updated_by: str
    etag: str
    expires_at: int | None = None  # epoch milliseconds; absent: never
    metadata: dict[str, Any] | None = None
    state: str  # active | superseded | merged | quarantined (held for review)
    superseded_by: EntryKey | None = None  # the entry replacing it (superseded or merged)
    # who imported it from an archive (created_by is the archive's author); absent: written here
    imported_by: str | None = None
    provenance: Provenance  # where its current text came from


class EntryKey(msgspec.Struct, omit_defaults=True, kw_only=True):
    scope: str
    path: str
    session_id: str | None = None


class EntrySummary(msgspec.Struct, omit_defaults=True, kw_only=True):
    path: str
    description: str | None = None
    has_contents: bool
    session_id: str | None = None
    updated_at: int
    scope: str | None = None
    metadata: dict[str, Any] | None = None
    state: str = "active"  # absent: active
    provenance: Provenance | None = None


class ListEntriesResponse(msgspec.Struct, omit_defaults=True, kw_only=True):
    entries: list[EntrySummary]
    next_page_token: str | None = None


class ScoreDetails(msgspec.Struct, omit_defaults=True, kw_only=True):
    """How a hit's score was made (an explained search): `keyword` from `coverage` (its share of
    the query's term weight) and BM25's raw `bm25` where BM25 found it; `semantic` from `cosine`
    where it has a vector; `fused`, the mode's own score of the entry; `neighbour_lift`, what its
    numbered neighbours added; `score` = fused + neighbour_lift (what the hit answers)."""

    score: float
    fused: float
    neighbour_lift: float
    keyword: float | None = None
    coverage: float | None = None
    bm25: float | None = None
    semantic: float | None = None
    cosine: float | None = None


class SearchLegReport(msgspec.Struct, kw_only=True):
    """One leg of an explained search: its candidates, its time, and whether it may have missed
    entries (then it is in `degraded` too)."""

    leg: str
    candidates: int
    ms: float
    degraded: bool


class SearchExplain(msgspec.Struct, omit_defaults=True, kw_only=True):
    legs: list[SearchLegReport]  # the legs that ran, in order
    fusion_ms: float | None = None  # hybrid mode: scoring the legs' candidates together


def score_details(scores: HitScores) -> ScoreDetails:
    def r(x: float | None) -> float | None:
        return None if x is None else round(x, 6)

    return ScoreDetails(
        score=round(scores.score, 6),
        fused=round(scores.fused, 6),
        neighbour_lift=round(scores.neighbour_lift, 6),
        keyword=r(scores.keyword),
        coverage=r(scores.coverage),
        bm25=r(scores.bm25),
        semantic=r(scores.semantic),
        cosine=r(scores.cosine),
    )


def search_explain(explained: Explained | None) -> SearchExplain | None:
    if explained is None:
        return None
    legs = [
        SearchLegReport(leg=r.leg, candidates=r.candidates, ms=round(r.ms, 3), degraded=not r.complete)
        for r in explained.legs
    ]
    fusion = None if explained.fusion_ms is None else round(explained.fusion_ms, 3)
    return SearchExplain(legs=legs, fusion_ms=fusion)


class SearchResult(msgspec.Struct, omit_defaults=True, kw_only=True):
    memory_entry: Entry
    score: float
    score_details: ScoreDetails | None = None  # an explained search only


class SearchResponse(Output):
    results: list[SearchResult]
    degraded: Degraded = None
    explain: SearchExplain | None = None  # an explained search only


MAX_BATCH = 100


class BatchCreateRequest(Input, kw_only=True):
    entries: Annotated[list[EntryFields], msgspec.Meta(min_length=1, max_length=MAX_BATCH)]
    write_mode: WriteMode | None = None  # for every entry that does not name its own


class BatchResultItem(msgspec.Struct, omit_defaults=True, kw_only=True):
    path: str
    status: str  # CREATED, UPDATED, UNCHANGED or FAILED
    error_code: str | None = None
    message: str | None = None
    held: bool = False  # written, and held for review by the store's trust policy


class BatchCreateResponse(msgspec.Struct, kw_only=True):
    results: list[BatchResultItem]  # one per entry, in order


class EntryVersion(msgspec.Struct, omit_defaults=True, kw_only=True):
    etag: str  # the entry's ETag at this version (what `entries:restore` takes)
    contents: str | None = None
    description: str | None = None
    metadata: dict[str, Any] | None = None
    operation: str  # create | update | restore | delete
    updated_at: int
    updated_by: str
    redacted: Redaction | None = None  # its contents and description were redacted
    state: str = "active"  # its state at this version (absent: active)
    superseded_by: EntryKey | None = None  # the entry replacing it then (superseded, merged)
    # who imported this version from an archive (updated_by is the archive's author); absent:
    # written here
    imported_by: str | None = None
    provenance: Provenance | None = None  # where its text (or the deletion) came from
    # held for review: its text is answered only to MANAGE holders and its author
    withheld: bool = False


class Redaction(msgspec.Struct, kw_only=True):
    redacted_at: int  # epoch milliseconds
    redacted_by: str
    reason: str


class HistoryResponse(msgspec.Struct, kw_only=True):
    versions: list[EntryVersion]  # newest first


class StateKey(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    scope: Scope | None = None  # the entry's own scope when absent
    path: EntryPath
    session_id: SessionId | None = None


class SetStateRequest(Input, kw_only=True):
    scope: Scope
    path: EntryPath
    session_id: SessionId | None = None
    state: EntryState
    superseded_by: StateKey | None = None  # the entry replacing it (superseded, merged); none when active


MAX_REDACTION_REASON = 1000


class RedactRequest(Input, kw_only=True):
    scope: Scope
    path: EntryPath
    session_id: SessionId | None = None
    etag: Annotated[
        str, msgspec.Meta(pattern=r'^(W/)?"?[0-9]{1,18}"?$', description="a version's etag from the history")
    ]
    reason: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_REDACTION_REASON, pattern=NOT_BLANK)]


class RedactResponse(msgspec.Struct, kw_only=True):
    etag: str  # the version redacted
    redacted: Redaction
    current: bool  # whether it was the entry's current version (then the entry's text is gone too)


class RestoreRequest(Input, kw_only=True):
    scope: Scope
    path: EntryPath
    session_id: SessionId | None = None
    etag: Annotated[
        str, msgspec.Meta(pattern=r'^(W/)?"?[0-9]{1,18}"?$', description="a version's etag from the history")
    ]


ReviewDecision = Literal["approve", "reject"]


class ReviewRequest(Input, kw_only=True):
    """Approve or reject an entry held for review."""

    scope: Scope
    path: EntryPath
    session_id: SessionId | None = None
    decision: ReviewDecision
    # the held version decided on (409 ABORTED when the entry moved on since it was read)
    etag: (
        Annotated[str, msgspec.Meta(pattern=r'^(W/)?"?[0-9]{1,18}"?$', description="the held version's etag")]
        | None
    ) = None
    reason: Annotated[str, msgspec.Meta(min_length=1, max_length=1000, pattern=NOT_BLANK)] | None = None


class ReviewResponse(msgspec.Struct, omit_defaults=True, kw_only=True):
    decision: ReviewDecision
    # the entry now: active (approved), or as it was before the held writes (rejected); absent when
    # a rejection deleted it (it had no earlier text)
    memory_entry: Entry | None = None
    deleted: bool = False


class QuarantinedResponse(msgspec.Struct, omit_defaults=True, kw_only=True):
    entries: list[Entry]  # held for review, by scope, session and path
    next_page_token: str | None = None
