"""Permissions routes (Unity Catalog dialect): grants and effective permissions."""

from __future__ import annotations

from typing import Annotated

from litestar import get, patch
from litestar.params import JSONBody, Parameter

from catalog.governance.permissions import service
from catalog.governance.permissions.schemas import (
    EffectivePermissionsList,
    PermissionsList,
    UpdatePermissions,
)
from catalog.web import routing
from catalog.web.deps import Ctx, Req
from catalog.web.openapi import errors
from catalog.wire.inputs import MAX_PRINCIPAL, NOT_BLANK
from catalog.wire.names import FULL_NAME_PATTERN, MAX_FULL_NAME
from catalog.wire.pagination import MaxResults, PageToken

SecurableTypeParam = Annotated[
    str,
    Parameter(
        pattern=service.SECURABLE_TYPE_PATTERN,
        description="metastore, catalog, schema or memory_store (any case)",
    ),
]
FullName = Annotated[
    str,
    Parameter(
        pattern=FULL_NAME_PATTERN,
        max_length=MAX_FULL_NAME,
        description="the metastore id, catalog, catalog.schema or catalog.schema.store (as the type says)",
    ),
]
PrincipalParam = Annotated[
    str | None,
    Parameter(max_length=MAX_PRINCIPAL, pattern=NOT_BLANK, description="a principal or group name"),
]


@get(
    "/permissions/{securable_type:str}/{full_name:str}", operation_id="getPermissions", responses=errors(404)
)
async def get_permissions(
    request: Req,
    ctx: Ctx,
    securable_type: SecurableTypeParam,
    full_name: FullName,
    principal: PrincipalParam = None,
    max_results: MaxResults = None,
    page_token: PageToken = None,
) -> PermissionsList:
    return await service.get_permissions(
        ctx, request.user, securable_type, full_name, principal, max_results, page_token
    )


@patch(
    "/permissions/{securable_type:str}/{full_name:str}",
    operation_id="updatePermissions",
    responses=errors(404, 413),
)
async def update_permissions(
    request: Req,
    ctx: Ctx,
    securable_type: SecurableTypeParam,
    full_name: FullName,
    data: JSONBody[UpdatePermissions],
) -> PermissionsList:
    return await service.update_permissions(ctx, request.user, securable_type, full_name, data)


@get(
    "/effective-permissions/{securable_type:str}/{full_name:str}",
    operation_id="getEffectivePermissions",
    responses=errors(404),
)
async def get_effective_permissions(
    request: Req,
    ctx: Ctx,
    securable_type: SecurableTypeParam,
    full_name: FullName,
    principal: Annotated[
        str | None,
        Parameter(
            max_length=MAX_PRINCIPAL,
            pattern=NOT_BLANK,
            description="whose privileges (yourself by default; others need ownership, MANAGE or admin)",
        ),
    ] = None,
    max_results: MaxResults = None,
    page_token: PageToken = None,
) -> EffectivePermissionsList:
    return await service.get_effective_permissions(
        ctx, request.user, securable_type, full_name, principal, max_results, page_token
    )


router = routing.router(
    path="/api/2.1/unity-catalog",
    route_handlers=[get_permissions, update_permissions, get_effective_permissions],
    tags=["governance"],
)
