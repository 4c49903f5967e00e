"""Operational routes, open without a token: health and the Databricks SDK's config probe.

`/healthz`:
- 503 `{"status": "unavailable", "reason": ...}` when the server cannot serve: the database is
  unreachable (the monitor's verdict is down and a quick attempt fails, as for any request; or
  this check's own query is refused), or there is no search index;
- 200 `{"status": "degraded", "reasons": [...], ...figures}` when it serves but something is
  wrong that a load balancer should not act on: derived state falling behind (searches answer
  from what is indexed), or the database slow to answer (this check's query or the monitor's
  probes timing out: a busy machine is not an outage, see catalog.db.health). Each check in
  `DEGRADED_CHECKS` adds its reasons and figures;
- 200 `{"status": "ok"}` otherwise.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from litestar import get
from litestar.di import NamedDependency
from litestar.response import Response

from catalog.context import Context
from catalog.db import DatabaseMonitor
from catalog.errors import NotFound
from catalog.web.deps import Ctx

CHECK_TIMEOUT = 5.0  # seconds this check waits for a connection, and for its query

# (reasons, figures): no reasons means the check is happy
CheckResult = tuple[list[str], dict[str, Any]]


async def search_check(ctx: Context) -> CheckResult:
    """The indexer and the embedding worker: failing, and how far behind."""
    assert ctx.search is not None
    status = await ctx.search.status()
    return status.reasons, {
        "index_lag_changes": status.index.lag,
        "embedding_backlog_entries": status.embeddings.lag,
    }


DEGRADED_CHECKS: tuple[Callable[[Context], Awaitable[CheckResult]], ...] = (search_check,)


@get("/healthz", operation_id="health", tags=["operations"])
async def healthz(ctx: Ctx, database: NamedDependency[DatabaseMonitor]) -> Response[dict[str, Any]]:
    if not await database.admit():
        return Response({"status": "unavailable", **database.status()}, status_code=503)
    reasons: list[str] = []
    figures: dict[str, Any] = {}
    try:
        async with ctx.pool.acquire(timeout=CHECK_TIMEOUT) as conn:
            await conn.fetchval("SELECT 1", timeout=CHECK_TIMEOUT)
    except TimeoutError:  # slow, not refused: probed at once, and the monitor judges whether it is away
        database.suspect()
        reasons.append(f"database: no answer within {CHECK_TIMEOUT:g} s")
    except Exception as exc:  # the database is unreachable: not ready (and probed at once)
        database.suspect()
        reason = f"{type(exc).__name__}: {exc}"
        return Response(
            {"status": "unavailable", "database": "unavailable", "reason": reason}, status_code=503
        )
    if database.silent_probes:
        reasons.append(f"database: {database.silent_probes} health probe(s) in a row unanswered")
    if ctx.search is None or ctx.search.indexer.index is None:
        return Response({"status": "unavailable", "reason": "search index"}, status_code=503)
    for check in DEGRADED_CHECKS:
        try:
            found, numbers = await check(ctx)
        except Exception as exc:  # a check that cannot run says so; it never turns healthz into a 500
            found, numbers = [f"{check.__name__}: {type(exc).__name__}: {exc}"], {}
        reasons.extend(found)
        figures.update(numbers)
    if reasons:
        return Response({"status": "degraded", "reasons": reasons, **figures}, status_code=200)
    return Response({"status": "ok"}, status_code=200)


@get("/.well-known/databricks-config", include_in_schema=False)
async def databricks_config() -> None:
    raise NotFound("no workspace configuration is served here")
