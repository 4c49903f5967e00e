"""Entries routes (Unity Catalog dialect), under `/memory-stores/{full_name}`.

`route_handlers` are mounted, with the DELETE of the same path (one entry, or every entry of a
scope in the store: an erasure), by `catalog.erasure.routes`: a path's handlers are registered
in one router, and erasing a scope reaches slices above this one."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

import msgspec
from litestar import Response, get, patch, post
from litestar.datastructures import ResponseHeader
from litestar.params import HeaderParameter, JSONBody, Parameter, QueryParameter

from catalog.entries import EntryRow, provenance, service
from catalog.entries import operations as ops
from catalog.entries.operations import WriteMode
from catalog.entries.repo import VersionRow
from catalog.entries.schemas import (
    AS_OF_MAX,
    BatchCreateRequest,
    BatchCreateResponse,
    BatchResultItem,
    DeletedEntry,
    DeleteMatchingRequest,
    DeleteMatchingResponse,
    Entry,
    EntryCreate,
    EntryEdit,
    EntryFields,
    EntryKey,
    EntrySummary,
    EntryVersion,
    HistoryResponse,
    ListEntriesResponse,
    Provenance,
    QuarantinedResponse,
    Redaction,
    RedactRequest,
    RedactResponse,
    RestoreRequest,
    ReviewRequest,
    ReviewResponse,
    SearchRequest,
    SearchResponse,
    SearchResult,
    SetStateRequest,
    score_details,
    search_explain,
)
from catalog.errors import InvalidParameter
from catalog.web.deps import Ctx, Req
from catalog.web.openapi import errors
from catalog.wire.entry_keys import (
    MAX_PATH,
    MAX_SCOPES,
    PREFIX_PATTERN,
    SCOPE_SCHEMA,
    PathParam,
    RequiredScopeParam,
    ScopeParam,
    SessionParam,
    StoreFullNameParam,
    validate_scopes,
)
from catalog.wire.inputs import NO_NUL
from catalog.wire.metadata import validate as validate_metadata
from catalog.wire.pagination import PageSize, PageToken

StoreFullName = StoreFullNameParam
EntryPath = PathParam
SessionId = SessionParam
RequiredScope = RequiredScopeParam

# `"3"`, `W/"3"`, `3`, `*` or empty: an ETag this API returned (versions fit in a bigint)
IF_MATCH_PATTERN = r'^(\*|(W/)?"[0-9]{1,18}"|[0-9]{1,18})?$'
_IF_MATCH = re.compile(IF_MATCH_PATTERN)
IfMatch = Annotated[
    str | None,
    HeaderParameter(
        name="If-Match",
        description="the ETag of the version this change expects; 409 ABORTED when the entry moved on",
        schema_extra={"pattern": IF_MATCH_PATTERN},
    ),
]


def parse_if_match(value: str | None) -> int | None:
    if value is None or value in ("", "*"):
        return None
    if not _IF_MATCH.fullmatch(value):
        raise InvalidParameter("If-Match must be an ETag returned by this API (or *)", "If-Match")
    return int(value.removeprefix("W/").strip('"'))


# --- replies ---------------------------------------------------------------------------------------


MAX_FILTER_TEXT = 4096  # characters of the `filter` query parameter (JSON; a URL must stay short)


def parse_filter(text: str | None) -> dict[str, Any] | None:
    """The `filter` query parameter: a JSON object of metadata pairs (400 naming `filter`)."""
    if text is None or not text.strip():
        return None
    try:
        value = json.loads(text)
    except ValueError:
        raise InvalidParameter('filter must be a JSON object, e.g. {"topic": "food"}', "filter") from None
    if not isinstance(value, dict):
        raise InvalidParameter('filter must be a JSON object, e.g. {"topic": "food"}', "filter")
    return validate_metadata(value, "filter")


def to_provenance(value: dict[str, Any] | None, author: str) -> Provenance:
    """A stored provenance as answered (`catalog.entries.provenance.answer`)."""
    return msgspec.convert(provenance.answer(value, author), Provenance)


def to_entry(row: EntryRow, *, readable: bool = True) -> Entry:
    """The entry as answered; `readable=False` (a caller who may write but not read) leaves out
    everything it holds: only its key, times, authors, etag and state are acknowledged."""
    return Entry(
        scope=row.scope,
        path=row.path,
        session_id=row.session_id or None,
        contents=row.contents if readable else None,
        description=row.description if readable else None,
        source_type=row.source_type if readable else None,
        creation_reason=row.creation_reason if readable else None,
        creation_source=row.creation_source if readable else None,
        created_at=row.created_at,
        created_by=row.created_by,
        updated_at=row.updated_at,
        updated_by=row.updated_by,
        etag=str(row.version),
        expires_at=row.expires_at,
        metadata=(row.metadata or None) if readable else None,
        state=row.state,
        superseded_by=_key_of(row.superseded_by) if readable else None,  # names another entry
        imported_by=row.imported_by,
        provenance=to_provenance(row.provenance, row.updated_by),
    )


def _key_of(key: dict[str, str] | None) -> EntryKey | None:
    if key is None:
        return None
    return EntryKey(scope=key["scope"], path=key["path"], session_id=key.get("session_id") or None)


def _summary(row: EntryRow, many: bool) -> EntrySummary:
    return EntrySummary(
        path=row.path,
        description=row.description,
        has_contents=row.has_contents,
        session_id=row.session_id or None,
        updated_at=row.updated_at,
        scope=row.scope if many else None,
        metadata=row.metadata or None,
        state=row.state,
        provenance=to_provenance(row.provenance, row.updated_by),
    )


def _write(full_name: str, scope: str | None, body: EntryCreate) -> ops.Write:
    """`{path, contents?, ...}` with `?scope=`, or `{scope, memory_entry: {...}}`."""
    fields: EntryFields = body
    if body.memory_entry is not None:
        if body.path is not None or body.contents is not None:
            raise InvalidParameter(
                "give the entry either at the top level or as memory_entry", "memory_entry"
            )
        fields = body.memory_entry
    if body.scope is not None and scope is not None and body.scope != scope:
        raise InvalidParameter("scope in the query and in the body differ", "scope")
    return _write_op(full_name, scope if scope is not None else body.scope or "", fields, None)


def _write_op(full_name: str, scope: str, fields: EntryFields, default_mode: WriteMode | None) -> ops.Write:
    """One entry's write as given (alone, or in a batch whose `write_mode` is `default_mode`)."""
    return ops.Write(
        store=full_name,
        key=ops.ByKey(scope=scope, path=fields.path or "", session_id=fields.session_id),
        contents=fields.contents,
        description=fields.description,
        source_type=fields.source_type,
        creation_reason=fields.creation_reason,
        creation_source=fields.creation_source,
        mode=fields.write_mode or default_mode or "EXCLUSIVE",
        ttl_seconds=fields.ttl_seconds,
        metadata=fields.metadata,
        derived_from=tuple(
            ops.Source(
                store=ref.memory_store,
                key=ops.ByKey(scope=ref.scope, path=ref.path, session_id=ref.session_id),
            )
            for ref in fields.derived_from or ()
        ),
    )


