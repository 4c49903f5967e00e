"""`GET /metrics` (Prometheus text format), authenticated and authorized like every route."""

from __future__ import annotations

from typing import Any

from litestar import Request, Router, get
from litestar.di import NamedDependency
from litestar.response import Response

from catalog.context import Context
from catalog.metrics import service


@get("/metrics", operation_id="getMetrics")
async def get_metrics(request: Request[Any, Any, Any], ctx: NamedDependency[Context]) -> Response[str]:
    return Response(await service.render(ctx, request.user), media_type=service.CONTENT_TYPE)


router = Router(path="/", route_handlers=[get_metrics], tags=["operations"])
