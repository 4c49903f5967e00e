"""Entries: the one owner of entry behaviour. Each operation (`catalog.entries.operations`) is
validated, authorized on its store through the access seam, held to the store's scope binding,
and run here; both dialects only build operations and shape the replies.

Rules:
- an entry's key is (store, scope, session or none, path); every write is one statement (or a
  row-locked read-modify-write for edits), so concurrent writers never lose an update;
- versions give optimistic concurrency: every change bumps `version` (the ETag); an expected
  version that is stale is 409 ABORTED;
- a caller holding WRITE but not READ learns nothing of what a store holds: its writes are
  acknowledged without contents, an edit that depends on the text needs READ too, and its APPEND
  is never deduplicated (whether it changed the entry would say what the entry held);
- a search ranks in the engine (`catalog.search`) and every hit is re-read here, so a deleted
  entry or an old version is never answered;
- every change records its provenance (`catalog.entries.provenance`: who, through what channel,
  from what, with which model), and a store's trust policy (`catalog.access.trust`) judges
  every write and edit: a write it holds is kept `quarantined`, and stays so (with any later
  change to it) until a MANAGE holder approves or rejects it (`review`). A held entry is read
  (get, list, search, as-of, history's text) only by MANAGE holders and its author, and only when
  they ask for held entries (`include_quarantined`); a state change, a forget by query and the
  memory tools never reach it. A store without a policy holds nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg
import msgspec

from catalog import telemetry
from catalog.access import Securable, SecurableType, trust
from catalog.auth import Principal
from catalog.context import Context
from catalog.entries import operations as ops
from catalog.entries import provenance, repo
from catalog.entries.repo import NO_HELD, EntryRow, Fields, Held, Key
from catalog.entries.schemas import (
    DELETE_MATCHING_FLOOR,
    MAX_CONTENTS,
    MAX_CREATION_FIELD,
    MAX_DELETE_MATCHING,
    MAX_DESCRIPTION,
    MAX_QUERY,
    MAX_SOURCE_TYPE,
    MAX_SOURCES,
    MAX_TOP_K,
    MAX_TTL_SECONDS,
)
from catalog.errors import (
    Aborted,
    AlreadyExists,
    CatalogError,
    FieldError,
    InvalidParameter,
    NotFound,
    PermissionDenied,
    ResourceConflict,
)
from catalog.governance.namespace.service import (
    ensure_not_held,
    held_conflict,
    held_stores_keeping,
    is_held,
    scope_binding,
    trust_policy,
)
from catalog.lineage import EntryRef, TranscriptRef, check_origin
from catalog.lineage import record as record_lineage
from catalog.recorder import audited, note_params, note_result
from catalog.search import Found, Given, Query, log_changed
from catalog.search.corpus import ENTRIES
from catalog.wire.entry_keys import (
    validate_path,
    validate_path_prefix,
    validate_scope,
    validate_scopes,
    validate_session,
)
from catalog.wire.inputs import within
from catalog.wire.metadata import validate as validate_metadata
from catalog.wire.names import split_full_name
from catalog.wire.pagination import Pages, page_size

MIN_CANDIDATES = 30  # taken from each search mode before fusion (LoCoMo scores the same with more)


@dataclass(frozen=True)
class Written:
    row: EntryRow  # the entry as stored
    readable: bool  # whether the caller may also read it (else answer no contents)


@dataclass(frozen=True)
class Page:
    rows: list[EntryRow]
    next_page_token: str | None


# --- validation ------------------------------------------------------------------------------------


def _label(value: str | None, field: str, limit: int) -> str | None:
    """A short free-string label of an entry (`source_type`, `creation_reason`, ...): 1-`limit`
    characters, 400 naming the field otherwise."""
    if value is not None and (not value or len(value) > limit):
        raise InvalidParameter(f"{field} must be 1-{limit} characters", field)
    return value


def _fields(op: ops.Write) -> Fields:
    return Fields(
        contents=within(op.contents, "contents", MAX_CONTENTS),
        description=within(op.description, "description", MAX_DESCRIPTION),
        source_type=_label(op.source_type, "source_type", MAX_SOURCE_TYPE),
        creation_reason=_label(op.creation_reason, "creation_reason", MAX_CREATION_FIELD),
        creation_source=_label(op.creation_source, "creation_source", MAX_CREATION_FIELD),
        metadata=validate_metadata(op.metadata),
    )


def _key(store: Securable, key: ops.ByKey, prefix: str = "") -> Key:
    return Key(
        store.node.id,
        validate_scope(key.scope, f"{prefix}scope"),
        validate_session(key.session_id, f"{prefix}session_id"),
        validate_path(key.path, f"{prefix}path"),
    )


# --- the store ---------------------------------------------------------------------------------------


async def resolve_store(
    ctx: Context,
    principal: Principal,
    full_name: str,
    action_name: str,
    scopes: Sequence[str] | None = None,
    *,
    field: str = "memory_store",
) -> Securable:
    """Authorize `action_name` on the store, then hold the scopes to its scope binding."""
    parts = split_full_name(full_name, 3, field)
    store = await ctx.access.resolve(principal, action_name, SecurableType.MEMORY_STORE, parts)
    if scopes is not None:
        await check_binding(ctx, principal, store, scopes)
    return store


async def check_binding(ctx: Context, principal: Principal, store: Securable, scopes: Sequence[str]) -> None:
    """The scopes a request reaches on the store: held to the grants limited to scopes that allow
    its actions there, and, with `scope_binding = end_user`, to the scope equal to its verified
    end user (the token's `on_behalf_of`, else its subject), composite scopes `<user>:...`, and
    the store's shared scopes."""
    ctx.access.hold_scopes(principal, store, scopes)
    binding, shared = await scope_binding(ctx, store)
    if binding != "end_user":
        return
    identity = principal.on_behalf_of or principal.name
    for scope in scopes:
        if scope == identity or scope.startswith(f"{identity}:") or scope in shared:
            continue
        raise PermissionDenied(
            f"memory store {store.full_name} binds scopes to the end user: {identity} may use scope "
            f"'{identity}', scopes starting with '{identity}:' and the store's shared scopes, not '{scope}'"
        )


async def _ensure_may_read(ctx: Context, principal: Principal, store: Securable, what: str) -> None:
    try:
        await ctx.access.ensure(principal, "entries.read", store)
    except PermissionDenied as exc:
        raise PermissionDenied(f"{what} reads the entry's text: {exc.message}") from None


async def _find(
    ctx: Context, principal: Principal, store: Securable, target: ops.Target, asked: bool = False
) -> EntryRow:
    """The entry a target names (its scope held to the binding), or 404; an entry held for review
    is found only when `asked`, by a MANAGE holder or its author (else it is not found, as if it
    were not there)."""
    if isinstance(target, ops.ByKey):
        key = _key(store, target)
        await check_binding(ctx, principal, store, [key.scope])
        row = await repo.get(ctx.pool, key)
        if row is None or (row.held and not _sees(_held(ctx, principal, store, asked), row)):
            raise NotFound(f"no entry at {key.path} in scope {key.scope}")
        return row
    row = await repo.get_by_id(ctx.pool, store.node.id, target.entry_id)
    if row is None:
        raise NotFound(f"memory entry {target.entry_id} does not exist")
    await check_binding(ctx, principal, store, [row.scope])
    if row.held and not _sees(_held(ctx, principal, store, asked), row):
        raise NotFound(f"memory entry {target.entry_id} does not exist")
    return row


# --- trust: held entries, and the store's policy ---------------------------------------------------


def may_review(ctx: Context, principal: Principal, store: Securable) -> bool:
    """Whether the caller may review the store's held entries (MANAGE): it then reads them all."""
    return ctx.access.visible(principal, "entries.review", store)


def _held(ctx: Context, principal: Principal, store: Securable, asked: bool) -> Held:
    """Which held entries a read answers: none unless asked; asked, every one to a MANAGE holder,
    its own to anyone else (their author)."""
    if not asked:
        return NO_HELD
    return Held(True, None if may_review(ctx, principal, store) else principal.name)


def _sees(held: Held, row: EntryRow) -> bool:
    """Whether a read answering `held` answers this row (any row not held, a held one as it says)."""
    if not row.held:
        return True
    return held.include and (held.author is None or row.updated_by == held.author)


def _texts(fields: Fields) -> list[str]:
    """What a write's screen reads: its contents, description and metadata's text values."""
    return [fields.contents or "", fields.description or "", *_metadata_texts(fields.metadata)]


async def _judge(
    ctx: Context, principal: Principal, store: Securable, channel: ops.Channel, texts: Sequence[str]
) -> trust.Verdict | None:
    """The store's trust policy's verdict on a change (None: the store has none). The policy was
    read with the store's chain: a store without one costs nothing more. A held change is noted
    in its audit event (`held`: the decision, and the rules that matched)."""
    policy = await trust_policy(ctx, store)
    if policy is None:
        return None
    klass = trust.class_of(channel.via, principal.on_behalf_of)
    verdict = await trust.judge(policy, klass, channel.via, texts, ctx.llm)
    if verdict.held:
        noted: dict[str, str] = {"held": verdict.decision}
        if verdict.rules:
            noted["held_rules"] = ",".join(verdict.rules)
        if verdict.classifier is not None:
            noted["held_classifier"] = verdict.classifier
        note_params(noted)
    return verdict


def _judged(fields: Fields, origin: dict[str, Any], verdict: trust.Verdict | None) -> Fields:
    """The write's fields with its provenance and the policy's hold."""
    return msgspec.structs.replace(fields, provenance=origin, held=verdict is not None and verdict.held)


def _written(ctx: Context) -> None:
    """Wake the indexer and the embedding worker (a search waits for them: read-your-writes)."""
    assert ctx.search is not None
    ctx.search.written()


async def _sources(ctx: Context, principal: Principal, refs: Sequence[ops.Source]) -> list[EntryRow]:
    """Each `derived_from` source must exist (400 naming `derived_from[i]`, whether its store or
    its entry is missing) and be readable by the caller (403, also when a missing store's parents
    are not usable: no existence leak)."""
    if len(refs) > MAX_SOURCES:
        raise InvalidParameter(f"at most {MAX_SOURCES} sources in derived_from", "derived_from")
    rows = []
    for i, ref in enumerate(refs):
        field = f"derived_from[{i}]"
        scope = validate_scope(ref.key.scope, f"{field}.scope")
        try:
            store = await resolve_store(
                ctx, principal, ref.store, "entries.read", [scope], field=f"{field}.memory_store"
            )
        except NotFound:
            raise InvalidParameter(f"{field}: memory store {ref.store} does not exist", field) from None
        key = _key(store, ref.key, f"{field}.")
        row = await repo.get(ctx.pool, key)
        if row is None:
            raise InvalidParameter(
                f"{field}: no entry at {key.path} in scope {key.scope} of {ref.store}", field
            )
        rows.append(row)
    return rows


def _origin(source: ops.TranscriptSource | None) -> TranscriptRef | None:
    """A change's transcript origin, checked for shape before anything is written."""
    if source is None:
        return None
    return check_origin(
        source.kind, source.store, source.store_id, source.scope, source.thread_id, source.item_ids
    )


def _ref(row: EntryRow) -> EntryRef:
    return EntryRef(
        id=row.id, store_id=row.store_id, scope=row.scope, session_id=row.session_id, path=row.path
    )


# --- operations --------------------------------------------------------------------------------------


@telemetry.memory_operation("create_memory")
async def write(ctx: Context, principal: Principal, op: ops.Write) -> Written:
    """Create (EXCLUSIVE), overwrite or append to an entry, with its lineage (the entries and the
    transcript it was derived from). An APPEND that changes nothing records no lineage."""
    scope = validate_scope(op.key.scope)
    fields = _fields(op)
    if op.mode == "APPEND" and not fields.contents:
        raise InvalidParameter("write_mode APPEND needs contents to append", "contents")
    store = await resolve_store(ctx, principal, op.store, "entries.write", [scope])
    key = _key(store, op.key)
    readable = ctx.access.visible(principal, "entries.read", store, [scope])
    sources = await _sources(ctx, principal, op.derived_from)
    origin = _origin(op.origin)
    verdict = await _judge(ctx, principal, store, op.channel, _texts(fields))
    fields = _judged(
        fields,
        provenance.of_change(
            principal, op.channel, origin=op.origin, derived_from=op.derived_from, verdict=verdict
        ),
        verdict,
    )
    async with audited(ctx.pool) as conn:
        note_result(1)
        ready = await _before_write(conn, key)
        if op.mode == "OVERWRITE" and ready.held and ready.live:
            raise held_conflict(store, "overwritten")
        if op.mode == "EXCLUSIVE":
            row = await repo.insert_exclusive(conn, key, fields, principal.name)
            if row is None:
                raise AlreadyExists(f"an entry already exists at {key.path} in scope {scope}")
        elif op.mode == "OVERWRITE":
            row = await repo.upsert_overwrite(conn, key, fields, principal.name)
        else:
            row = await repo.upsert_append(conn, key, fields, principal.name, dedupe=readable)
            if row is None:  # the lines were already there: nothing changed
                row = await repo.get(conn, key)
                if row is None:
                    raise Aborted("the entry changed concurrently; retry")
                return Written(row, readable)
        await record_lineage(conn, principal.name, _ref(row), [_ref(s) for s in sources], origin)
        row = await _expire(conn, row, op.ttl_seconds, ready.default_ttl)
    _written(ctx)
    _expiring(ctx, row)
    return Written(row, readable)


async def _before_write(conn: asyncpg.Connection, key: Key) -> repo.WriteReady:
    """`repo.before_write`, refusing a write at the path of an expired entry a legal hold keeps."""
    ready = await repo.before_write(conn, key)
    if ready.kept_expired:
        raise ResourceConflict(
            f"the memory store is under legal hold: the expired entry at {key.path} in scope {key.scope} is "
            "kept until the hold is lifted, so its path cannot be written"
        )
    return ready


async def _expire(
    conn: asyncpg.Connection, row: EntryRow, ttl_seconds: int | None, default_ttl: int | None
) -> EntryRow:
    """Set the written entry's expiry: the write's `ttl_seconds`, else the store's default."""
    ttl = ttl_seconds if ttl_seconds is not None else default_ttl
    if ttl is None:
        return row
    if not 1 <= ttl <= MAX_TTL_SECONDS:
        raise InvalidParameter(f"ttl_seconds must be between 1 and {MAX_TTL_SECONDS}", "ttl_seconds")
    return await repo.set_expiry(conn, row.store_id, row.id, ttl)


def _expiring(ctx: Context, row: EntryRow) -> None:
    """An entry with an expiry was written: the sweep looks at the next expiry again."""
    if row.expires_at is not None and ctx.expiry_wake is not None:
        ctx.expiry_wake()


async def get(ctx: Context, principal: Principal, op: ops.Get) -> EntryRow:
    """The entry (as it was at `as_of`); one held for review only when asked, to a MANAGE holder
    or its author (anyone else: 404, as if it were not there)."""
    scopes = [validate_scope(op.target.scope)] if isinstance(op.target, ops.ByKey) else None
    at = _as_of(op.as_of)
    store = await resolve_store(ctx, principal, op.store, "entries.read", scopes)
    if at is None:
        row = await _find(ctx, principal, store, op.target, op.include_quarantined)
    else:
        held = _held(ctx, principal, store, op.include_quarantined)
        row = await _found_then(ctx, principal, store, op.target, at, held)
    note_result(1)
    return row


def _as_of(value: int | None) -> int | None:
    """An as-of time (epoch ms) no later than now, kept in the request's audit event."""
    if value is None:
        return None
    now = int(time.time() * 1000)
    if not 0 <= value <= now:
        raise InvalidParameter(f"as_of must be a time in epoch milliseconds from 0 to now ({now})", "as_of")
    note_params({"as_of": str(value)})
    return value


async def _found_then(
    ctx: Context, principal: Principal, store: Securable, target: ops.Target, at: int, held: Held
) -> EntryRow:
    """The entry a target named at time `at` (from the history; its scope held to the binding),
    held for review then only as `held` says."""
    if isinstance(target, ops.ByKey):
        key = _key(store, target)
        await check_binding(ctx, principal, store, [key.scope])
        rows = await repo.as_of(
            ctx.pool,
            store.node.id,
            [key.scope],
            at,
            session_id=key.session_id,
            exact_path=key.path,
            held=held,
        )
        if not rows:
            raise NotFound(f"no entry at {key.path} in scope {key.scope} at {at}")
        return rows[0]
    rows = await repo.as_of(ctx.pool, store.node.id, None, at, entry_id=target.entry_id, held=held)
    if not rows:
        raise NotFound(f"memory entry {target.entry_id} did not exist at {at}")
    await check_binding(ctx, principal, store, [rows[0].scope])
    return rows[0]


Cursor = tuple[str, str, str]  # the (path, scope, session) a page of entries ends at


async def list_entries(ctx: Context, principal: Principal, op: ops.List) -> Page:
    """One page in (path, scope, session) order; its token is good only for the same listing."""
    scopes = validate_scopes(None, op.scopes)
    prefix = validate_path_prefix(op.path_prefix)
    exact = validate_path(op.exact_path) if op.exact_path else None
    session = validate_session(op.session_id) if op.session_id is not None else None
    cap = op.max_page or ctx.settings.page_cap
    default = min(ctx.settings.page_default, cap)
    limit = page_size(op.page_size, default=default, cap=cap, field="page_size")
    where = validate_metadata(op.where, "filter") or None
    at = _as_of(op.as_of)
    store = await resolve_store(ctx, principal, op.store, "entries.read", scopes)
    held = _held(ctx, principal, store, op.include_quarantined)
    pages = Pages(
        ctx.pool,
        f"{op.listing}.entries",
        store=store.full_name,
        scopes=sorted(scopes),
        session=session,
        prefix=prefix,
        path=exact,
        **({"filter": where} if where else {}),  # (a token issued before filters stays good)
        **({"as_of": at} if at is not None else {}),
        **({"include_superseded": True} if op.include_superseded else {}),
        **({"include_quarantined": held.author or "*"} if held.include else {}),
    )
    after = await pages.after(op.page_token, Cursor)
    if at is None:
        rows = await repo.list_entries(
            ctx.pool,
            store.node.id,
            scopes,
            session,
            prefix,
            after,
            limit + 1,
            exact,
            where,
            include_inactive=op.include_superseded,
            held=held,
        )
    else:
        rows = await repo.as_of(
            ctx.pool,
            store.node.id,
            scopes,
            at,
            session_id=session,
            path_prefix=prefix,
            exact_path=exact,
            where=where,
            after=after,
            limit=limit + 1,
            include_inactive=op.include_superseded,  # in their state then
            held=held,
        )
    page = rows[:limit]
    note_result(len(page))
    if len(rows) <= limit:
        return Page(page, None)
    last = page[-1]
    return Page(page, await pages.token([last.path, last.scope, last.session_id]))


def apply_change(current: str | None, change: ops.Change | None) -> str | None:
    """The contents an edit leaves (400 naming the field when it cannot apply)."""
    return _apply(current, change)


def _apply(current: str | None, change: ops.Change | None) -> str | None:
    text_now = current or ""
    if isinstance(change, ops.StrReplace):
        if not change.old:
            raise InvalidParameter("str_replace.old_str must not be empty", "str_replace.old_str")
        count = text_now.count(change.old)
        if count != 1:
            where = "does not occur" if count == 0 else f"occurs {count} times"
            raise InvalidParameter(
                f"str_replace.old_str {where} in the contents; it must occur exactly once",
                "str_replace.old_str",
            )
        return text_now.replace(change.old, change.new, 1)
    if isinstance(change, ops.Insert):
        if change.line is None:
            # no line: after the last one, as `append` adds text (a trailing newline is no line)
            return _apply(current, ops.Append(text=change.text))
        line, lines = change.line, text_now.split("\n") if text_now else []
        if not 0 <= line <= len(lines):
            raise InvalidParameter(
                f"insert.insert_line must be between 0 and {len(lines)}", "insert.insert_line"
            )
        return "\n".join(lines[:line] + change.text.split("\n") + lines[line:])
    if isinstance(change, ops.ReplaceAll):
        return change.contents
    if isinstance(change, ops.Append):
        if not text_now:
            return change.text
        return text_now + ("" if text_now.endswith("\n") else "\n") + change.text
    return current


def _added(change: ops.Change | None) -> str:
    """The text an edit brings in (what the store's screen reads of it)."""
    if isinstance(change, ops.StrReplace):
        return change.new
    if isinstance(change, ops.Insert | ops.Append):
        return change.text
    if isinstance(change, ops.ReplaceAll):
        return change.contents or ""
    return ""


def _metadata_texts(metadata: dict[str, object] | None) -> list[str]:
    return [value for value in (metadata or {}).values() if isinstance(value, str)]


def _reads_text(change: ops.Change | None) -> str | None:
    """The name of an edit whose outcome depends on the text now (its line count, an occurrence),
    which a caller who may write but not read must not learn; None for any other edit."""
    if isinstance(change, ops.StrReplace):
        return "str_replace"
    if isinstance(change, ops.Insert) and change.line is not None:
        return "insert"
    return None


@telemetry.memory_operation("update_memory")
async def edit(ctx: Context, principal: Principal, op: ops.Edit) -> Written:
    """One change to the contents and/or the description, under the row's lock, with the
    transcript it was derived from (if any) in the same transaction. `ttl_seconds` renews the
    expiry in the same transaction; given alone, it is the only change (the entry keeps its
    version, so an If-Match taken before it still holds, and no version is added to the history)."""
    description = within(op.description, "description", MAX_DESCRIPTION)
    if isinstance(op.change, ops.ReplaceAll):
        within(op.change.contents, "replace_all.contents", MAX_CONTENTS)
    metadata = validate_metadata(op.metadata)
    if op.ttl_seconds is not None and not 1 <= op.ttl_seconds <= MAX_TTL_SECONDS:
        raise InvalidParameter(f"ttl_seconds must be between 1 and {MAX_TTL_SECONDS}", "ttl_seconds")
    renews_only = op.change is None and description is None and not op.set_description and metadata is None
    if renews_only and op.ttl_seconds is None:
        raise InvalidParameter(
            "nothing to change: give description, metadata, ttl_seconds or one edit operation", "description"
        )
    scopes = [validate_scope(op.target.scope)] if isinstance(op.target, ops.ByKey) else None
    store = await resolve_store(ctx, principal, op.store, "entries.write", scopes)
    readable = ctx.access.visible(principal, "entries.read", store, scopes)
    if (reads := _reads_text(op.change)) is not None:
        await _ensure_may_read(ctx, principal, store, reads)
    adds_text = isinstance(op.change, ops.Insert | ops.Append) or op.change is None
    if not adds_text or description is not None or op.set_description or metadata is not None:
        await ensure_not_held(ctx, store, "changed except by adding text")
    found = await _find(ctx, principal, store, op.target, asked=True)
    origin = _origin(op.origin)
    judged: tuple[dict[str, Any], bool] | None = None
    if not renews_only:
        texts = [_added(op.change), description or "", *_metadata_texts(metadata)]
        verdict = await _judge(ctx, principal, store, op.channel, texts)
        judged = (
            provenance.of_change(principal, op.channel, origin=op.origin, verdict=verdict),
            verdict is not None and verdict.held,
        )
    async with audited(ctx.pool) as conn:
        note_result(1)
        current = await repo.get_by_id(conn, store.node.id, found.id, for_update=True)
        if current is None:
            raise NotFound(f"no entry at {found.path} in scope {found.scope}")
        if op.if_match is not None and current.version != op.if_match:
            raise Aborted(f"the entry is at version {current.version}, not {op.if_match}")
        if judged is None:
            assert op.ttl_seconds is not None
            renewed = await repo.set_expiry(conn, current.store_id, current.id, op.ttl_seconds)
        else:
            renewed = await _changed(conn, principal, current, op, description, metadata, origin, judged)
    _expiring(ctx, renewed)
    _written(ctx)
    return Written(renewed, readable)


async def _changed(
    conn: asyncpg.Connection,
    principal: Principal,
    current: EntryRow,
    op: ops.Edit,
    description: str | None,
    metadata: dict[str, object] | None,
    origin: TranscriptRef | None,
    judged: tuple[dict[str, Any], bool],
) -> EntryRow:
    """The edit's change to a row locked at its current version (and its new expiry, if any),
    with its provenance and the policy's hold (`judged`)."""
    contents = within(_apply(current.contents, op.change), "contents", MAX_CONTENTS)
    keep = description is None and not op.set_description
    row = await repo.update_contents(
        conn,
        current.store_id,
        current.id,
        current.version,
        contents,
        current.description if keep else description,
        principal.name,
        metadata,
        *judged,
    )
    assert row is not None  # the row lock held the version
    await record_lineage(conn, principal.name, _ref(row), [], origin)
    if op.ttl_seconds is not None:
        row = await repo.set_expiry(conn, row.store_id, row.id, op.ttl_seconds)
    return row


@telemetry.memory_operation("delete_memory")
async def delete(ctx: Context, principal: Principal, op: ops.Delete) -> None:
    scopes = [validate_scope(op.target.scope)] if isinstance(op.target, ops.ByKey) else None
    store = await resolve_store(ctx, principal, op.store, "entries.write", scopes)
    found = await _find(ctx, principal, store, op.target, asked=True)
    await ensure_not_held(ctx, store, "deleted")
    gone = provenance.of_deletion(principal, op.channel)
    async with audited(ctx.pool) as conn:
        note_result(1)
        deleted, version = await repo.delete(conn, store.node.id, found.id, op.if_match, principal.name, gone)
        if not deleted:
            # without a precondition a delete deletes whatever version is there: finding none
            # means a concurrent delete took it first (404); only a precondition answers ABORTED
            if version is None or op.if_match is None:
                raise NotFound(f"no entry at {found.path} in scope {found.scope}")
            raise Aborted(f"the entry is at version {version}, not {op.if_match}")
    _written(ctx)


MAX_BATCH = 100


@dataclass(frozen=True)
class BatchResult:
    path: str
    status: str  # CREATED, UPDATED, UNCHANGED or FAILED
    error_code: str | None = None
    message: str | None = None
    held: bool = False  # written, and held for review by the store's trust policy


@telemetry.memory_operation("create_memory")
async def batch_write(ctx: Context, principal: Principal, op: ops.Batch) -> list[BatchResult]:
    """Up to `MAX_BATCH` writes into one scope, authorized once, committed together with the
    request's audit event; each entry succeeds or fails on its own (a savepoint each), so one
    conflict does not undo the others. Committed at once, they are indexed and embedded as one
    unit of background work."""
    scope = validate_scope(op.scope)
    if not 1 <= len(op.writes) <= MAX_BATCH:
        raise InvalidParameter(f"entries must hold 1-{MAX_BATCH} entries", "entries")
    store = await resolve_store(ctx, principal, op.store, "entries.write", [scope])
    readable = ctx.access.visible(principal, "entries.read", store, [scope])
    held = await is_held(ctx, store)
    results: list[BatchResult | None] = [None] * len(op.writes)
    checked: list[tuple[int, Key, Fields, ops.Write]] = []
    seen: set[Key] = set()
    for i, write_op in enumerate(op.writes):
        try:
            fields = _fields(write_op)
            if write_op.mode == "APPEND" and not fields.contents:
                raise InvalidParameter("write_mode APPEND needs contents to append", "contents")
            key = _key(store, write_op.key)
            if key in seen:
                raise InvalidParameter(f"path {key.path} is given twice in this batch", "path")
            if write_op.derived_from or write_op.origin is not None:
                raise InvalidParameter(
                    "derived_from is not taken in a batch: write the entry alone", "derived_from"
                )
            seen.add(key)
            verdict = await _judge(ctx, principal, store, op.channel, _texts(fields))
            fields = _judged(fields, provenance.of_change(principal, op.channel, verdict=verdict), verdict)
            checked.append((i, key, fields, write_op))
        except FieldError as exc:
            field = f"entries[{i}].{exc.field}" if exc.field else f"entries[{i}]"
            results[i] = BatchResult(write_op.key.path, "FAILED", exc.error_code, f"{field}: {exc.message}")
    async with audited(ctx.pool) as conn:
        for i, key, fields, write_op in checked:
            try:
                async with repo.savepoint(conn):  # a failure undoes this entry's write only
                    results[i] = await _batch_one(conn, principal, key, fields, write_op, readable, held)
            except CatalogError as exc:
                results[i] = BatchResult(key.path, "FAILED", exc.error_code, exc.message)
        note_result(sum(1 for r in results if r is not None and r.status != "FAILED"))
    _written(ctx)
    return [r for r in results if r is not None]


async def _batch_one(
    conn: asyncpg.Connection,
    principal: Principal,
    key: Key,
    fields: Fields,
    op: ops.Write,
    readable: bool,
    held: bool,
) -> BatchResult:
    ready = await _before_write(conn, key)
    existing = await repo.get(conn, key)
    row: EntryRow | None
    if op.mode == "EXCLUSIVE":
        row = await repo.insert_exclusive(conn, key, fields, principal.name)
        if row is None:
            raise AlreadyExists(f"an entry already exists at {key.path} in scope {key.scope}")
    elif op.mode == "OVERWRITE":
        if existing is not None and held:
            raise ResourceConflict("the memory store is under legal hold: an entry cannot be overwritten")
        row = await repo.upsert_overwrite(conn, key, fields, principal.name)
    else:
        row = await repo.upsert_append(conn, key, fields, principal.name, dedupe=readable)
        if row is None:
            return BatchResult(key.path, "UNCHANGED")
    await _expire(conn, row, op.ttl_seconds, ready.default_ttl)
    return BatchResult(key.path, "UPDATED" if existing is not None else "CREATED", held=row.held)


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


# --- erasure: what `catalog.erasure` runs of entries, in its transaction ---------------------------

delete_scope = repo.delete_scope  # a scope's entries, with their history, from one store; how many
erase_scope = repo.erase_scope  # a scope (or a subject's scopes) from every store not under legal hold


async def held_stores(conn: asyncpg.Connection, scope: str, *, subject: bool = False) -> list[str]:
    """The stores under legal hold that keep entries of the scope (with `subject`: also of every
    scope starting `scope:`): erasure leaves them alone."""
    return await held_stores_keeping(conn, "entries", "scope", scope, subject=subject)


def search_input(text: str, top_k: int) -> str:
    """A search's query (stripped) and `top_k`, checked: 400 naming the field. Every search of
    the catalog (entries, transcripts) takes them alike."""
    query = text.strip()
    if not query:
        raise InvalidParameter("query must not be empty", "query")
    if len(query) > MAX_QUERY:
        raise InvalidParameter(f"query must be at most {MAX_QUERY} characters", "query")
    if not 1 <= top_k <= MAX_TOP_K:
        raise InvalidParameter(f"top_k must be between 1 and {MAX_TOP_K}", "top_k")
    return query


@telemetry.memory_operation("search_memory")
async def search(ctx: Context, principal: Principal, op: ops.Search) -> Found[EntryRow]:
    """The hits, best first: the current rows from PostgreSQL with their scores, and the legs
    that may have missed entries (`degraded`)."""

    async def authorize(scopes: list[str]) -> Securable:
        return await resolve_store(ctx, principal, op.store, "entries.read", scopes)

    _, found = await _ranked(ctx, op, authorize, op.top_k, principal)
    note_result(len(found.hits))
    return found


async def _ranked(
    ctx: Context,
    op: ops.Search,
    authorize: Callable[[list[str]], Awaitable[Securable]],
    limit: int,
    principal: Principal,
) -> tuple[Securable, Found[EntryRow]]:
    """A search's ranking: its input checked, the store authorized by `authorize` (handed the
    searched scopes), and at most `limit` hits, best first (every search of entries runs it).
    Entries held for review are ranked only when asked for, and answered as `_held` says."""
    scopes = validate_scopes(None, op.scopes)
    query = search_input(op.query, op.top_k)
    prefix = validate_path_prefix(op.path_prefix)
    session = validate_session(op.session_id) if op.session_id is not None else None
    where = validate_metadata(op.where, "filter") or None
    assert ctx.search is not None
    at = _as_of(op.as_of)
    # the model embeds the query while the request is authorized (the longest step of a search)
    vector = ctx.search.embed_query(query) if op.mode != "keyword" else None
    try:
        store = await authorize(scopes)
    except BaseException:
        if vector is not None:
            vector.cancel()
        raise
    store_id = store.node.id
    held = _held(ctx, principal, store, op.include_quarantined)
    candidates = max(MIN_CANDIDATES, limit * 3)
    if at is not None:
        parts = (store_id, scopes, query, candidates, session, prefix, where, vector)
        return store, await _search_then(ctx, op, *parts, at, limit, held)
    ranking = await ctx.search.rank(
        Query(
            store_id,
            tuple(scopes),
            query,
            candidates,
            op.mode,
            session,
            prefix,
            where=where,
            vector=vector,
            explain=op.explain,
            # held entries are inactive in the indexes too: ranked only when asked for
            include_inactive=op.include_superseded or held.include,
            changes=store.changes,
            unembedded=store.unembedded,
        )
    )
    ranked = ranking.hits
    if op.min_score is not None:
        ranked = [(doc, score) for doc, score in ranked if score >= op.min_score]
    results: list[tuple[EntryRow, float]] = []
    first, rest = ranked[: limit * 2], ranked[limit * 2 :]
    for chunk in (first, rest):
        if len(results) == limit or not chunk:
            break
        rows = await repo.by_ids(ctx.pool, store_id, [doc for doc, _ in chunk])
        for doc, score in chunk:
            row = rows.get(doc)
            # a hit deleted or moved since it was indexed is dropped; the entry shown is the current one
            if row is None or row.store_id != store_id or row.scope not in scopes:
                continue
            if row.held:
                if not _sees(held, row):  # held, and not asked for or not the caller's to read
                    continue
            elif not row.active and not op.include_superseded:  # superseded since (or a neighbour)
                continue
            results.append((row, round(score, 6)))
            if len(results) == limit:
                break
    return store, Found(results, ranking.degraded, ranking.explained)


@dataclass(frozen=True)
class Forgotten:
    rows: list[EntryRow]  # the entries deleted, best match first (a dry run: that would be)
    truncated: bool  # more matched than one request deletes


def delete_matching_floor(value: float | None) -> float:
    """A forget's `min_score`: the recommended floor when none is given, else above 0 and at most
    1 (a floor of 0 would take whatever the ranking reaches)."""
    if value is None:
        return DELETE_MATCHING_FLOOR
    if not 0 < value <= 1:
        raise InvalidParameter("min_score must be greater than 0 and at most 1", "min_score")
    return value


@telemetry.memory_operation("delete_memory")
async def delete_matching(ctx: Context, principal: Principal, op: ops.DeleteMatching) -> Forgotten:
    """Forget by query: delete the entries of the scopes that the same search as `search` answers
    at or above the floor, at most `MAX_DELETE_MATCHING` (best first; `truncated` when more
    matched). It needs WRITE, and READ too, since the answer says what matched; a store under
    legal hold refuses it (a dry run as well: it answers what the request would do). The entries
    go together in one transaction with the request's audit event (their versions stay in the
    history, as for any delete); an entry changed or deleted since it was ranked is left alone
    and not named. A dry run names the entries and deletes nothing."""
    floor = delete_matching_floor(op.min_score)
    query = ops.Search(
        store=op.store,
        scopes=op.scopes,
        query=op.query,
        top_k=MAX_DELETE_MATCHING,
        path_prefix=op.path_prefix,
        session_id=op.session_id,
        min_score=floor,
        mode=op.mode,
    )

    async def authorize(scopes: list[str]) -> Securable:
        store = await resolve_store(ctx, principal, op.store, "entries.write", scopes)
        await _ensure_may_read(ctx, principal, store, "a delete by query")
        await ensure_not_held(ctx, store, "deleted")
        return store

    store, found = await _ranked(ctx, query, authorize, MAX_DELETE_MATCHING + 1, principal)
    matched = [row for row, _ in found.hits]
    rows, truncated = matched[:MAX_DELETE_MATCHING], len(matched) > MAX_DELETE_MATCHING
    note_params(
        {
            "mode": op.mode,
            "min_score": str(floor),
            "dry_run": str(op.dry_run).lower(),
            "truncated": str(truncated).lower(),
        }
    )
    if op.dry_run or not rows:
        note_result(len(rows))
        return Forgotten(rows, truncated)
    deleted: list[EntryRow] = []
    origin = provenance.of_deletion(principal, op.channel)
    async with audited(ctx.pool) as conn:
        for row in rows:
            gone, _ = await repo.delete(conn, store.node.id, row.id, row.version, principal.name, origin)
            if gone:
                deleted.append(row)
        note_result(len(deleted))
    _written(ctx)
    return Forgotten(deleted, truncated)


AS_OF_SEARCH_MAX = 20_000  # entries of the searched scopes an as-of search ranks, at most


async def _search_then(
    ctx: Context,
    op: ops.Search,
    store_id: str,
    scopes: list[str],
    query: str,
    candidates: int,
    session: str | None,
    prefix: str | None,
    where: dict[str, Any] | None,
    vector: asyncio.Future[Any] | None,
    at: int,
    limit: int,
    held: Held,
) -> Found[EntryRow]:
    """A search of the store as it was at `at`: the versions alive then, from the history,
    ranked exactly (`SearchEngine.rank_given`); the hits are those versions (held for review then
    only as `held` says)."""
    assert ctx.search is not None
    try:
        rows = await repo.as_of(
            ctx.pool,
            store_id,
            scopes,
            at,
            session_id=session,
            path_prefix=prefix,
            where=where,
            limit=AS_OF_SEARCH_MAX + 1,
            include_inactive=op.include_superseded,  # in their state then
            held=held,
        )
        if len(rows) > AS_OF_SEARCH_MAX:
            raise InvalidParameter(
                f"an as-of search ranks at most {AS_OF_SEARCH_MAX:,} entries of its scopes; these held more "
                "then: narrow it with path_prefix, session_id or fewer scopes",
                "as_of",
            )
        given = [
            Given(r.id, r.version, r.scope, r.session_id, r.path, r.contents, r.description, r.created_at)
            for r in rows
        ]
        q = Query(store_id, tuple(scopes), query, candidates, op.mode, vector=vector, explain=op.explain)
        ranking = await ctx.search.rank_given(q, given)
    except BaseException:
        if vector is not None:
            vector.cancel()
        raise
    by_id = {r.id: r for r in rows}
    results = [
        (by_id[doc], round(score, 6))
        for doc, score in ranking.hits
        if op.min_score is None or score >= op.min_score
    ][:limit]
    return Found(results, ranking.degraded, ranking.explained)


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