def _change(body: EntryEdit) -> ops.Change | None:
    given = [op for op in (body.str_replace, body.insert, body.replace_all, body.append) if op is not None]
    if len(given) > 1:
        raise InvalidParameter("give one of str_replace, insert, replace_all, append", "str_replace")
    if body.str_replace is not None:
        return ops.StrReplace(old=body.str_replace.old_str, new=body.str_replace.new_str)
    if body.insert is not None:
        return ops.Insert(text=body.insert.insert_text, line=body.insert.insert_line)
    if body.replace_all is not None:
        return ops.ReplaceAll(contents=body.replace_all.contents)
    if body.append is not None:
        return ops.Append(text=body.append.text)
    return None


ETAG = [
    ResponseHeader(
        name="ETag",
        value='"1"',
        documentation_only=True,
        required=True,
        description="the entry's version, quoted; send it back as If-Match",
    )
]


def _with_etag(entry: Entry) -> Response[Entry]:
    return Response(entry, status_code=200, headers={"ETag": f'"{entry.etag}"'})


@post(
    "/{full_name:str}/entries",
    status_code=200,
    operation_id="createEntry",
    response_headers=ETAG,
    responses=errors(404, 409, 413),
)
async def create_entry(
    request: Req,
    ctx: Ctx,
    full_name: StoreFullName,
    data: JSONBody[EntryCreate],
    entry_scope: ScopeParam = None,
) -> Response[Entry]:
    written = await service.write(ctx, request.user, _write(full_name, entry_scope, data))
    return _with_etag(to_entry(written.row, readable=written.readable))


