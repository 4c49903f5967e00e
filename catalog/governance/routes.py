"""Grants API routes (Unity Catalog dialect)."""

from __future__ import annotations

from typing import Any

from litestar import Request, Router, get, patch
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody

from catalog.context import Context
from catalog.governance import service
from catalog.governance.schemas import EffectivePermissionsList, PermissionsList, UpdatePermissions

Req = Request[Any, Any, Any]


@get("/permissions/{securable_type:str}/{full_name:str}", operation_id="getPermissions")
async def get_permissions(
    request: Req,
    ctx: NamedDependency[Context],
    securable_type: FromPath[str],
    full_name: FromPath[str],
    principal: FromQuery[str | None] = None,
    max_results: FromQuery[int | None] = None,
    page_token: FromQuery[str | None] = None,
) -> PermissionsList:
    return await service.get_permissions(
        ctx, request.user, securable_type, full_name, principal, max_results, page_token
    )


@patch("/permissions/{securable_type:str}/{full_name:str}", operation_id="updatePermissions")
async def update_permissions(
    request: Req,
    ctx: NamedDependency[Context],
    securable_type: FromPath[str],
    full_name: FromPath[str],
    data: JSONBody[UpdatePermissions],
) -> PermissionsList:
    return await service.update_permissions(ctx, request.user, securable_type, full_name, data)


@get("/effective-permissions/{securable_type:str}/{full_name:str}", operation_id="getEffectivePermissions")
async def get_effective_permissions(
    request: Req,
    ctx: NamedDependency[Context],
    securable_type: FromPath[str],
    full_name: FromPath[str],
    principal: FromQuery[str | None] = None,
    max_results: FromQuery[int | None] = None,
    page_token: FromQuery[str | None] = None,
) -> EffectivePermissionsList:
    return await service.get_effective_permissions(ctx, request.user, securable_type, full_name, principal)


router = Router(
    path="/api/2.1/unity-catalog",
    route_handlers=[get_permissions, update_permissions, get_effective_permissions],
    tags=["governance"],
)
