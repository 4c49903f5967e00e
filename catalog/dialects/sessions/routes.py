"""Session-store routes of the agent dialect, base `/api/2.0/agents/session-stores`."""

from __future__ import annotations

from typing import Annotated

from litestar import delete, get, patch, post
from litestar.params import JSONBody, Parameter

from catalog.dialects.sessions import service
from catalog.dialects.sessions.schemas import (
    ORDER_BY_PATTERN,
    SESSION_ID_PATTERN,
    SESSION_ID_TEXT,
    SESSION_UPDATE_MASK_PATTERN,
    STORE_NAME_PATTERN,
    STORE_NAME_TEXT,
    STORE_UPDATE_MASK_PATTERN,
    AppendItems,
    NoFields,
    PoppedItem,
    SessionCreate,
    SessionFork,
    SessionInfo,
    SessionItemList,
    SessionList,
    SessionStoreCreate,
    SessionStoreGrant,
    SessionStoreInfo,
    SessionStoreList,
    SessionStoreUpdate,
    SessionUpdate,
)
from catalog.web import routing
from catalog.web.deps import Ctx, Req
from catalog.web.openapi import Empty, errors
from catalog.wire.inputs import integer
from catalog.wire.pagination import PageToken

StoreName = Annotated[str, Parameter(pattern=STORE_NAME_PATTERN, description=STORE_NAME_TEXT)]
SessionIdParam = Annotated[str, Parameter(pattern=SESSION_ID_PATTERN, description=SESSION_ID_TEXT)]
OrderBy = Annotated[
    str | None,
    Parameter(pattern=ORDER_BY_PATTERN, description="'create_time asc' or 'create_time desc'"),
]
StorePageSize = Annotated[int | None, integer(0, service.MAX_STORE_PAGE, "page size (0 or absent: 100)")]
SessionPageSize = Annotated[
    int | None,
    integer(0, service.MAX_SESSION_PAGE, f"page size (0 or absent: {service.DEFAULT_SESSION_PAGE})"),
]
ItemPageSize = Annotated[
    int | None, integer(0, service.MAX_ITEM_PAGE, f"page size (0 or absent: {service.DEFAULT_ITEM_PAGE})")
]
OptionalStoreName = Annotated[str | None, Parameter(pattern=STORE_NAME_PATTERN, description=STORE_NAME_TEXT)]


@post("/", status_code=200, operation_id="agentsCreateSessionStore", responses=errors(404, 409, 413))
async def create_store(
    request: Req,
    ctx: Ctx,
    data: JSONBody[SessionStoreCreate],
    session_store_name: OptionalStoreName = None,
    session_store_id: OptionalStoreName = None,
) -> SessionStoreInfo:
    return await service.create_store(ctx, request.user, session_store_name, session_store_id, data)


@get("/", operation_id="agentsListSessionStores", responses=errors(404))
async def list_stores(
    request: Req, ctx: Ctx, page_size: StorePageSize = None, page_token: PageToken = None
) -> SessionStoreList:
    return await service.list_stores(ctx, request.user, page_size, page_token)


@get("/{store_name:str}", operation_id="agentsGetSessionStore", responses=errors(404))
async def get_store(request: Req, ctx: Ctx, store_name: StoreName) -> SessionStoreInfo:
    return await service.get_store(ctx, request.user, store_name)


@patch("/{store_name:str}", operation_id="agentsUpdateSessionStore", responses=errors(404, 413))
async def update_store(
    request: Req,
    ctx: Ctx,
    store_name: StoreName,
    data: JSONBody[SessionStoreUpdate],
    update_mask: Annotated[
        str | None,
        Parameter(
            pattern=STORE_UPDATE_MASK_PATTERN,
            description="description, metadata, scope_binding, shared_scopes (absent: what the body sets)",
        ),
    ] = None,
) -> SessionStoreInfo:
    return await service.update_store(ctx, request.user, store_name, update_mask, data)


@delete(
    "/{store_name:str}",
    status_code=200,
    operation_id="agentsDeleteSessionStore",
    responses=errors(404, 409),  # 409: the store is under legal hold
)
async def delete_store(request: Req, ctx: Ctx, store_name: StoreName) -> Empty:
    await service.delete_store(ctx, request.user, store_name)
    return Empty()


@post(
    "/{store_name:str}/permissions:grant",
    status_code=200,
    operation_id="agentsGrantSessionStorePermission",
    responses=errors(404, 413),
)
async def grant(request: Req, ctx: Ctx, store_name: StoreName, data: JSONBody[SessionStoreGrant]) -> Empty:
    await service.grant(ctx, request.user, store_name, data)
    return Empty()


@post(
    "/{store_name:str}/sessions",
    status_code=200,
    operation_id="agentsCreateSession",
    responses=errors(404, 409, 413),
)
async def create_session(
    request: Req,
    ctx: Ctx,
    store_name: StoreName,
    data: JSONBody[SessionCreate],
    session_id: Annotated[
        str | None, Parameter(pattern=SESSION_ID_PATTERN, description=f"{SESSION_ID_TEXT}; absent: a uuid")
    ] = None,
) -> SessionInfo:
    return await service.create_session(ctx, request.user, store_name, session_id, data)


