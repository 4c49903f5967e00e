"""SCIM 2.0 group routes, base `/api/2.0/preview/scim/v2/Groups`."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request, Router, delete, get, patch, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody, QueryParameter

from catalog.context import Context
from catalog.groups import service
from catalog.groups.schemas import Group, GroupCreate, GroupList, GroupPatch

Req = Request[Any, Any, Any]


@post("/", status_code=200, operation_id="createGroup")
async def create_group(request: Req, ctx: NamedDependency[Context], data: JSONBody[GroupCreate]) -> Group:
    return await service.create_group(ctx, request.user, data)


@get("/", operation_id="listGroups")
async def list_groups(
    request: Req,
    ctx: NamedDependency[Context],
    filter_: Annotated[str | None, QueryParameter(name="filter")] = None,
    start_index: Annotated[int | None, QueryParameter(name="startIndex")] = None,
    count: FromQuery[int | None] = None,
    attributes: FromQuery[str | None] = None,
) -> GroupList:
    return await service.list_groups(ctx, request.user, filter_, start_index, count)


@get("/{group_id:str}", operation_id="getGroup")
async def get_group(request: Req, ctx: NamedDependency[Context], group_id: FromPath[str]) -> Group:
    return await service.get_group(ctx, request.user, group_id)


@patch("/{group_id:str}", operation_id="patchGroup")
async def patch_group(
    request: Req, ctx: NamedDependency[Context], group_id: FromPath[str], data: JSONBody[GroupPatch]
) -> Group:
    return await service.patch_group(ctx, request.user, group_id, data)


@delete("/{group_id:str}", status_code=200, operation_id="deleteGroup")
async def delete_group(
    request: Req, ctx: NamedDependency[Context], group_id: FromPath[str]
) -> dict[str, Any]:
    await service.delete_group(ctx, request.user, group_id)
    return {}


router = Router(
    path="/api/2.0/preview/scim/v2/Groups",
    route_handlers=[create_group, list_groups, get_group, patch_group, delete_group],
    tags=["groups"],
)
