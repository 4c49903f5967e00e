"""Agent-memory dialect routes, base `/api/2.0/agents/memory-stores`."""

from __future__ import annotations

from typing import Any

from litestar import Request, Router, delete, get, patch, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody

from catalog.agents import service
from catalog.agents.schemas import (
    AgentEntry,
    AgentEntryList,
    AgentSearchResult,
    AgentStore,
    AgentStoreList,
    EntryCreate,
    EntryUpdate,
    GrantRequest,
    SearchBody,
    StoreCreate,
    StoreUpdate,
)
from catalog.context import Context

Req = Request[Any, Any, Any]
Ctx = NamedDependency[Context]


@post("/", status_code=200, operation_id="agentsCreateMemoryStore")
async def create_store(
    request: Req, ctx: Ctx, data: JSONBody[StoreCreate], managed_memory_store_id: FromQuery[str | None] = None
) -> AgentStore:
    return await service.create_store(ctx, request.user, managed_memory_store_id, data)


@get("/", operation_id="agentsListMemoryStores")
async def list_stores(
    request: Req, ctx: Ctx, page_size: FromQuery[int | None] = None, page_token: FromQuery[str | None] = None
) -> AgentStoreList:
    return await service.list_stores(ctx, request.user, page_size, page_token)


@get("/{store_id:str}", operation_id="agentsGetMemoryStore")
async def get_store(request: Req, ctx: Ctx, store_id: FromPath[str]) -> AgentStore:
    return await service.get_store(ctx, request.user, store_id)


@patch("/{store_id:str}", operation_id="agentsUpdateMemoryStore")
async def update_store(
    request: Req,
    ctx: Ctx,
    store_id: FromPath[str],
    data: JSONBody[StoreUpdate],
    update_mask: FromQuery[str | None] = None,
) -> AgentStore:
    return await service.update_store(ctx, request.user, store_id, update_mask, data)


@delete("/{store_id:str}", status_code=200, operation_id="agentsDeleteMemoryStore")
async def delete_store(request: Req, ctx: Ctx, store_id: FromPath[str]) -> dict[str, Any]:
    await service.delete_store(ctx, request.user, store_id)
    return {}


@post("/{store_id:str}/permissions:grant", status_code=200, operation_id="agentsGrantMemoryStorePermission")
async def grant(
    request: Req, ctx: Ctx, store_id: FromPath[str], data: JSONBody[GrantRequest]
) -> dict[str, Any]:
    await service.grant(ctx, request.user, store_id, data)
    return {}


@post("/{store_id:str}/entries", status_code=200, operation_id="agentsCreateMemoryEntry")
async def create_entry(
    request: Req, ctx: Ctx, store_id: FromPath[str], data: JSONBody[EntryCreate]
) -> AgentEntry:
    return await service.create_entry(ctx, request.user, store_id, data)


@get("/{store_id:str}/entries", operation_id="agentsListMemoryEntries")
async def list_entries(
    request: Req,
    ctx: Ctx,
    store_id: FromPath[str],
    actor_id: FromQuery[str | None] = None,
    path_prefix: FromQuery[str | None] = None,
    path: FromQuery[str | None] = None,
    session_id: FromQuery[str | None] = None,
    page_size: FromQuery[int | None] = None,
    page_token: FromQuery[str | None] = None,
    read_mask: FromQuery[str | None] = None,
) -> AgentEntryList:
    return await service.list_entries(
        ctx, request.user, store_id, actor_id, path_prefix, path, session_id, page_size, page_token, read_mask
    )


@get("/{store_id:str}/entries/{entry_id:str}", operation_id="agentsGetMemoryEntry")
async def get_entry(
    request: Req,
    ctx: Ctx,
    store_id: FromPath[str],
    entry_id: FromPath[str],
    read_mask: FromQuery[str | None] = None,
) -> AgentEntry:
    return await service.get_entry(ctx, request.user, store_id, entry_id, read_mask)


@patch("/{store_id:str}/entries/{entry_id:str}", operation_id="agentsUpdateMemoryEntry")
async def update_entry(
    request: Req,
    ctx: Ctx,
    store_id: FromPath[str],
    entry_id: FromPath[str],
    data: JSONBody[EntryUpdate],
    update_mask: FromQuery[str | None] = None,
) -> AgentEntry:
    return await service.update_entry(ctx, request.user, store_id, entry_id, update_mask, data)


@delete("/{store_id:str}/entries/{entry_id:str}", status_code=200, operation_id="agentsDeleteMemoryEntry")
async def delete_entry(
    request: Req, ctx: Ctx, store_id: FromPath[str], entry_id: FromPath[str]
) -> dict[str, Any]:
    await service.delete_entry(ctx, request.user, store_id, entry_id)
    return {}


@post("/{store_id:str}/entries:search", status_code=200, operation_id="agentsSearchMemoryEntries")
async def search(
    request: Req, ctx: Ctx, store_id: FromPath[str], data: JSONBody[SearchBody]
) -> AgentSearchResult:
    return await service.search(ctx, request.user, store_id, data)


router = Router(
    path="/api/2.0/agents/memory-stores",
    route_handlers=[
        create_store,
        list_stores,
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
    ],
    tags=["agents"],
)
