"""`GET /metrics` (Prometheus text format), authenticated and authorized like every route."""

from __future__ import annotations

from litestar import get

from catalog.metrics import service
from catalog.web.deps import Ctx, Req
from catalog.web.openapi import errors
from catalog.web.routing import router as build_router


@get("/metrics", operation_id="getMetrics", media_type=service.CONTENT_TYPE, responses=errors())
async def get_metrics(request: Req, ctx: Ctx) -> str:
    return await service.render(ctx, request.user)


router = build_router("/", [get_metrics], ["operations"])
