"""Entries routes (Unity Catalog dialect), under `/memory-stores/{full_name}`."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request, Response, delete, get, patch, post
from litestar.datastructures import ResponseHeader
from litestar.di import NamedDependency
from litestar.params import HeaderParameter, JSONBody, Parameter, QueryParameter

from catalog import routing
from catalog.context import Context
from catalog.entries import service
from catalog.entries.schemas import (
    MAX_PATH,
    MAX_SCOPES,
    MAX_SESSION,
    PATH_PATTERN,
    PREFIX_PATTERN,
    SESSION_PATTERN,
    Entry,
    EntryCreate,
    EntryEdit,
    EraseRequest,
    EraseResult,
    ListEntriesResponse,
    SearchRequest,
    SearchResponse,
)
from catalog.errors import InvalidParameter
from catalog.inputs import MAX_SCOPE, NO_CONTROL
from catalog.names import MAX_FULL_NAME, STORE_FULL_NAME_PATTERN
from catalog.openapi import Empty, errors
from catalog.pagination import PageSize, PageToken
from catalog.search.service import search_entries

Req = Request[Any, Any, Any]
Ctx = NamedDependency[Context]

_SCOPE_SCHEMA = {"minLength": 1, "maxLength": MAX_SCOPE, "pattern": NO_CONTROL}
_SCOPE_TEXT = "whose memories (a user, an agent, a team): 1-256 characters, no control characters"
# `scope` is a name Litestar reserves (the ASGI scope), so the query parameter is mapped explicitly;
# its rules are checked by the service (entries.service.validate_scope), which names `scope`.
ScopeParam = Annotated[
    str | None, QueryParameter(name="scope", description=_SCOPE_TEXT, schema_extra=_SCOPE_SCHEMA)
]
RequiredScope = Annotated[
    str, QueryParameter(name="scope", description=_SCOPE_TEXT, schema_extra=_SCOPE_SCHEMA)
]
StoreFullName = Annotated[
    str,
    Parameter(pattern=STORE_FULL_NAME_PATTERN, max_length=MAX_FULL_NAME, description="catalog.schema.store"),
]
EntryPath = Annotated[
    str,
    Parameter(
        pattern=PATH_PATTERN,
        max_length=MAX_PATH,
        description="an absolute path: no empty, '.' or '..' segments, no control characters",
    ),
]
SessionId = Annotated[
    str | None,
    Parameter(
        min_length=1,
        max_length=MAX_SESSION,
        pattern=SESSION_PATTERN,
        description="a session within the scope",
    ),
]
# If-Match is parsed by the service (entries.service.parse_if_match), which names `If-Match`.
IfMatch = Annotated[
    str | None,
    HeaderParameter(
        name="If-Match",
        description="the ETag of the version this change expects; 409 ABORTED when the entry moved on",
        schema_extra={"pattern": service.IF_MATCH_PATTERN},
    ),
]
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
    return _with_etag(await service.create_entry(ctx, request.user, full_name, entry_scope, data))


@get("/{full_name:str}/entries:get", operation_id="getEntry", response_headers=ETAG, responses=errors(404))
async def get_entry(
    request: Req,
    ctx: Ctx,
    full_name: StoreFullName,
    entry_scope: RequiredScope,
    path: EntryPath,
    session_id: SessionId = None,
) -> Response[Entry]:
    return _with_etag(await service.get_entry(ctx, request.user, full_name, entry_scope, path, session_id))


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
            schema_extra={"items": {"type": "string", **_SCOPE_SCHEMA}},
        ),
    ] = None,
    path_prefix: Annotated[
        str | None, Parameter(max_length=MAX_PATH, pattern=PREFIX_PATTERN, description="only paths under it")
    ] = None,
    session_id: SessionId = None,
    page_size: PageSize = None,
    page_token: PageToken = None,
) -> ListEntriesResponse:
    return await service.list_entries(
        ctx,
        request.user,
        full_name,
        service.validate_scopes(entry_scope, scopes),
        path_prefix,
        session_id,
        page_size,
        page_token,
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
    return _with_etag(await service.edit_entry(ctx, request.user, full_name, data, if_match))


@delete("/{full_name:str}/entries", status_code=200, operation_id="deleteEntry", responses=errors(404, 409))
async def delete_entry(
    request: Req,
    ctx: Ctx,
    full_name: StoreFullName,
    entry_scope: RequiredScope,
    path: Annotated[
        str | None, Parameter(pattern=PATH_PATTERN, max_length=MAX_PATH, description="the entry")
    ] = None,
    session_id: SessionId = None,
    all: Annotated[
        bool, Parameter(description="erase every entry of the scope in this store (instead of `path`)")
    ] = False,
    if_match: IfMatch = None,
) -> Empty:
    if all:
        if path is not None:
            raise InvalidParameter("give path or all=true, not both", "path")
        await service.delete_scope(ctx, request.user, full_name, entry_scope)
        return Empty()
    await service.delete_entry(ctx, request.user, full_name, entry_scope, path, session_id, if_match)
    return Empty()


@post(
    "/{full_name:str}/entries:search",
    status_code=200,
    operation_id="searchEntries",
    responses=errors(404, 413),
)
async def search(
    request: Req, ctx: Ctx, full_name: StoreFullName, data: JSONBody[SearchRequest]
) -> SearchResponse:
    return await search_entries(ctx, request.user, full_name, data)


@post("/erase-scope", status_code=200, operation_id="eraseScope", responses=errors(413))
async def erase_scope(request: Req, ctx: Ctx, data: JSONBody[EraseRequest]) -> EraseResult:
    return await service.erase_scope(ctx, request.user, data.scope)


router = routing.router(
    path="/api/2.1/unity-catalog/memory-stores",
    route_handlers=[create_entry, get_entry, list_entries, update_entry, delete_entry, search],
    tags=["entries"],
)
system_router = routing.router(
    path="/api/2.1/unity-catalog/system",
    route_handlers=[erase_scope],
    tags=["system"],
)
