"""Auditor routes, base `/api/2.1/unity-catalog/system`."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request, Router, get
from litestar.di import NamedDependency
from litestar.params import FromQuery, QueryParameter

from catalog.audit import service
from catalog.context import Context
from catalog.lineage import service as lineage_service

Req = Request[Any, Any, Any]


@get("/audit", operation_id="listAuditEvents")
async def list_audit(
    request: Req,
    ctx: NamedDependency[Context],
    start_time: FromQuery[int | None] = None,
    end_time: FromQuery[int | None] = None,
    principal: FromQuery[str | None] = None,
    action_name: FromQuery[str | None] = None,
    securable_full_name: FromQuery[str | None] = None,
    decision: FromQuery[str | None] = None,
    status_code: FromQuery[int | None] = None,
    order: FromQuery[str | None] = None,
    page_size: FromQuery[int | None] = None,
    page_token: FromQuery[str | None] = None,
) -> service.AuditEvents:
    return await service.list_events(
        ctx,
        request.user,
        start_time=start_time,
        end_time=end_time,
        who=principal,
        action_name=action_name,
        securable_full_name=securable_full_name,
        decision=decision,
        status_code=status_code,
        order=order,
        size=page_size,
        page_token=page_token,
    )


@get("/audit:verify", operation_id="verifyAuditEvents")
async def verify_audit(request: Req, ctx: NamedDependency[Context]) -> service.VerifyResult:
    return await service.verify_events(ctx, request.user)


@get("/lineage", operation_id="getLineage")
async def get_lineage(
    request: Req,
    ctx: NamedDependency[Context],
    securable_full_name: FromQuery[str | None] = None,
    direction: FromQuery[str | None] = None,
    entry_scope: Annotated[str | None, QueryParameter(name="scope")] = None,
    path: FromQuery[str | None] = None,
    session_id: FromQuery[str | None] = None,
    depth: FromQuery[int | None] = None,
) -> dict[str, Any]:
    return await lineage_service.lineage(
        ctx, request.user, securable_full_name, direction, entry_scope, path, session_id, depth
    )


@get("/lineage/openlineage", operation_id="exportOpenLineage")
async def export_openlineage(
    request: Req,
    ctx: NamedDependency[Context],
    start_time: FromQuery[int | None] = None,
    end_time: FromQuery[int | None] = None,
    page_size: FromQuery[int | None] = None,
) -> dict[str, Any]:
    return await lineage_service.openlineage_events(ctx, request.user, start_time, end_time, page_size)


router = Router(
    path="/api/2.1/unity-catalog/system",
    route_handlers=[list_audit, verify_audit, get_lineage, export_openlineage],
    tags=["audit"],
)
