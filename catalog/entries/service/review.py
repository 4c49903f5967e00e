"""Review: the entries a store's trust policy holds (`quarantined`) and a MANAGE holder's
verdict on them (`review`)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from catalog import telemetry
from catalog.auth import Principal
from catalog.context import Context
from catalog.entries import operations as ops
from catalog.entries import provenance, repo
from catalog.entries.repo import EntryRow
from catalog.entries.service.core import Page, _key, _written, resolve_store
from catalog.errors import Aborted, InvalidParameter, NotFound
from catalog.governance.namespace.service import held_conflict, is_held
from catalog.recorder import audited, note_params, note_result
from catalog.wire.entry_keys import validate_scope
from catalog.wire.pagination import Pages, page_size

# --- review: the entries a store's trust policy holds ----------------------------------------------

QueueCursor = tuple[str, str, str]  # the (scope, session, path) a page of the review queue ends at


MAX_REVIEW_REASON = 1000


async def quarantined(ctx: Context, principal: Principal, op: ops.Quarantined) -> Page:
    """A page of the store's review queue (MANAGE: `entries.review`): its held entries, every
    scope, by (scope, session, path), whatever the store's scope binding (as an export)."""
    scope = validate_scope(op.scope) if op.scope is not None else None
    limit = page_size(op.page_size, default=ctx.settings.page_default, cap=ctx.settings.page_cap)
    store = await resolve_store(ctx, principal, op.store, "entries.review")
    pages = Pages(ctx.pool, "entries.quarantined", store=store.full_name, scope=scope)
    after = await pages.after(op.page_token, QueueCursor)
    rows = await repo.quarantined(ctx.pool, store.node.id, scope, after, limit + 1)
    page = rows[:limit]
    note_result(len(page))
    if scope is None and page:  # the scopes the page read: auditors find the read by each
        note_params({"scopes": sorted({row.scope for row in page})})
    if len(rows) <= limit:
        return Page(page, None)
    last = page[-1]
    return Page(page, await pages.token([last.scope, last.session_id, last.path]))


@dataclass(frozen=True)
class Reviewed:
    decision: str  # approve | reject
    row: EntryRow | None  # the entry now (None: a rejection deleted it, as it had no earlier text)


@telemetry.memory_operation("update_memory")
async def review(ctx: Context, principal: Principal, op: ops.Review) -> Reviewed:
    """Approve or reject an entry held for review (MANAGE: `entries.review`), whatever the store's
    scope binding. `approve` makes the held text active, as a new version (`approve`) whose
    provenance is the held text's with the review added; `reject` puts the entry back as it was
    before the held writes (its newest kept version not held), as a new version (`reject`), or
    deletes it when it had none. A precondition (`if_match`) names the held version decided on.
    Under a legal hold a rejection that would delete the entry is refused (409)."""
    reason = op.reason.strip() if op.reason else None
    if reason is not None and not 1 <= len(reason) <= MAX_REVIEW_REASON:
        raise InvalidParameter(f"reason must be 1-{MAX_REVIEW_REASON} characters", "reason")
    note_params({"decision": op.decision})
    store = await resolve_store(ctx, principal, op.store, "entries.review")
    key = _key(store, op.key)
    note_params({"scope": key.scope, "path": key.path})  # the body named them: auditors find it by them
    decided = {
        "decision": "approved" if op.decision == "approve" else "rejected",
        "by": principal.name,
        "at": int(time.time() * 1000),
        "via": op.channel.via,
        **({"reason": reason} if reason else {}),
    }
    async with audited(ctx.pool) as conn:
        current = await repo.get(conn, key, for_update=True)
        if current is None or not current.held:
            raise NotFound(f"no entry held for review at {key.path} in scope {key.scope}")
        if op.if_match is not None and current.version != op.if_match:
            raise Aborted(f"the entry is at version {current.version}, not {op.if_match}")
        note_result(1)
        if op.decision == "approve":
            row = await repo.approve(conn, key, current.version, principal.name, decided)
            assert row is not None  # the row's lock holds its version and state
            result = Reviewed("approve", row)
        else:
            kept = await repo.before_hold(conn, key, current.id)
            if kept is not None:
                result = Reviewed("reject", await repo.put_back(conn, current, kept, principal.name, decided))
            else:
                if await is_held(ctx, store):
                    raise held_conflict(store, "deleted")
                gone = {**provenance.of_deletion(principal, op.channel), "review": decided}
                await repo.delete(conn, store.node.id, current.id, current.version, principal.name, gone)
                result = Reviewed("reject", None)
    _written(ctx)
    return result
