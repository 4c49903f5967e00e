"""Agent-memory dialect routes, base `/api/2.0/agents/memory-stores`."""

from __future__ import annotations

from typing import Annotated

from litestar import delete, get, patch, post
from litestar.params import JSONBody, Parameter

from catalog.dialects.agents import service
from catalog.dialects.agents.schemas import (
    ENTRY_UPDATE_MASK_PATTERN,
    READ_MASK_PATTERN,
    STORE_ID_PATTERN,
    STORE_UPDATE_MASK_PATTERN,
    AgentDeleteMatchingResult,
    AgentEntry,
    AgentEntryCreate,
    AgentEntryList,
    AgentSearchResult,
    AgentStore,
    AgentStoreList,
    DeleteMatchingBody,
    EntryUpdate,
    GrantRequest,
    SearchBody,
    StoreCreate,
    StoreUpdate,
)
from catalog.web import routing
from catalog.web.deps import Ctx, Req
from catalog.web.openapi import Empty, errors
from catalog.wire.entry_keys import MAX_PATH, PATH_PATTERN, PREFIX_PATTERN
from catalog.wire.entry_keys import SessionParam as SessionId
from catalog.wire.inputs import MAX_SCOPE, NO_CONTROL, integer
from catalog.wire.pagination import PageToken

_STORE_ID_TEXT = "3-56 lowercase letters, digits or '-', starting with a letter, not ending with '-'"
StoreId = Annotated[str, Parameter(pattern=STORE_ID_PATTERN, description=_STORE_ID_TEXT)]
# a malformed id names no entry: 404, like a missing one
EntryId = Annotated[str, Parameter(schema_extra={"format": "uuid"}, description="the entry's id")]
AgentPageSize = Annotated[int | None, integer(0, service.MAX_PAGE, "page size (0 or absent: 100)")]
ReadMask = Annotated[
    str | None,
    Parameter(pattern=READ_MASK_PATTERN, description="the entry fields to answer, comma-separated"),
]


@post("/", status_code=200, operation_id="agentsCreateMemoryStore", responses=errors(404, 409, 413))
async def create_store(
    request: Req,
    ctx: Ctx,
    data: JSONBody[StoreCreate],
    managed_memory_store_id: Annotated[
        str | None,
        Parameter(pattern=STORE_ID_PATTERN, description=f"{_STORE_ID_TEXT}; absent: the display name"),
    ] = None,
) -> AgentStore:
    return await service.create_store(ctx, request.user, managed_memory_store_id, data)


@get("/", operation_id="agentsListMemoryStores", responses=errors(404))
async def list_stores(
    request: Req, ctx: Ctx, page_size: AgentPageSize = None, page_token: PageToken = None
) -> AgentStoreList:
    return await service.list_stores(ctx, request.user, page_size, page_token)


@get("/{store_id:str}", operation_id="agentsGetMemoryStore", responses=errors(404))
async def get_store(request: Req, ctx: Ctx, store_id: StoreId) -> AgentStore:
    return await service.get_store(ctx, request.user, store_id)


@patch("/{store_id:str}", operation_id="agentsUpdateMemoryStore", responses=errors(404, 409, 413))
async def update_store(
    request: Req,
    ctx: Ctx,
    store_id: StoreId,
    data: JSONBody[StoreUpdate],
    update_mask: Annotated[
        str | None,
        Parameter(
            pattern=STORE_UPDATE_MASK_PATTERN,
            description="display_name and/or description (absent: the fields the body sets)",
        ),
    ] = None,
) -> AgentStore:
    return await service.update_store(ctx, request.user, store_id, update_mask, data)


@delete(
    "/{store_id:str}", status_code=200, operation_id="agentsDeleteMemoryStore", responses=errors(404, 409)
)
async def delete_store(request: Req, ctx: Ctx, store_id: StoreId) -> Empty:
    await service.delete_store(ctx, request.user, store_id)
    return Empty()


@post(
    "/{store_id:str}/permissions:grant",
    status_code=200,
    operation_id="agentsGrantMemoryStorePermission",
    responses=errors(404, 413),
)
async def grant(request: Req, ctx: Ctx, store_id: StoreId, data: JSONBody[GrantRequest]) -> Empty:
    await service.grant(ctx, request.user, store_id, data)
    return Empty()


