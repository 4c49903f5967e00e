"""Audit events of work that no HTTP request carries: a memory pipeline's run, done by a
background worker as the pipeline's owner.

`background(writer, request_id=..., principal=..., params=...)` makes a `PendingEvent` current
as `catalog.web.middleware.RequestMiddleware` does for a request, so the code inside is audited as it would be
inside one:
- each `operation()` (one session's extraction, each tool call of the model, nested or not) gets
  an event of its own, and a change made with `audited()` inside it commits that event with
  itself;
- every event names `principal` (the work acts as it: each check inside is made for it, and a
  denial is recorded as one), carries `request_id` (stable for the piece of work, so the events of
  a run resumed by another process share it), `params` merged into its `request_params`, the user
  agent `USER_AGENT` and no source IP;
- the pending event itself appends nothing when the block ends (there is no response to account
  for): `record(pending, ...)` appends the events that are no operation, e.g. the work's start and
  end, with decision `system`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from catalog.recorder.pseudonyms import with_scopes
from catalog.recorder.writer import AuditWriter, PendingEvent, current

USER_AGENT = "memory-catalog background worker"


@contextmanager
def background(
    writer: AuditWriter,
    *,
    request_id: str,
    principal: str,
    params: dict[str, Any],
    reached: Callable[[PendingEvent], Sequence[str]] | None = None,
) -> Iterator[PendingEvent]:
    """`reached`: the scopes an event's work reached through the access seam
    (`catalog.access.limits.scopes_reached`), which its event names as a request's does."""
    pending = PendingEvent(enabled=writer.enabled, early_unlock=writer.early_unlock)

    def event_for(inner: PendingEvent, status: int) -> dict[str, Any]:
        return _event(inner, status, request_id, principal, params, reached(inner) if reached else ())

    pending.event_for = event_for
    pending.describe = lambda status: event_for(pending, status)
    pending.record = writer.record
    token = current.set(pending)
    try:
        yield pending
    finally:
        current.reset(token)


async def record(
    pending: PendingEvent,
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
    if not pending.enabled or pending.event_for is None or pending.record is None:
        return
    event = PendingEvent(
        action_name=action_name,
        securable_type=securable_type,
        securable_full_name=securable_full_name,
        securable_id=securable_id,
        decision="system",
        reason=reason,
        result_count=result_count,
        params=params,
    )
    await pending.record(**pending.event_for(event, 200))


def _event(
    pending: PendingEvent,
    status: int,
    request_id: str,
    principal: str,
    params: dict[str, Any],
    reached: Sequence[str],
) -> dict[str, Any]:
    """An event as `catalog.web.middleware.request_event` builds a request's, without the HTTP parts."""
    error_code = None
    if pending.outcome is not None:
        status, error_code = pending.outcome
    decision = pending.decision or ("deny" if status == 403 else "allow")
    return {
        "request_id": request_id,
        "principal": principal,
        "on_behalf_of": None,
        "source_ip": None,
        "user_agent": USER_AGENT,
        "action_name": pending.action_name or "background.work",
        "securable_type": pending.securable_type,
        "securable_full_name": pending.securable_full_name,
        "securable_id": pending.securable_id,
        "privilege": pending.privilege,
        "decision": decision,
        "reason": pending.reason or error_code,
        "status_code": status,
        "error_code": error_code,
        "request_params": with_scopes({**params, **(pending.params or {})}, reached),
        "result_count": pending.result_count,
        "policy_revision": pending.policy_revision,
    }