# an auditor's view of the store as it was: the kept history at that time (epoch milliseconds)
AsOf = Annotated[
    int | None,
    Parameter(
        ge=0,
        le=AS_OF_MAX,
        schema_extra={"minimum": 0},  # ge=0 alone leaves the document without it
        description="epoch milliseconds: answer the entries as they were then, from the kept history "
        "(deleted entries that existed then included, later writes left out)",
    ),
]


IncludeQuarantined = Annotated[
    bool,
    Parameter(
        description="entries held for review by the store's trust policy too: every one for a MANAGE "
        "holder, one's own for their author (anyone else: as if they were not there)"
    ),
]


@get("/{full_name:str}/entries:get", operation_id="getEntry", response_headers=ETAG, responses=errors(404))
async def get_entry(
    request: Req,
    ctx: Ctx,
    full_name: StoreFullName,
    entry_scope: RequiredScope,
    path: EntryPath,
    session_id: SessionId = None,
    as_of: AsOf = None,
    include_quarantined: IncludeQuarantined = False,
) -> Response[Entry]:
    key = ops.ByKey(scope=entry_scope, path=path, session_id=session_id)
    op = ops.Get(store=full_name, target=key, as_of=as_of, include_quarantined=include_quarantined)
    got = await service.get(ctx, request.user, op)
    return _with_etag(to_entry(got))


@get("/{full_name:str}/entries", operation_id="listEntries", responses=errors(404))
async def list_entries(
    request: Req,
    ctx: Ctx,
    full_name: StoreFullName,
    entry_scope: ScopeParam = None,
    scopes: Annotated[
        list[str] | None,
        Parameter(
            max_items=MAX_SCOPES,
            description="several scopes at once (with or instead of `scope`; at most 20 in all)",
            schema_extra={"items": {"type": "string", **SCOPE_SCHEMA}},
        ),
    ] = None,
    path_prefix: Annotated[
        str | None, Parameter(max_length=MAX_PATH, pattern=PREFIX_PATTERN, description="only paths under it")
    ] = None,
    session_id: SessionId = None,
    page_size: PageSize = None,
    page_token: PageToken = None,
    metadata_filter: Annotated[
        str | None,
        QueryParameter(
            name="filter",
            max_length=MAX_FILTER_TEXT,
            pattern=NO_NUL,
            description='only entries whose metadata holds every pair of this JSON object: {"topic": "food"}',
        ),
    ] = None,
    as_of: AsOf = None,
    include_superseded: Annotated[
        bool, Parameter(description="superseded and merged entries too (else only active ones)")
    ] = False,
    include_quarantined: IncludeQuarantined = False,
) -> ListEntriesResponse:
    listing = ops.List(
        store=full_name,
        scopes=tuple(validate_scopes(entry_scope, scopes)),
        path_prefix=path_prefix,
        session_id=session_id,
        page_size=page_size,
        page_token=page_token,
        where=parse_filter(metadata_filter),
        as_of=as_of,
        include_superseded=include_superseded,
        include_quarantined=include_quarantined,
    )
    page = await service.list_entries(ctx, request.user, listing)
    many = len(listing.scopes) > 1
    return ListEntriesResponse(
        entries=[_summary(row, many) for row in page.rows], next_page_token=page.next_page_token
    )


@patch(
    "/{full_name:str}/entries",
    operation_id="updateEntry",
    response_headers=ETAG,
    responses=errors(404, 409, 413),
)
async def update_entry(
    request: Req, ctx: Ctx, full_name: StoreFullName, data: JSONBody[EntryEdit], if_match: IfMatch = None
) -> Response[Entry]:
    edit = ops.Edit(
        store=full_name,
        target=ops.ByKey(scope=data.scope, path=data.path, session_id=data.session_id),
        change=_change(data),
        description=data.description,
        metadata=data.metadata,
        if_match=parse_if_match(if_match),
        ttl_seconds=data.ttl_seconds,
    )
    written = await service.edit(ctx, request.user, edit)
    return _with_etag(to_entry(written.row, readable=written.readable))


