"""SCIM 2.0 group routes, base `/api/2.0/preview/scim/v2/Groups`."""

from __future__ import annotations

from typing import Annotated

from litestar import delete, get, patch, post
from litestar.params import JSONBody, Parameter

from catalog.governance.groups import service
from catalog.governance.groups.schemas import Group, GroupCreate, GroupList, GroupPatch
from catalog.web import routing
from catalog.web.deps import Ctx, Req
from catalog.web.openapi import Empty, errors
from catalog.wire.inputs import integer
from catalog.wire.pagination import MAX_PAGE_PARAMETER

# a malformed id names no group: 404, like a missing one
GroupId = Annotated[str, Parameter(schema_extra={"format": "uuid"}, description="the group's id")]


@post("/", status_code=200, operation_id="createGroup", responses=errors(409, 413))
async def create_group(request: Req, ctx: Ctx, data: JSONBody[GroupCreate]) -> Group:
    return await service.create_group(ctx, request.user, data)


@get("/", operation_id="listGroups", responses=errors())
async def list_groups(
    request: Req,
    ctx: Ctx,
    filter: Annotated[
        str | None, Parameter(pattern=service.FILTER_PATTERN, description='displayName eq "<name>"')
    ] = None,
    startIndex: Annotated[
        int | None, integer(1, MAX_PAGE_PARAMETER, "1-based index of the first group")
    ] = None,
    count: Annotated[
        int | None,
        integer(0, MAX_PAGE_PARAMETER, "page size (0 or absent: the server cap)"),
    ] = None,
) -> GroupList:
    return await service.list_groups(ctx, request.user, filter, startIndex, count)


@get("/{group_id:str}", operation_id="getGroup", responses=errors(404))
async def get_group(request: Req, ctx: Ctx, group_id: GroupId) -> Group:
    return await service.get_group(ctx, request.user, group_id)


@patch("/{group_id:str}", operation_id="patchGroup", responses=errors(404, 413))
async def patch_group(request: Req, ctx: Ctx, group_id: GroupId, data: JSONBody[GroupPatch]) -> Group:
    return await service.patch_group(ctx, request.user, group_id, data)


@delete("/{group_id:str}", status_code=200, operation_id="deleteGroup", responses=errors(404))
async def delete_group(request: Req, ctx: Ctx, group_id: GroupId) -> Empty:
    await service.delete_group(ctx, request.user, group_id)
    return Empty()


router = routing.router(
    path="/api/2.0/preview/scim/v2/Groups",
    route_handlers=[create_group, list_groups, get_group, patch_group, delete_group],
    tags=["groups"],
)