@get("/{store_name:str}/sessions", operation_id="agentsListSessions", responses=errors(404))
async def list_sessions(
    request: Req,
    ctx: Ctx,
    store_name: StoreName,
    filter: Annotated[
        str | None,
        Parameter(
            max_length=1024,
            description='terms field = "value" joined with AND '
            "(fields: actor_id, root_session_id, parent_session_id)",
        ),
    ] = None,
    order_by: OrderBy = None,
    page_size: SessionPageSize = None,
    page_token: PageToken = None,
) -> SessionList:
    return await service.list_sessions(ctx, request.user, store_name, filter, order_by, page_size, page_token)


@post(
    "/{store_name:str}/sessions:fork",
    status_code=200,
    operation_id="agentsForkSession",
    responses=errors(404, 409, 413),
)
async def fork_session(
    request: Req, ctx: Ctx, store_name: StoreName, data: JSONBody[SessionFork]
) -> SessionInfo:
    return await service.fork_session(ctx, request.user, store_name, data)


@get("/{store_name:str}/sessions/{session_id:str}", operation_id="agentsGetSession", responses=errors(404))
async def get_session(
    request: Req, ctx: Ctx, store_name: StoreName, session_id: SessionIdParam
) -> SessionInfo:
    return await service.get_session(ctx, request.user, store_name, session_id)


@patch(
    "/{store_name:str}/sessions/{session_id:str}",
    operation_id="agentsUpdateSession",
    responses=errors(404, 413),
)
async def update_session(
    request: Req,
    ctx: Ctx,
    store_name: StoreName,
    session_id: SessionIdParam,
    data: JSONBody[SessionUpdate],
    update_mask: Annotated[
        str | None, Parameter(pattern=SESSION_UPDATE_MASK_PATTERN, description="metadata")
    ] = None,
) -> SessionInfo:
    return await service.update_session(ctx, request.user, store_name, session_id, update_mask, data)


@delete(
    "/{store_name:str}/sessions/{session_id:str}",
    status_code=200,
    operation_id="agentsDeleteSession",
    responses=errors(404, 409),  # 409: the store is under legal hold
)
async def delete_session(
    request: Req,
    ctx: Ctx,
    store_name: StoreName,
    session_id: SessionIdParam,
    force: Annotated[bool, Parameter(description="accepted; the items are always deleted")] = False,
) -> Empty:
    await service.delete_session(ctx, request.user, store_name, session_id)
    return Empty()


@get(
    "/{store_name:str}/sessions/{session_id:str}/items",
    operation_id="agentsListSessionItems",
    responses=errors(404),
)
async def list_items(
    request: Req,
    ctx: Ctx,
    store_name: StoreName,
    session_id: SessionIdParam,
    order_by: OrderBy = None,
    page_size: ItemPageSize = None,
    page_token: PageToken = None,
) -> SessionItemList:
    return await service.list_items(
        ctx, request.user, store_name, session_id, order_by, page_size, page_token
    )


@post(
    "/{store_name:str}/sessions/{session_id:str}/items:append",
    status_code=200,
    operation_id="agentsAppendSessionItems",
    responses=errors(404, 413),
)
async def append_items(
    request: Req, ctx: Ctx, store_name: StoreName, session_id: SessionIdParam, data: JSONBody[AppendItems]
) -> SessionItemList:
    return await service.append_items(ctx, request.user, store_name, session_id, data)


@post(
    "/{store_name:str}/sessions/{session_id:str}/items:pop",
    status_code=200,
    operation_id="agentsPopSessionItem",
    responses=errors(404, 409),  # 409: the store is under legal hold
)
async def pop_item(
    request: Req, ctx: Ctx, store_name: StoreName, session_id: SessionIdParam, data: JSONBody[NoFields]
) -> PoppedItem:
    return await service.pop_item(ctx, request.user, store_name, session_id)


@post(
    "/{store_name:str}/sessions/{session_id:str}/items:clear",
    status_code=200,
    operation_id="agentsClearSessionItems",
    responses=errors(404, 409),  # 409: the store is under legal hold
)
async def clear_items(
    request: Req, ctx: Ctx, store_name: StoreName, session_id: SessionIdParam, data: JSONBody[NoFields]
) -> Empty:
    await service.clear_items(ctx, request.user, store_name, session_id)
    return Empty()


router = routing.router(
    path="/api/2.0/agents/session-stores",
    route_handlers=[create_store, list_stores],
    tags=["agents"],
)
# the routes of one session store: a missing store, session or item is NOT_FOUND there
store_router = routing.router(
    path="/api/2.0/agents/session-stores",
    route_handlers=[
        get_store,
        update_store,
        delete_store,
        grant,
        create_session,
        list_sessions,
        fork_session,
        get_session,
        update_session,
        delete_session,
        list_items,
        append_items,
        pop_item,
        clear_items,
    ],
    tags=["agents"],
    memory_store=True,
)