@post(
    "/{full_name:str}/entries:search",
    status_code=200,
    operation_id="searchEntries",
    responses=errors(404, 413),
)
async def search(
    request: Req, ctx: Ctx, full_name: StoreFullName, data: JSONBody[SearchRequest]
) -> SearchResponse:
    query = ops.Search(
        store=full_name,
        scopes=tuple(validate_scopes(data.scope, data.scopes)),
        query=data.query,
        top_k=data.top_k,
        path_prefix=data.path_prefix,
        session_id=data.session_id,
        min_score=data.min_score,
        mode=data.mode,
        where=data.filter,
        explain=data.explain,
        as_of=data.as_of,
        include_superseded=data.include_superseded,
        include_quarantined=data.include_quarantined,
    )
    found = await service.search(ctx, request.user, query)
    details = found.explained.hits if found.explained is not None else {}
    return SearchResponse(
        results=[
            SearchResult(
                memory_entry=to_entry(row),
                score=score,
                score_details=score_details(details[row.id]) if row.id in details else None,
            )
            for row, score in found.hits
        ],
        degraded=list(found.degraded) or None,
        explain=search_explain(found.explained),
    )


@post(
    "/{full_name:str}/entries:deleteMatching",
    status_code=200,
    operation_id="deleteMatchingEntries",
    responses=errors(404, 409, 413),
)
async def delete_matching(
    request: Req, ctx: Ctx, full_name: StoreFullName, data: JSONBody[DeleteMatchingRequest]
) -> DeleteMatchingResponse:
    """Forget by query: delete the entries of the scopes that `entries:search` answers for the
    query at or above `min_score` (default 0.5), at most 100 (`truncated` when more matched;
    `dry_run` names them and deletes nothing). WRITE and READ; 409 under legal hold."""
    op = ops.DeleteMatching(
        store=full_name,
        scopes=tuple(validate_scopes(data.scope, data.scopes)),
        query=data.query,
        mode=data.mode,
        min_score=data.min_score,
        path_prefix=data.path_prefix,
        session_id=data.session_id,
        dry_run=data.dry_run,
    )
    forgotten = await service.delete_matching(ctx, request.user, op)
    return DeleteMatchingResponse(
        deleted=[
            DeletedEntry(scope=row.scope, path=row.path, session_id=row.session_id or None)
            for row in forgotten.rows
        ],
        truncated=forgotten.truncated,
    )


@post(
    "/{full_name:str}/entries:batchCreate",
    status_code=200,
    operation_id="batchCreateEntries",
    responses=errors(404, 413),
)
async def batch_create(
    request: Req,
    ctx: Ctx,
    full_name: StoreFullName,
    data: JSONBody[BatchCreateRequest],
    entry_scope: RequiredScope,
) -> BatchCreateResponse:
    """Up to 100 entries of one scope in one request: one result each, in order (a failed entry
    does not undo the others)."""
    writes = tuple(_write_op(full_name, entry_scope, fields, data.write_mode) for fields in data.entries)
    results = await service.batch_write(
        ctx, request.user, ops.Batch(store=full_name, scope=entry_scope, writes=writes)
    )
    return BatchCreateResponse(
        results=[
            BatchResultItem(
                path=r.path, status=r.status, error_code=r.error_code, message=r.message, held=r.held
            )
            for r in results
        ]
    )


@get("/{full_name:str}/entries:history", operation_id="getEntryHistory", responses=errors(404))
async def entry_history(
    request: Req,
    ctx: Ctx,
    full_name: StoreFullName,
    entry_scope: RequiredScope,
    path: EntryPath,
    session_id: SessionId = None,
) -> HistoryResponse:
    """Every kept version of the entry at this key, newest first (also after it was deleted)."""
    key = ops.ByKey(scope=entry_scope, path=path, session_id=session_id)
    versions = await service.history(ctx, request.user, ops.History(store=full_name, key=key))
    return HistoryResponse(
        versions=[
            EntryVersion(
                etag=str(v.version),
                contents=v.contents,
                description=v.description,
                metadata=v.metadata or None,
                operation=v.operation,
                updated_at=v.changed_at,
                updated_by=v.changed_by,
                redacted=_redaction(v),
                state=v.state,
                superseded_by=_key_of(v.superseded_by),
                imported_by=v.imported_by,
                provenance=to_provenance(v.provenance, v.changed_by),
                withheld=v.withheld,
            )
            for v in versions
        ]
    )


@post(
    "/{full_name:str}/entries:setState",
    status_code=200,
    operation_id="setEntryState",
    response_headers=ETAG,
    responses=errors(404),
)
async def set_entry_state(
    request: Req, ctx: Ctx, full_name: StoreFullName, data: JSONBody[SetStateRequest]
) -> Response[Entry]:
    """Mark the entry superseded by another, merged into another, or active again: lists and
    searches leave superseded and merged entries out unless asked (`include_superseded`)."""
    key = ops.ByKey(scope=data.scope, path=data.path, session_id=data.session_id)
    by = None
    if data.superseded_by is not None:
        other = data.superseded_by
        by = ops.ByKey(scope=other.scope or data.scope, path=other.path, session_id=other.session_id)
    op = ops.SetState(store=full_name, key=key, state=data.state, superseded_by=by)
    return _with_etag(to_entry(await service.set_state(ctx, request.user, op)))


