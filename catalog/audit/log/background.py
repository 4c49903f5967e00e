"""Audit events of work that no HTTP request carries: a memory pipeline's run, done by a
background worker as the pipeline's owner.

`background(writer, request_id=..., principal=..., params=...)` makes an `AuditContext` current
as `catalog.web.middleware.RequestContext` does for a request, so the code inside is audited as it would be
inside one:
- each `operation()` (one session's extraction, each tool call of the model, nested or not) gets
  an event of its own, and a change made with `audited()` inside it commits that event with
  itself;
- every event names `principal` (the work acts as it: each check inside is made for it, and a
  denial is recorded as one), carries `request_id` (stable for the piece of work, so the events of
  a run resumed by another process share it), `params` merged into its `request_params`, the user
  agent `USER_AGENT` and no source IP;
- the context itself appends nothing when the block ends (there is no response to account for):
  `record(context, ...)` appends the events that are no operation, e.g. the work's start and end,
  with decision `system`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from catalog.audit.log.writer import AuditContext, AuditWriter, current

USER_AGENT = "memory-catalog background worker"


@contextmanager
def background(
    writer: AuditWriter, *, request_id: str, principal: str, params: dict[str, Any]
) -> Iterator[AuditContext]:
    context = AuditContext(enabled=writer.enabled, early_unlock=writer.early_unlock)

    def event_for(inner: AuditContext, status: int) -> dict[str, Any]:
        return _event(inner, status, request_id, principal, params)

    context.event_for = event_for
    context.describe = lambda status: event_for(context, status)
    context.record = writer.record
    token = current.set(context)
    try:
        yield context
    finally:
        current.reset(token)


async def record(
    context: AuditContext,
    *,
    action_name: str,
    securable_type: str | None,
    securable_full_name: str | None,
    securable_id: str | None,
    params: dict[str, Any],
    result_count: int | None = None,
    reason: str | None = None,
) -> None:
    """Append one event of the background work (not an operation): decision `system`, status 200."""
    if not context.enabled or context.event_for is None or context.record is None:
        return
    event = AuditContext(
        action_name=action_name,
        securable_type=securable_type,
        securable_full_name=securable_full_name,
        securable_id=securable_id,
        decision="system",
        reason=reason,
        result_count=result_count,
        params=params,
    )
    await context.record(**context.event_for(event, 200))


def _event(
    context: AuditContext, status: int, request_id: str, principal: str, params: dict[str, Any]
) -> dict[str, Any]:
    """An event as `catalog.web.middleware.request_event` builds a request's, without the HTTP parts."""
    error_code = None
    if context.outcome is not None:
        status, error_code = context.outcome
    decision = context.decision or ("deny" if status == 403 else "allow")
    return {
        "request_id": request_id,
        "principal": principal,
        "on_behalf_of": None,
        "source_ip": None,
        "user_agent": USER_AGENT,
        "action_name": context.action_name or "background.work",
        "securable_type": context.securable_type,
        "securable_full_name": context.securable_full_name,
        "securable_id": context.securable_id,
        "privilege": context.privilege,
        "decision": decision,
        "reason": context.reason or error_code,
        "status_code": status,
        "error_code": error_code,
        "request_params": {**params, **(context.params or {})},
        "result_count": context.result_count,
        "policy_revision": context.policy_revision,
    }
