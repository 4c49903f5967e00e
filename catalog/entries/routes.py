"""Entries routes (Unity Catalog dialect), under `/memory-stores/{full_name}`."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request, Response, Router, delete, get, patch, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, HeaderParameter, JSONBody, QueryParameter

from catalog.context import Context
from catalog.entries import service
from catalog.entries.schemas import (
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
from catalog.search.service import search_entries

Req = Request[Any, Any, Any]
IfMatch = Annotated[str | None, HeaderParameter(name="If-Match")]
# `scope` is a name Litestar reserves (the ASGI scope), so the query parameter is mapped explicitly
ScopeParam = Annotated[str | None, QueryParameter(name="scope")]


def _with_etag(entry: Entry) -> Response[Entry]:
    return Response(entry, status_code=200, headers={"ETag": f'"{entry.etag}"'})


@post("/{full_name:str}/entries", status_code=200, operation_id="createEntry")
async def create_entry(
    request: Req,
    ctx: NamedDependency[Context],
    full_name: FromPath[str],
    data: JSONBody[EntryCreate],
    entry_scope: ScopeParam = None,
) -> Response[Entry]:
    return _with_etag(await service.create_entry(ctx, request.user, full_name, entry_scope, data))


@get("/{full_name:str}/entries:get", operation_id="getEntry")
async def get_entry(
    request: Req,
    ctx: NamedDependency[Context],
    full_name: FromPath[str],
    entry_scope: ScopeParam = None,
    path: FromQuery[str | None] = None,
    session_id: FromQuery[str | None] = None,
) -> Response[Entry]:
    return _with_etag(await service.get_entry(ctx, request.user, full_name, entry_scope, path, session_id))


@get("/{full_name:str}/entries", operation_id="listEntries")
async def list_entries(
    request: Req,
    ctx: NamedDependency[Context],
    full_name: FromPath[str],
    entry_scope: ScopeParam = None,
    scopes: FromQuery[list[str] | None] = None,
    path_prefix: FromQuery[str | None] = None,
    session_id: FromQuery[str | None] = None,
    page_size: FromQuery[int | None] = None,
    page_token: FromQuery[str | None] = None,
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


@patch("/{full_name:str}/entries", operation_id="updateEntry")
async def update_entry(
    request: Req,
    ctx: NamedDependency[Context],
    full_name: FromPath[str],
    data: JSONBody[EntryEdit],
    if_match: IfMatch = None,
) -> Response[Entry]:
    return _with_etag(await service.edit_entry(ctx, request.user, full_name, data, if_match))


@delete("/{full_name:str}/entries", status_code=200, operation_id="deleteEntry")
async def delete_entry(
    request: Req,
    ctx: NamedDependency[Context],
    full_name: FromPath[str],
    entry_scope: ScopeParam = None,
    path: FromQuery[str | None] = None,
    session_id: FromQuery[str | None] = None,
    all_: Annotated[str | None, QueryParameter(name="all")] = None,
    if_match: IfMatch = None,
) -> dict[str, Any]:
    if all_ is not None and all_.lower() in ("true", "1"):
        if path is not None:
            raise InvalidParameter("give path or all=true, not both", "path")
        await service.delete_scope(ctx, request.user, full_name, entry_scope)
        return {}
    await service.delete_entry(ctx, request.user, full_name, entry_scope, path, session_id, if_match)
    return {}


@post("/{full_name:str}/entries:search", status_code=200, operation_id="searchEntries")
async def search(
    request: Req, ctx: NamedDependency[Context], full_name: FromPath[str], data: JSONBody[SearchRequest]
) -> SearchResponse:
    return await search_entries(ctx, request.user, full_name, data)


@post("/erase-scope", status_code=200, operation_id="eraseScope")
async def erase_scope(
    request: Req, ctx: NamedDependency[Context], data: JSONBody[EraseRequest]
) -> EraseResult:
    return await service.erase_scope(ctx, request.user, data.scope)


router = Router(
    path="/api/2.1/unity-catalog/memory-stores",
    route_handlers=[create_entry, get_entry, list_entries, update_entry, delete_entry, search],
    tags=["entries"],
)
system_router = Router(path="/api/2.1/unity-catalog/system", route_handlers=[erase_scope], tags=["system"])
