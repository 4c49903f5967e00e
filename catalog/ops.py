"""Operational routes, open without a token: health and the Databricks SDK's config probe."""

from __future__ import annotations

from typing import Any

from litestar import Request, get
from litestar.di import NamedDependency
from litestar.response import Response

from catalog.context import Context
from catalog.errors import NotFound


@get("/healthz", operation_id="health", tags=["operations"])
async def healthz(request: Request[Any, Any, Any], ctx: NamedDependency[Context]) -> Response[dict[str, Any]]:
    database = request.app.state.runtime.db
    if not database.up:
        return Response({"status": "unavailable", **database.status()}, status_code=503)
    try:
        async with ctx.pool.acquire(timeout=5) as conn:
            await conn.fetchval("SELECT 1")
    except Exception as exc:  # the database is unreachable: not ready (and probed at once)
        database.suspect()
        reason = f"{type(exc).__name__}: {exc}"
        return Response(
            {"status": "unavailable", "database": "unavailable", "reason": reason}, status_code=503
        )
    if ctx.search is None or ctx.search.indexer.index is None:
        return Response({"status": "unavailable", "reason": "search index"}, status_code=503)
    return Response({"status": "ok"}, status_code=200)


@get("/.well-known/databricks-config", include_in_schema=False)
async def databricks_config() -> None:
    raise NotFound("no workspace configuration is served here")
