"""An entry's versions: its history (the text withheld where redacted or held), a restore of an
earlier version, a state change (superseded, merged) and the redaction of a version's text."""

from __future__ import annotations

import msgspec

from catalog import telemetry
from catalog.auth import Principal
from catalog.context import Context
from catalog.entries import operations as ops
from catalog.entries import provenance, repo
from catalog.entries.repo import EntryRow
from catalog.entries.service.core import (
    Written,
    _ensure_may_read,
    _held,
    _judge,
    _key,
    _sees,
    _written,
    check_binding,
    may_review,
    resolve_store,
)
from catalog.errors import InvalidParameter, NotFound, ResourceConflict
from catalog.governance.namespace.service import ensure_not_held
from catalog.recorder import audited, note_result
from catalog.search import log_changed
from catalog.search.corpus import ENTRIES
from catalog.wire.entry_keys import validate_scope

HISTORY_LIMIT = 1000  # versions one history answer holds at most (newest first)


async def history(ctx: Context, principal: Principal, op: ops.History) -> list[repo.VersionRow]:
    """The versions of an entry's key, newest first (READ): also of a deleted entry. A version
    held for review keeps its text from everyone but MANAGE holders and its author (`withheld`)."""
    store = await resolve_store(ctx, principal, op.store, "entries.read", [validate_scope(op.key.scope)])
    key = _key(store, op.key)
    versions = await repo.history(ctx.pool, key, HISTORY_LIMIT)
    if not versions:
        raise NotFound(f"no entry at {key.path} in scope {key.scope} has a history")
    note_result(len(versions))
    if any(v.state == "quarantined" for v in versions) and not may_review(ctx, principal, store):
        versions = [_withheld(v) if v.changed_by != principal.name else v for v in versions]
    return versions


def _withheld(version: repo.VersionRow) -> repo.VersionRow:
    """A version as answered to a reader who may not read it: a held one without its text."""
    if version.state != "quarantined" or version.operation == "delete":
        return version
    return msgspec.structs.replace(version, contents=None, description=None, metadata=None, withheld=True)


@telemetry.memory_operation("update_memory")
async def restore(ctx: Context, principal: Principal, op: ops.Restore) -> Written:
    """Write a kept version of the key as its newest (WRITE; READ too, since it reads the text of
    that version). The entry is created again if it was deleted."""
    store = await resolve_store(ctx, principal, op.store, "entries.write", [validate_scope(op.key.scope)])
    await _ensure_may_read(ctx, principal, store, "restore")
    key = _key(store, op.key)
    kept = await repo.version(ctx.pool, key, op.version)
    if kept is None:
        raise NotFound(f"no version {op.version} of the entry at {key.path} in scope {key.scope} is kept")
    if kept.state == "quarantined":  # what was held is released by a review only
        await ctx.access.ensure(principal, "entries.review", store)
    verdict = await _judge(ctx, principal, store, op.channel, [kept.contents or "", kept.description or ""])
    origin = provenance.of_change(
        principal, op.channel, verdict=verdict, extra_source={"restored_version": op.version}
    )
    async with audited(ctx.pool) as conn:
        kept = await repo.version(conn, key, op.version)
        if kept is None:
            raise NotFound(f"no version {op.version} of the entry at {key.path} in scope {key.scope} is kept")
        if kept.redacted_at is not None:
            raise ResourceConflict(
                f"version {op.version} of the entry at {key.path} was redacted: it cannot be restored"
            )
        if await repo.get(conn, key) is not None:
            await ensure_not_held(ctx, store, "replaced")
        held = verdict is not None and verdict.held
        row = await repo.restore(conn, key, kept, principal.name, origin, held)
        note_result(1)
    _written(ctx)
    return Written(row, True)


async def set_state(ctx: Context, principal: Principal, op: ops.SetState) -> EntryRow:
    """Mark an entry superseded by another, merged into another, or active again (WRITE): a new
    version of it, its contents unchanged. The entry replacing it must exist in the same store
    (in a scope the caller may use) and be another entry; an active entry names none."""
    scope = validate_scope(op.key.scope)
    store = await resolve_store(ctx, principal, op.store, "entries.write", [scope])
    key = _key(store, op.key)
    if op.state == "active":
        if op.superseded_by is not None:
            raise InvalidParameter(
                "an active entry is superseded by none: leave superseded_by out", "superseded_by"
            )
        replacing = None
    else:
        if op.superseded_by is None:
            raise InvalidParameter(f"a {op.state} entry names the entry replacing it", "superseded_by")
        other = _key(store, op.superseded_by, "superseded_by.")
        await check_binding(ctx, principal, store, [other.scope])
        target = await repo.get(ctx.pool, other)
        if target is None or target.held:  # a held entry replaces nothing until it is approved
            raise InvalidParameter(
                f"superseded_by: no entry at {other.path} in scope {other.scope}", "superseded_by"
            )
        if other == key:
            raise InvalidParameter("an entry cannot supersede itself", "superseded_by")
        replacing = target.id
    async with audited(ctx.pool) as conn:
        row = await repo.set_state(conn, key, op.state, replacing, principal.name)
        if row is None:
            there = await repo.get(conn, key)
            if there is not None and there.held and _sees(_held(ctx, principal, store, True), there):
                raise ResourceConflict(
                    f"the entry at {key.path} in scope {key.scope} is held for review: a MANAGE holder "
                    "approves or rejects it (entries:review) before its state can change"
                )
            raise NotFound(f"no entry at {key.path} in scope {key.scope}")
        note_result(1)
    _written(ctx)
    return row


async def redact(ctx: Context, principal: Principal, op: ops.Redact) -> tuple[repo.VersionRow, bool]:
    """Redact a kept version (MANAGE): its contents and description in the history are replaced
    by who redacted it, when and why; when it is the entry's current version, the entry's
    contents, description and vector go too, at the same version, and the full-text index drops
    its text. Later versions, the lineage and the audit chain are untouched. Answers the version
    as now kept and whether it was the current one. A legal hold does not prevent it (redaction
    is for what should never have been stored; it is audited like any change)."""
    store = await resolve_store(ctx, principal, op.store, "entries.redact", [validate_scope(op.key.scope)])
    key = _key(store, op.key)
    reason = op.reason.strip()
    async with audited(ctx.pool) as conn:
        if not await repo.redact(conn, key, op.version, principal.name, reason):
            kept = await repo.version(conn, key, op.version)
            if kept is not None and kept.redacted_at is not None:
                raise ResourceConflict(
                    f"version {op.version} of the entry at {key.path} in scope {key.scope} was redacted "
                    f"already, by {kept.redacted_by}"
                )
            raise NotFound(f"no version {op.version} of the entry at {key.path} in scope {key.scope} is kept")
        entry_id = await repo.redact_current(conn, key, op.version)
        if entry_id is not None:
            await log_changed(conn, ENTRIES, store.node.id, [entry_id])
        kept = await repo.version(conn, key, op.version)
        assert kept is not None
        note_result(1)
    if entry_id is not None:
        _written(ctx)
    return kept, entry_id is not None
