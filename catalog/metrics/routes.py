"""`GET /metrics` (Prometheus text format), authenticated and authorized like every route."""

from __future__ import annotations

from typing import Any

from litestar import Request, get
from litestar.di import NamedDependency

from catalog.context import Context
from catalog.metrics import service
from catalog.web.openapi import errors
from catalog.web.routing import router as build_router


@get("/metrics", operation_id="getMetrics", media_type=service.CONTENT_TYPE, responses=errors())
async def get_metrics(request: Request[Any, Any, Any], ctx: NamedDependency[Context]) -> str:
    return await service.render(ctx, request.user)


router = build_router("/", [get_metrics], ["operations"])
