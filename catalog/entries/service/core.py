"""The core of entries: input validation, the store (its authorization and scope binding),
trust (held entries, the store's policy), the operations on one entry (write, get, list, edit,
delete) and what erasure runs of entries. The rules are the package's (`catalog.entries.service`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
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
    MAX_CONTENTS,
    MAX_CREATION_FIELD,
    MAX_DESCRIPTION,
    MAX_SOURCE_TYPE,
    MAX_SOURCES,
    MAX_TTL_SECONDS,
)
from catalog.errors import (
    Aborted,
    AlreadyExists,
    InvalidParameter,
    NotFound,
    PermissionDenied,
    ResourceConflict,
)
from catalog.governance.namespace.service import (
    ensure_not_held,
    held_conflict,
    held_stores_keeping,
    scope_binding,
    trust_policy,
)
from catalog.lineage import EntryRef, TranscriptRef, check_origin
from catalog.lineage import record as record_lineage
from catalog.recorder import audited, note_params, note_result
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
    fresh: bool = False,
) -> Securable:
    """Authorize `action_name` on the store, then hold the scopes to its scope binding (`fresh`:
    for a search of the scopes, which learns with the store what its indexes must hold for
    them)."""
    parts = split_full_name(full_name, 3, field)
    if fresh and scopes is None:
        raise ValueError("a search's freshness is read for the scopes it reads")
    reads = list(scopes) if fresh and scopes is not None else None
    store = await ctx.access.resolve(principal, action_name, SecurableType.MEMORY_STORE, parts, fresh=reads)
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
    """Wake the entries' indexer and the embedding worker (a search waits for them:
    read-your-writes)."""
    assert ctx.search is not None
    ctx.search.written(ENTRIES)


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


# --- erasure: what `catalog.erasure` runs of entries, in its transaction ---------------------------

delete_scope = repo.delete_scope  # a scope's entries, with their history, from one store; how many


erase_scope = repo.erase_scope  # a scope (or a subject's scopes) from every store not under legal hold


async def held_stores(conn: asyncpg.Connection, scope: str, *, subject: bool = False) -> list[str]:
    """The stores under legal hold that keep entries of the scope (with `subject`: also of every
    scope starting `scope:`): erasure leaves them alone."""
    return await held_stores_keeping(conn, "entries", "scope", scope, subject=subject)