@post(
    "/{store_id:str}/entries",
    status_code=200,
    operation_id="agentsCreateMemoryEntry",
    responses=errors(404, 409, 413),
)
async def create_entry(
    request: Req, ctx: Ctx, store_id: StoreId, data: JSONBody[AgentEntryCreate]
) -> AgentEntry:
    return await service.create_entry(ctx, request.user, store_id, data)


@get("/{store_id:str}/entries", operation_id="agentsListMemoryEntries", responses=errors(404))
async def list_entries(
    request: Req,
    ctx: Ctx,
    store_id: StoreId,
    actor_id: Annotated[
        str, Parameter(min_length=1, max_length=MAX_SCOPE, pattern=NO_CONTROL, description="whose memories")
    ],
    path_prefix: Annotated[
        str | None, Parameter(max_length=MAX_PATH, pattern=PREFIX_PATTERN, description="only paths under it")
    ] = None,
    path: Annotated[
        str | None, Parameter(max_length=MAX_PATH, pattern=PATH_PATTERN, description="only this path")
    ] = None,
    session_id: SessionId = None,
    page_size: AgentPageSize = None,
    page_token: PageToken = None,
    read_mask: ReadMask = None,
) -> AgentEntryList:
    return await service.list_entries(
        ctx, request.user, store_id, actor_id, path_prefix, path, session_id, page_size, page_token, read_mask
    )


@get("/{store_id:str}/entries/{entry_id:str}", operation_id="agentsGetMemoryEntry", responses=errors(404))
async def get_entry(
    request: Req, ctx: Ctx, store_id: StoreId, entry_id: EntryId, read_mask: ReadMask = None
) -> AgentEntry:
    return await service.get_entry(ctx, request.user, store_id, entry_id, read_mask)


@patch(
    "/{store_id:str}/entries/{entry_id:str}",
    operation_id="agentsUpdateMemoryEntry",
    responses=errors(404, 409, 413),
)
async def update_entry(
    request: Req,
    ctx: Ctx,
    store_id: StoreId,
    entry_id: EntryId,
    data: JSONBody[EntryUpdate],
    update_mask: Annotated[
        str | None,
        Parameter(
            pattern=ENTRY_UPDATE_MASK_PATTERN,
            description="content and/or description (absent: the fields the body sets)",
        ),
    ] = None,
) -> AgentEntry:
    return await service.update_entry(ctx, request.user, store_id, entry_id, update_mask, data)


@delete(
    "/{store_id:str}/entries/{entry_id:str}",
    status_code=200,
    operation_id="agentsDeleteMemoryEntry",
    responses=errors(404, 409),
)
async def delete_entry(request: Req, ctx: Ctx, store_id: StoreId, entry_id: EntryId) -> Empty:
    await service.delete_entry(ctx, request.user, store_id, entry_id)
    return Empty()


@post(
    "/{store_id:str}/entries:search",
    status_code=200,
    operation_id="agentsSearchMemoryEntries",
    responses=errors(404, 413),
)
async def search(request: Req, ctx: Ctx, store_id: StoreId, data: JSONBody[SearchBody]) -> AgentSearchResult:
    return await service.search(ctx, request.user, store_id, data)


@post(
    "/{store_id:str}/entries:deleteMatching",
    status_code=200,
    operation_id="agentsDeleteMatchingMemoryEntries",
    responses=errors(404, 409, 413),
)
async def delete_matching(
    request: Req, ctx: Ctx, store_id: StoreId, data: JSONBody[DeleteMatchingBody]
) -> AgentDeleteMatchingResult:
    """Forget by query: delete the actor's entries that `entries:search` answers for the query at
    or above `min_score` (default 0.5), at most 100 (`truncated` when more matched; `dry_run`
    names them and deletes nothing). WRITE and READ; 409 under legal hold."""
    return await service.delete_matching(ctx, request.user, store_id, data)


router = routing.router(
    path="/api/2.0/agents/memory-stores",
    route_handlers=[create_store, list_stores],
    tags=["agents"],
)
# the routes of one memory store: a missing store or entry is NOT_FOUND there (catalog.errors.NotFound)
store_router = routing.router(
    path="/api/2.0/agents/memory-stores",
    route_handlers=[
        get_store,
        update_store,
        delete_store,
        grant,
        create_entry,
        list_entries,
        get_entry,
        update_entry,
        delete_entry,
        search,
        delete_matching,
    ],
    tags=["agents"],
    memory_store=True,
)
