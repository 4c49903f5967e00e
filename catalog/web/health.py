"""Operational routes, open without a token: health and the Databricks SDK's config probe.

`/healthz`:
- 503 `{"status": "draining", "reason": ..., "seconds_left": S}` from the first SIGTERM or SIGINT
  of `catalog serve`, while it still serves requests for `CATALOG_DRAIN_SECONDS` so that a load
  balancer's checks take it out of rotation first (catalog.web.serving.Drain);
- 503 `{"status": "unavailable", "reason": ...}` when the server cannot serve: the database is
  unreachable (the monitor's verdict is down and a quick attempt fails, as for any request; or
  this check's own query is refused), or there is no search index;
- 200 `{"status": "degraded", "reasons": [...], ...figures}` when it serves but something is
  wrong that a load balancer should not act on: derived state falling behind (searches answer
  from what is indexed), or the database slow to answer (this check's query or the monitor's
  probes timing out: a busy machine is not an outage, see catalog.db.health; or an audit append
  waiting more than 5 s for the database to confirm its commit, which holds up every audited
  request: a synchronous standby away). Each check in
  `DEGRADED_CHECKS` adds its reasons and figures;
- 200 `{"status": "ok"}` otherwise.

A full-text index behind its change log (changes committed in PostgreSQL that it has not applied
yet) adds `"index": {"behind": N, "watermark": W, "latest": L}` to a 200 answer (the transcripts'
index: `"transcripts_index"`), and only then (a node caught up answers just its status). Being
behind never makes the node unhealthy by itself: reads come from PostgreSQL, a search waits for
the index to catch up (read-your-writes) and says `degraded` in its answer when it does not, and
an index that fails to catch up (a full disk) is a `degraded` reason of its own. `N` counts change
rows: a busy node is a few behind at any instant; one whose `N` grows while `watermark` stays put
has an indexer that is stuck, which is for an alert on it, not for the load balancer.
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
from catalog.search.corpus import ENTRIES
from catalog.web.deps import Ctx, Req, server_parts
from catalog.web.serving import drain_of

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


async def index_positions(ctx: Context) -> dict[str, Any]:
    """`index` (and `transcripts_index`): each full-text index that is behind its change log."""
    assert ctx.search is not None
    found: dict[str, Any] = {}
    for corpus, part in ctx.search.corpora.items():
        position = await part.indexer.position()
        if position.behind:
            name = "index" if corpus is ENTRIES else f"{corpus.name}_index"
            found[name] = {
                "behind": position.behind,
                "watermark": position.watermark,
                "latest": position.latest,
            }
    return found


@get("/healthz", operation_id="health", tags=["operations"])
async def healthz(
    request: Req, ctx: Ctx, database: NamedDependency[DatabaseMonitor]
) -> Response[dict[str, Any]]:
    drain = drain_of(request.scope)
    if drain is not None:
        drain.watched = True  # something watches this server's health: a drain waits for it
        if drain.draining:
            reason = "shutting down: serving for a few seconds more, then stopping"
            return Response(
                {"status": "draining", "reason": reason, "seconds_left": round(drain.seconds_left(), 1)},
                status_code=503,
            )
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
    parts = server_parts(request.app)
    waiting = parts.audit.waiting_seconds if parts is not None else 0.0
    if waiting > CHECK_TIMEOUT:  # every audited request waits with it
        reasons.append(
            f"audit log: an append has waited {waiting:.0f} s for the database to confirm its commit "
            "(a synchronous standby away?)"
        )
        figures["audit_append_waiting_seconds"] = round(waiting, 1)
    if ctx.search is None or ctx.search.indexer.index is None:
        return Response({"status": "unavailable", "reason": "search index"}, status_code=503)
    for check in DEGRADED_CHECKS:
        try:
            found, numbers = await check(ctx)
        except Exception as exc:  # a check that cannot run says so; it never turns healthz into a 500
            found, numbers = [f"{check.__name__}: {type(exc).__name__}: {exc}"], {}
        reasons.extend(found)
        figures.update(numbers)
    try:
        behind = await index_positions(ctx)
    except Exception:  # the change log cannot be read: search_check above has said why
        behind = {}
    if reasons:
        return Response({"status": "degraded", "reasons": reasons, **figures, **behind}, status_code=200)
    return Response({"status": "ok", **behind}, status_code=200)


@get("/.well-known/databricks-config", include_in_schema=False)
async def databricks_config() -> None:
    raise NotFound("no workspace configuration is served here")
