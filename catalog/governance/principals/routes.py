"""SCIM 2.0 user routes, base `/api/2.0/preview/scim/v2`: `Me` and `Users` (read only)."""

from __future__ import annotations

from typing import Annotated

from litestar import get
from litestar.params import Parameter

from catalog.governance.principals import service
from catalog.governance.principals.schemas import User, UserList
from catalog.web import routing
from catalog.web.deps import Ctx, Req
from catalog.web.openapi import errors
from catalog.wire.inputs import integer
from catalog.wire.pagination import MAX_PAGE_PARAMETER


@get("/Me", operation_id="getCurrentUser", responses=errors())
async def me(request: Req, ctx: Ctx) -> User:
    return await service.me(ctx, request.user)


@get("/Users", operation_id="listUsers", responses=errors())
async def list_users(
    request: Req,
    ctx: Ctx,
    filter: Annotated[
        str | None, Parameter(pattern=service.FILTER_PATTERN, description='userName eq "<name>"')
    ] = None,
    startIndex: Annotated[
        int | None, integer(1, MAX_PAGE_PARAMETER, "1-based index of the first user")
    ] = None,
    count: Annotated[
        int | None,
        integer(0, MAX_PAGE_PARAMETER, "page size (0 or absent: the server cap; above it: the cap)"),
    ] = None,
) -> UserList:
    return await service.list_users(ctx, request.user, filter, startIndex, count)


@get("/Users/{user_id:str}", operation_id="getUser", responses=errors(404))
async def get_user(
    request: Req,
    ctx: Ctx,
    user_id: Annotated[str, Parameter(min_length=1, max_length=255, description="the principal's name")],
) -> User:
    return await service.get_user(ctx, request.user, user_id)


router = routing.router(
    path="/api/2.0/preview/scim/v2",
    route_handlers=[me, list_users, get_user],
    tags=["users"],
)
