"""Reading and verifying the audit log, and reading the provenance of entry versions (READ_AUDIT
on the metastore)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import asyncpg
import msgspec

from catalog.access import SecurableType
from catalog.audit.auditors import repo
from catalog.auth import Principal
from catalog.context import Context
from catalog.entries.provenance import answer
from catalog.entries.schemas import Provenance
from catalog.errors import InvalidParameter, NotFound
from catalog.lineage.service import epoch_ms
from catalog.recorder import note_result
from catalog.recorder.chain import Verification, verify
from catalog.recorder.pseudonyms import scope_pseudonym
from catalog.wire.entry_keys import validate_path, validate_scope, validate_session
from catalog.wire.names import split_full_name
from catalog.wire.pagination import Pages, page_size

Decision = Literal["allow", "deny", "unauthenticated", "system"]
DECISIONS = ("allow", "deny", "unauthenticated", "system")


class AuditEvent(msgspec.Struct, omit_defaults=False, kw_only=True):
    seq: int
    event_id: str
    event_time: int
    request_id: str
    principal: str | None
    on_behalf_of: str | None
    source_ip: str | None
    user_agent: str | None
    service_name: str
    action_name: str
    securable_type: str | None
    securable_full_name: str | None
    securable_id: str | None
    privilege: str | None
    decision: Decision
    reason: str | None
    status_code: int | None
    error_code: str | None
    request_params: dict[str, Any]
    result_count: int | None
    policy_revision: int | None
    prev_hash: str
    hash: str


class AuditEvents(msgspec.Struct, omit_defaults=True, kw_only=True):
    events: list[AuditEvent]
    next_page_token: str | None = None


class VerifyResult(msgspec.Struct, kw_only=True):
    ok: bool
    checked: int
    first_broken_seq: int | None


def _event(row: asyncpg.Record) -> AuditEvent:
    data = dict(row)
    data["event_id"] = str(data["event_id"])
    data["event_time"] = int(data["event_time"].timestamp() * 1000)
    return AuditEvent(**data)


async def _authorize(ctx: Context, principal: Principal) -> None:
    await ctx.access.resolve(principal, "audit.read", SecurableType.METASTORE)


async def list_events(
    ctx: Context,
    principal: Principal,
    *,
    start_time: int | None,
    end_time: int | None,
    who: str | None,
    action_name: str | None,
    securable_full_name: str | None,
    decision: str | None,
    status_code: int | None,
    order: str | None,
    size: int | None,
    page_token: str | None,
    scope: str | None = None,
) -> AuditEvents:
    """A page of events, newest first unless `order=asc`. Events hold scopes, entry paths and end
    users as pseudonyms (`catalog.recorder.pseudonyms`): `scope` finds a scope's events while its
    subject has not been erased, and none after."""
    if decision is not None and decision not in DECISIONS:
        raise InvalidParameter("decision must be allow, deny, unauthenticated or system", "decision")
    if order not in (None, "asc", "desc"):
        raise InvalidParameter("order must be asc or desc", "order")
    if status_code is not None and not 100 <= status_code <= 599:
        raise InvalidParameter("status_code must be an HTTP status (100-599)", "status_code")
    start, end = epoch_ms(start_time, "start_time"), epoch_ms(end_time, "end_time")
    limit = page_size(size, default=ctx.settings.page_default, cap=ctx.settings.page_cap, field="page_size")
    pages = Pages(
        ctx.pool,
        "audit",
        start_time=start_time,
        end_time=end_time,
        principal=who,
        action_name=action_name,
        securable_full_name=securable_full_name,
        decision=decision,
        status_code=status_code,
        order=order or "desc",
        scope=scope,
    )
    after = await pages.after(page_token, int)
    await _authorize(ctx, principal)
    hidden = None
    if scope is not None:
        hidden = await scope_pseudonym(ctx.pool, validate_scope(scope))
        if hidden is None:  # never seen, or erased: no event can be found by it
            return AuditEvents(events=[], next_page_token=None)
    rows = await repo.list_events(
        ctx.pool,
        start=start,
        end=end,
        principal=who,
        action_name=action_name,
        securable_full_name=securable_full_name,
        decision=decision,
        status_code=status_code,
        after_seq=after,
        ascending=order == "asc",
        limit=limit + 1,
        scope_pseudonym=hidden,
    )
    page = rows[:limit]
    token = await pages.token(page[-1]["seq"]) if len(rows) > limit else None
    return AuditEvents(events=[_event(r) for r in page], next_page_token=token)


async def verify_chain(pool: asyncpg.Pool) -> Verification:
    async with pool.acquire() as conn:
        rows = [row async for row in repo.rows_in_order(conn)]
    return verify(rows)


async def verify_events(ctx: Context, principal: Principal) -> VerifyResult:
    await _authorize(ctx, principal)
    result = await verify_chain(ctx.pool)
    return VerifyResult(ok=result.ok, checked=result.checked, first_broken_seq=result.first_broken_seq)


MAX_BUCKETS = 60
DEFAULT_SPAN = timedelta(days=30)  # an open-ended timeline reaches back this far at most


@dataclass(frozen=True)
class Bucket:
    start: datetime
    end: datetime
    counts: dict[str, int]  # events by decision (allow, deny, unauthenticated, system)


@dataclass(frozen=True)
class Timeline:
    start: datetime
    end: datetime
    buckets: list[Bucket]


async def timeline(
    ctx: Context,
    principal: Principal,
    *,
    start_time: int | None,
    end_time: int | None,
    who: str | None,
    action_name: str | None,
    securable_full_name: str | None,
    decision: str | None,
    buckets: int = 30,
) -> Timeline:
    """The matching events counted by decision over equal stretches of time (a chart of the
    log). Without a start, it begins at the first matching event of the last 30 days; without an
    end, it ends now."""
    if decision is not None and decision not in DECISIONS:
        raise InvalidParameter("decision must be allow, deny, unauthenticated or system", "decision")
    if not 1 <= buckets <= MAX_BUCKETS:
        raise InvalidParameter(f"buckets must be between 1 and {MAX_BUCKETS}", "buckets")
    start, end = epoch_ms(start_time, "start_time"), epoch_ms(end_time, "end_time")
    if start is not None and end is not None and end <= start:
        raise InvalidParameter("end_time must be after start_time", "end_time")
    await _authorize(ctx, principal)
    filters = {
        "principal": who,
        "action_name": action_name,
        "securable_full_name": securable_full_name,
        "decision": decision,
    }
    end = end or datetime.now(UTC) + timedelta(milliseconds=1)  # the newest event is inside
    if start is None:
        first, _ = await repo.time_bounds(ctx.pool, **filters, start=end - DEFAULT_SPAN, end=end)
        start = first if first is not None else end - timedelta(hours=1)
        if start >= end:
            start = end - timedelta(seconds=1)
    span = (end - start) / buckets
    counts: dict[int, dict[str, int]] = {}
    for row in await repo.timeline(ctx.pool, **filters, start=start, end=end, buckets=buckets):
        counts.setdefault(row["bucket"], {})[row["decision"]] = row["events"]
    return Timeline(
        start=start,
        end=end,
        buckets=[
            Bucket(start=start + span * i, end=start + span * (i + 1), counts=counts.get(i, {}))
            for i in range(buckets)
        ],
    )


# --- provenance of entry versions (auditors: READ_AUDIT) ---------------------------------------------

ProvenanceClass = Literal["person", "application", "model", "unknown"]
VersionState = Literal["active", "superseded", "merged", "quarantined"]


class ProvenanceRecord(msgspec.Struct, omit_defaults=True, kw_only=True):
    """One kept version of an entry, without its text: where it came from."""

    entry_id: str
    scope: str
    path: str
    session_id: str | None = None
    etag: str  # the version
    operation: str  # create | update | restore | delete | approve | reject
    changed_at: int  # epoch milliseconds
    changed_by: str
    state: str  # active | superseded | merged | quarantined (then)
    provenance: Provenance


class ProvenanceRecords(msgspec.Struct, omit_defaults=True, kw_only=True):
    memory_store: str
    versions: list[ProvenanceRecord]  # newest first
    next_page_token: str | None = None


async def provenance(
    ctx: Context,
    principal: Principal,
    securable_full_name: str,
    *,
    scope: str | None,
    path: str | None,
    session_id: str | None,
    via: str | None,
    source_class: str | None,
    who: str | None,
    state: str | None,
    size: int | None,
    page_token: str | None,
) -> ProvenanceRecords:
    """A page of the provenance of a store's kept versions, newest first (`provenance.read`:
    READ_AUDIT on the metastore, as lineage), filtered by key, channel, class, principal, state.
    The text of the versions is never answered here."""
    limit = page_size(size, default=ctx.settings.page_default, cap=ctx.settings.page_cap, field="page_size")
    key = (
        None if scope is None else validate_scope(scope),
        None if session_id is None else validate_session(session_id),
        None if path is None else validate_path(path),
    )
    pages = Pages(
        ctx.pool,
        "provenance",
        store=securable_full_name,
        scope=key[0],
        session_id=key[1],
        path=key[2],
        via=via,
        source_class=source_class,
        principal=who,
        state=state,
    )
    after = await pages.after(page_token, int)
    await ctx.access.resolve(principal, "provenance.read", SecurableType.METASTORE)
    parts = split_full_name(securable_full_name, 3, "securable_full_name")
    store = await ctx.access.locate(SecurableType.MEMORY_STORE, parts)
    if not store.exists:
        raise NotFound(f"memory store {store.full_name} does not exist")
    rows = await repo.provenance(
        ctx.pool,
        store.node.id,
        scope=key[0],
        session_id=key[1],
        path=key[2],
        via=via,
        source_class=source_class,
        principal=who,
        state=state,
        after_seq=after,
        limit=limit + 1,
    )
    page = rows[:limit]
    note_result(len(page))
    token = await pages.token(page[-1]["seq"]) if len(rows) > limit else None
    return ProvenanceRecords(
        memory_store=store.full_name,
        versions=[
            ProvenanceRecord(
                entry_id=r["entry_id"],
                scope=r["scope"],
                path=r["path"],
                session_id=r["session_id"] or None,
                etag=str(r["version"]),
                operation=r["operation"],
                changed_at=r["changed_at"],
                changed_by=r["changed_by"],
                state=r["state"],
                provenance=msgspec.convert(answer(r["provenance"], r["changed_by"]), Provenance),
            )
            for r in page
        ],
        next_page_token=token,
    )