def _redaction(v: VersionRow) -> Redaction | None:
    if v.redacted_at is None:
        return None
    return Redaction(
        redacted_at=v.redacted_at, redacted_by=v.redacted_by or "", reason=v.redaction_reason or ""
    )


@post(
    "/{full_name:str}/entries:redact",
    status_code=200,
    operation_id="redactEntryVersion",
    responses=errors(404, 409),
)
async def redact_entry(
    request: Req, ctx: Ctx, full_name: StoreFullName, data: JSONBody[RedactRequest]
) -> RedactResponse:
    """Redact a version of the entry (MANAGE): its contents and description in the history, and in
    the entry itself when it is the current version, are replaced by who redacted it, when and
    why (for a secret that should never have been saved)."""
    key = ops.ByKey(scope=data.scope, path=data.path, session_id=data.session_id)
    version = int(data.etag.removeprefix("W/").strip('"'))
    op = ops.Redact(store=full_name, key=key, version=version, reason=data.reason)
    kept, current = await service.redact(ctx, request.user, op)
    redaction = _redaction(kept)
    assert redaction is not None
    return RedactResponse(etag=str(kept.version), redacted=redaction, current=current)


@post(
    "/{full_name:str}/entries:restore",
    status_code=200,
    operation_id="restoreEntry",
    response_headers=ETAG,
    responses=errors(404, 409),
)
async def restore_entry(
    request: Req, ctx: Ctx, full_name: StoreFullName, data: JSONBody[RestoreRequest]
) -> Response[Entry]:
    """Write a kept version as the entry's newest (the entry is created again if it was deleted)."""
    key = ops.ByKey(scope=data.scope, path=data.path, session_id=data.session_id)
    version = int(data.etag.removeprefix("W/").strip('"'))
    written = await service.restore(ctx, request.user, ops.Restore(store=full_name, key=key, version=version))
    return _with_etag(to_entry(written.row, readable=True))


@get(
    "/{full_name:str}/entries:quarantined",
    operation_id="listQuarantinedEntries",
    responses=errors(404),
)
async def list_quarantined(
    request: Req,
    ctx: Ctx,
    full_name: StoreFullName,
    entry_scope: ScopeParam = None,
    page_size: PageSize = None,
    page_token: PageToken = None,
) -> QuarantinedResponse:
    """The store's review queue (MANAGE): the entries its trust policy holds, with their contents
    and provenance, by scope, session and path (every scope, or one)."""
    op = ops.Quarantined(store=full_name, scope=entry_scope, page_size=page_size, page_token=page_token)
    page = await service.quarantined(ctx, request.user, op)
    return QuarantinedResponse(
        entries=[to_entry(row) for row in page.rows], next_page_token=page.next_page_token
    )


@post(
    "/{full_name:str}/entries:review",
    status_code=200,
    operation_id="reviewEntry",
    responses=errors(404, 409),
)
async def review_entry(
    request: Req, ctx: Ctx, full_name: StoreFullName, data: JSONBody[ReviewRequest]
) -> ReviewResponse:
    """Approve or reject an entry held for review (MANAGE): approved, its held text is active;
    rejected, the entry is as it was before the held writes, or deleted when it had no earlier
    text. Audited as `entries.review` with the decision."""
    key = ops.ByKey(scope=data.scope, path=data.path, session_id=data.session_id)
    version = None if data.etag is None else int(data.etag.removeprefix("W/").strip('"'))
    op = ops.Review(store=full_name, key=key, decision=data.decision, if_match=version, reason=data.reason)
    reviewed = await service.review(ctx, request.user, op)
    if reviewed.row is None:
        return ReviewResponse(decision=data.decision, deleted=True)
    return ReviewResponse(decision=data.decision, memory_entry=to_entry(reviewed.row))


# the memory store's entries routes but its DELETE (`catalog.erasure.routes` mounts them with it)
route_handlers = [
    create_entry,
    get_entry,
    list_entries,
    update_entry,
    search,
    delete_matching,
    set_entry_state,
    redact_entry,
    entry_history,
    restore_entry,
    batch_create,
    list_quarantined,
    review_entry,
]
