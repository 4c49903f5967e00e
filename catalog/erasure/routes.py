"""Erasure routes: erasing a scope or a data subject everywhere (`/system`), and the DELETE of a
memory store's entries, which deletes one entry or, with `all=true`, erases a scope in the store.

That DELETE shares its path with the entries routes, and a path's handlers must be registered in
one router: `entries_router` is the store's entries routes (`catalog.entries.routes`) with it."""

from __future__ import annotations

from typing import Annotated

from litestar import delete, post
from litestar.params import JSONBody, Parameter

from catalog.entries import operations as ops
from catalog.entries import routes as entries_routes
from catalog.entries import service as entries
from catalog.entries.routes import IfMatch, parse_if_match
from catalog.erasure import service
from catalog.erasure.schemas import (
    ErasedStore,
    EraseRequest,
    EraseResult,
    EraseSubjectRequest,
    EraseSubjectResult,
)
from catalog.errors import InvalidParameter
from catalog.web import routing
from catalog.web.deps import Ctx, Req
from catalog.web.openapi import Empty, errors
from catalog.wire.entry_keys import (
    MAX_PATH,
    PATH_PATTERN,
    RequiredScopeParam,
    SessionParam,
    StoreFullNameParam,
)

StoreFullName = StoreFullNameParam
SessionId = SessionParam
RequiredScope = RequiredScopeParam


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
    if path is None:
        raise InvalidParameter("path is required (or all=true)", "path")
    target = ops.ByKey(scope=entry_scope, path=path, session_id=session_id)
    await entries.delete(
        ctx, request.user, ops.Delete(store=full_name, target=target, if_match=parse_if_match(if_match))
    )
    return Empty()


@post("/erase-scope", status_code=200, operation_id="eraseScope", responses=errors(413))
async def erase_scope(request: Req, ctx: Ctx, data: JSONBody[EraseRequest]) -> EraseResult:
    erased = await service.erase(ctx, request.user, data.scope)
    stores = [ErasedStore(memory_store=store, deleted=count) for store, count in erased.stores]
    return EraseResult(
        scope=data.scope,
        deleted=sum(s.deleted for s in stores),
        stores=stores,
        also_deleted=erased.others,
        held=erased.held,
    )


@post("/erase-subject", status_code=200, operation_id="eraseSubject", responses=errors(413))
async def erase_subject(request: Req, ctx: Ctx, data: JSONBody[EraseSubjectRequest]) -> EraseSubjectResult:
    """Erase a data subject everywhere: the scope `subject` and every scope `subject:...`."""
    erased = await service.erase_subject(ctx, request.user, data.subject)
    return EraseSubjectResult(
        subject=data.subject,
        erased=dict(erased.stores),
        held=erased.held,
        also_deleted=erased.others,
        audit_key_destroyed=erased.key_destroyed,
    )


entries_router = routing.router(
    path="/api/2.1/unity-catalog/memory-stores",
    route_handlers=[*entries_routes.route_handlers, delete_entry],
    tags=["entries"],
    memory_store=True,  # a missing store or entry is NOT_FOUND (catalog.errors.NotFound)
)
system_router = routing.router(
    path="/api/2.1/unity-catalog/system",
    route_handlers=[erase_scope, erase_subject],
    tags=["system"],
)
