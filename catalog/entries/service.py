"""Entries: validate, authorize on the store, write in one statement, embed, index.

Keys: (store, scope, session or none, path). Versions give optimistic concurrency: every change
bumps `version`, answered as the ETag; `If-Match` with a stale version is 409 ABORTED.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from catalog.audit.writer import audited, note_result
from catalog.auth import Principal
from catalog.context import Context
from catalog.entries import repo
from catalog.entries.schemas import (
    MAX_CONTENTS,
    MAX_DESCRIPTION,
    MAX_PATH,
    MAX_SCOPES,
    MAX_SESSION,
    MAX_SOURCE_TYPE,
    Entry,
    EntryCreate,
    EntryEdit,
    EntryFields,
    EntrySummary,
    ErasedStore,
    EraseResult,
    ListEntriesResponse,
)
from catalog.errors import (
    Aborted,
    AlreadyExists,
    InvalidParameter,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
)
from catalog.governance import Securable, SecurableType, action
from catalog.inputs import MAX_SCOPE, has_control
from catalog.lineage import service as lineage
from catalog.names import split_full_name
from catalog.namespace.repo import locate, store_binding
from catalog.pagination import Pages, page_size

Key = tuple[str, str, str, str]
# `"3"`, `W/"3"`, `3`, `*` or empty: an ETag this API returned (versions fit in a bigint)
IF_MATCH_PATTERN = r'^(\*|(W/)?"[0-9]{1,18}"|[0-9]{1,18})?$'
_IF_MATCH = re.compile(IF_MATCH_PATTERN)


# --- validation ------------------------------------------------------------------------------------


def validate_path(path: str | None, field: str = "path") -> str:
    if not path:
        raise InvalidParameter(f"{field} is required", field)
    if len(path) > MAX_PATH:
        raise InvalidParameter(f"{field} must be at most {MAX_PATH} characters", field)
    if not path.startswith("/"):
        raise InvalidParameter(f"{field} must be absolute (start with '/')", field)
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise InvalidParameter(f"{field} must not contain control characters", field)
    for segment in path[1:].split("/"):
        if segment in ("", ".", ".."):
            raise InvalidParameter(f"{field} must not contain empty, '.' or '..' segments", field)
    return path


def validate_path_prefix(prefix: str | None, field: str = "path_prefix") -> str | None:
    if prefix is None or prefix == "":
        return None
    if len(prefix) > MAX_PATH or not prefix.startswith("/"):
        raise InvalidParameter(f"{field} must start with '/' and be at most {MAX_PATH} characters", field)
    return prefix


def _printable(value: str | None, field: str, limit: int) -> str:
    if value is None or value == "":
        raise InvalidParameter(f"{field} is required and must not be empty", field)
    if len(value) > limit:
        raise InvalidParameter(f"{field} must be at most {limit} characters", field)
    if has_control(value):
        raise InvalidParameter(f"{field} must not contain control characters", field)
    return value


def validate_scope(scope: str | None, field: str = "scope") -> str:
    return _printable(scope, field, MAX_SCOPE)


def validate_scopes(scope: str | None, scopes: list[str] | None) -> list[str]:
    found: list[str] = []
    if scope is not None:
        found.append(validate_scope(scope))
    for i, item in enumerate(scopes or []):
        found.append(validate_scope(item, f"scopes[{i}]"))
    if not found:
        raise InvalidParameter("scope (or scopes) is required", "scope")
    unique = list(dict.fromkeys(found))
    if len(unique) > MAX_SCOPES:
        raise InvalidParameter(f"at most {MAX_SCOPES} scopes per request", "scopes")
    return unique


def validate_session(session_id: str | None, field: str = "session_id") -> str:
    """'' stands for "no session"."""
    return "" if session_id is None else _printable(session_id, field, MAX_SESSION)


def _text(value: str | None, field: str, limit: int) -> str | None:
    if value is not None and len(value) > limit:
        raise PayloadTooLarge(f"{field} must be at most {limit} characters")
    return value


def _fields(body: EntryFields) -> dict[str, Any]:
    source_type = body.source_type
    if source_type is not None and (not source_type or len(source_type) > MAX_SOURCE_TYPE):
        raise InvalidParameter(f"source_type must be 1-{MAX_SOURCE_TYPE} characters", "source_type")
    return {
        "contents": _text(body.contents, "contents", MAX_CONTENTS),
        "description": _text(body.description, "description", MAX_DESCRIPTION),
        "source_type": source_type,
    }


def check_sizes(contents: str | None, description: str | None) -> None:
    _text(contents, "contents", MAX_CONTENTS)
    _text(description, "description", MAX_DESCRIPTION)


def parse_if_match(value: str | None) -> int | None:
    if value is None or value in ("", "*"):
        return None
    if not _IF_MATCH.fullmatch(value):
        raise InvalidParameter("If-Match must be an ETag returned by this API (or *)", "If-Match")
    return int(value.removeprefix("W/").strip('"'))


def to_entry(row: asyncpg.Record, *, readable: bool = True) -> Entry:
    """The entry as answered; `readable=False` (a caller who may write but not read) leaves out
    everything it holds: only its key, times, authors and etag are acknowledged."""
    return Entry(
        scope=row["scope"],
        path=row["path"],
        session_id=row["session_id"] or None,
        contents=row["contents"] if readable else None,
        description=row["description"] if readable else None,
        source_type=row["source_type"] if readable else None,
        created_at=row["created_at"],
        created_by=row["created_by"],
        updated_at=row["updated_at"],
        updated_by=row["updated_by"],
        etag=str(row["version"]),
    )


# --- the store ---------------------------------------------------------------------------------------


async def resolve_store(
    ctx: Context, principal: Principal, full_name: str, action_name: str, scopes: Sequence[str] | None = None
) -> Securable:
    """Authorize `action_name` on the store, then hold the scopes to its scope binding."""
    parts = split_full_name(full_name, 3)
    securable = await locate(ctx.pool, ctx.metastore, SecurableType.MEMORY_STORE, parts)
    await ctx.authorizer.ensure(principal, action(action_name), securable)
    if not securable.exists:
        raise NotFound(f"memory store {securable.full_name} does not exist")
    if scopes is not None:
        await check_binding(ctx, principal, securable, scopes)
    return securable


async def check_binding(ctx: Context, principal: Principal, store: Securable, scopes: Sequence[str]) -> None:
    """With `scope_binding = end_user`, a request may only touch the scope equal to its verified
    end user (the token's `on_behalf_of`, else its subject), composite scopes `<user>:...`, and
    the store's shared scopes."""
    binding, shared = await store_binding(ctx.pool, store.node.id)
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


def may_read(ctx: Context, principal: Principal, store: Securable) -> bool:
    """Whether the caller may read the store's entries (asked without recording a decision: the
    answer only decides how much of a write's result is shown)."""
    return ctx.authorizer.authorize(principal, action("entries.read"), store).allowed


async def ensure_may_read(ctx: Context, principal: Principal, store: Securable, what: str) -> None:
    """An edit whose outcome depends on the entry's text needs READ too (else its success or
    failure would tell a write-only caller what the entry holds)."""
    try:
        await ctx.authorizer.ensure(principal, action("entries.read"), store)
    except PermissionDenied as exc:
        raise PermissionDenied(f"{what} reads the entry's text: {exc.message}") from None


def after_write(ctx: Context) -> None:
    """Wake the indexer and the embedding worker (a search waits for them: read-your-writes)."""
    assert ctx.search is not None
    ctx.search.written()


# --- operations --------------------------------------------------------------------------------------


async def create_entry(
    ctx: Context, principal: Principal, full_name: str, scope: str | None, body: EntryCreate
) -> Entry:
    written = await write_entry(ctx, principal, full_name, scope, body)
    return to_entry(written.row, readable=written.readable)


@dataclass(frozen=True)
class Written:
    row: asyncpg.Record  # the entry as stored
    readable: bool  # whether the writer may also read it (else answer no contents)


async def write_entry(
    ctx: Context, principal: Principal, full_name: str, scope: str | None, body: EntryCreate
) -> Written:
    """Create (or overwrite, or append to) an entry."""
    fields_body: EntryFields = body
    if body.memory_entry is not None:
        if body.path is not None or body.contents is not None:
            raise InvalidParameter(
                "give the entry either at the top level or as memory_entry", "memory_entry"
            )
        fields_body = body.memory_entry
    if body.scope is not None and scope is not None and body.scope != scope:
        raise InvalidParameter("scope in the query and in the body differ", "scope")
    key_scope = validate_scope(scope if scope is not None else body.scope)
    path = validate_path(fields_body.path)
    session = validate_session(fields_body.session_id)
    fields = _fields(fields_body)
    mode = fields_body.write_mode or "EXCLUSIVE"
    if mode == "APPEND" and not fields["contents"]:
        raise InvalidParameter("write_mode APPEND needs contents to append", "contents")
    store = await resolve_store(ctx, principal, full_name, "entries.write", [key_scope])
    readable = may_read(ctx, principal, store)
    sources = await lineage.resolve_sources(ctx, principal, fields_body.derived_from)
    key: Key = (store.node.id, key_scope, session, path)
    async with audited(ctx.pool) as conn:
        note_result(1)
        if mode == "EXCLUSIVE":
            row = await repo.insert_exclusive(conn, key, fields, principal.name)
            if row is None:
                raise AlreadyExists(f"an entry already exists at {path} in scope {key_scope}")
        elif mode == "OVERWRITE":
            row = await repo.upsert_overwrite(conn, key, fields, principal.name)
        else:
            row = await repo.upsert_append(conn, key, fields, principal.name, dedupe=readable)
            if row is None:  # the lines were already there: nothing changed
                row = await repo.get(conn, key)
                if row is None:
                    raise Aborted("the entry changed concurrently; retry")
                return Written(row, readable)
        await lineage.record(conn, principal, row, sources)
    after_write(ctx)
    return Written(row, readable)


async def get_entry(
    ctx: Context,
    principal: Principal,
    full_name: str,
    scope: str | None,
    path: str | None,
    session_id: str | None,
) -> Entry:
    key_scope, key_path, session = validate_scope(scope), validate_path(path), validate_session(session_id)
    store = await resolve_store(ctx, principal, full_name, "entries.read", [key_scope])
    row = await repo.get(ctx.pool, (store.node.id, key_scope, session, key_path))
    if row is None:
        raise NotFound(f"no entry at {key_path} in scope {key_scope}")
    note_result(1)
    return to_entry(row)


Cursor = tuple[str, str, str]  # the (path, scope, session) a page of entries ends at


def entry_pages(
    ctx: Context,
    dialect: str,
    store: str,
    scopes: Sequence[str],
    session: str | None,
    prefix: str | None,
    exact_path: str | None = None,
) -> Pages:
    """The page tokens of one listing of entries: bound to the store and every filter."""
    return Pages(
        ctx.pool,
        f"{dialect}.entries",
        store=store,
        scopes=sorted(scopes),
        session=session,
        prefix=prefix,
        path=exact_path,
    )


async def page_of_entries(
    ctx: Context,
    store_id: str,
    scopes: Sequence[str],
    session: str | None,
    prefix: str | None,
    limit: int,
    pages: Pages,
    page_token: str | None,
    exact_path: str | None = None,
) -> tuple[list[asyncpg.Record], str | None]:
    """One page of entries in (path, scope, session) order, and the token for the next one."""
    after = await pages.after(page_token, Cursor)
    rows = await repo.list_entries(ctx.pool, store_id, scopes, session, prefix, after, limit + 1, exact_path)
    page = rows[:limit]
    note_result(len(page))
    if len(rows) <= limit:
        return page, None
    last = page[-1]
    return page, await pages.token([last["path"], last["scope"], last["session_id"]])


async def list_entries(
    ctx: Context,
    principal: Principal,
    full_name: str,
    scopes: list[str],
    path_prefix: str | None,
    session_id: str | None,
    size: int | None,
    page_token: str | None,
) -> ListEntriesResponse:
    prefix = validate_path_prefix(path_prefix)
    session = validate_session(session_id) if session_id is not None else None
    limit = page_size(size, default=ctx.settings.page_default, cap=ctx.settings.page_cap, field="page_size")
    store = await resolve_store(ctx, principal, full_name, "entries.read", scopes)
    pages = entry_pages(ctx, "uc", store.full_name, scopes, session, prefix)
    page, token = await page_of_entries(ctx, store.node.id, scopes, session, prefix, limit, pages, page_token)
    many = len(scopes) > 1
    return ListEntriesResponse(
        entries=[
            EntrySummary(
                path=row["path"],
                description=row["description"],
                has_contents=row["has_contents"],
                session_id=row["session_id"] or None,
                updated_at=row["updated_at"],
                scope=row["scope"] if many else None,
            )
            for row in page
        ],
        next_page_token=token,
    )


def _edit(current: str | None, body: EntryEdit) -> str | None:
    operations = [
        op for op in (body.str_replace, body.insert, body.replace_all, body.append) if op is not None
    ]
    if len(operations) > 1:
        raise InvalidParameter("give one of str_replace, insert, replace_all, append", "str_replace")
    text = current or ""
    if body.str_replace is not None:
        old = body.str_replace.old_str
        if not old:
            raise InvalidParameter("str_replace.old_str must not be empty", "str_replace.old_str")
        count = text.count(old)
        if count != 1:
            where = "does not occur" if count == 0 else f"occurs {count} times"
            raise InvalidParameter(
                f"str_replace.old_str {where} in the contents; it must occur exactly once",
                "str_replace.old_str",
            )
        return text.replace(old, body.str_replace.new_str, 1)
    if body.insert is not None:
        lines = text.split("\n") if text else []
        at = body.insert.insert_line
        if not 0 <= at <= len(lines):
            raise InvalidParameter(
                f"insert.insert_line must be between 0 and {len(lines)}", "insert.insert_line"
            )
        new_lines = body.insert.insert_text.split("\n")
        return "\n".join(lines[:at] + new_lines + lines[at:])
    if body.replace_all is not None:
        return body.replace_all.contents
    if body.append is not None:
        if not text:
            return body.append.text
        return text + ("" if text.endswith("\n") else "\n") + body.append.text
    return current


async def edit_entry(
    ctx: Context, principal: Principal, full_name: str, body: EntryEdit, if_match: str | None
) -> Entry:
    key_scope, key_path, session = (
        validate_scope(body.scope),
        validate_path(body.path),
        validate_session(body.session_id),
    )
    expected = parse_if_match(if_match)
    description = _text(body.description, "description", MAX_DESCRIPTION)
    for op, field in ((body.replace_all, "replace_all.contents"),):
        if op is not None:
            _text(op.contents, field, MAX_CONTENTS)
    if (
        all(op is None for op in (body.str_replace, body.insert, body.replace_all, body.append))
        and description is None
    ):
        raise InvalidParameter("nothing to change: give description or one edit operation", "description")
    store = await resolve_store(ctx, principal, full_name, "entries.write", [key_scope])
    readable = may_read(ctx, principal, store)
    if body.str_replace is not None:
        await ensure_may_read(ctx, principal, store, "str_replace")
    if body.insert is not None:
        await ensure_may_read(ctx, principal, store, "insert")
    key: Key = (store.node.id, key_scope, session, key_path)
    async with audited(ctx.pool) as conn:
        note_result(1)
        current = await repo.get(conn, key, for_update=True)
        if current is None:
            raise NotFound(f"no entry at {key_path} in scope {key_scope}")
        if expected is not None and current["version"] != expected:
            raise Aborted(f"the entry is at version {current['version']}, not {expected}")
        contents = _edit(current["contents"], body)
        _text(contents, "contents", MAX_CONTENTS)
        row = await repo.update_contents(
            conn,
            current["id"],
            current["version"],
            contents,
            description if description is not None else current["description"],
            principal.name,
        )
    assert row is not None  # the row lock held the version
    after_write(ctx)
    return to_entry(row, readable=readable)


async def delete_scope(ctx: Context, principal: Principal, full_name: str, scope: str | None) -> int:
    """Erase every entry of one scope in one store (right to be forgotten)."""
    key_scope = validate_scope(scope)
    store = await resolve_store(ctx, principal, full_name, "entries.write", [key_scope])
    async with audited(ctx.pool) as conn:
        deleted = await repo.delete_scope(conn, store.node.id, key_scope)
        note_result(deleted)
    after_write(ctx)
    return deleted


async def erase_scope(ctx: Context, principal: Principal, scope: str) -> EraseResult:
    """Erase a scope from every store (metastore admin)."""
    key_scope = validate_scope(scope)
    securable = await locate(ctx.pool, ctx.metastore, SecurableType.METASTORE, [])
    await ctx.authorizer.ensure(principal, action("system.erase_scope"), securable)
    async with audited(ctx.pool) as conn:
        rows = await repo.erase_scope(conn, key_scope)
        note_result(sum(row["deleted"] for row in rows))
    after_write(ctx)
    stores = [ErasedStore(memory_store=row["memory_store"], deleted=row["deleted"]) for row in rows]
    return EraseResult(scope=key_scope, deleted=sum(s.deleted for s in stores), stores=stores)


async def delete_entry(
    ctx: Context,
    principal: Principal,
    full_name: str,
    scope: str | None,
    path: str | None,
    session_id: str | None,
    if_match: str | None,
) -> None:
    key_scope, key_path, session = validate_scope(scope), validate_path(path), validate_session(session_id)
    expected = parse_if_match(if_match)
    store = await resolve_store(ctx, principal, full_name, "entries.write", [key_scope])
    async with audited(ctx.pool) as conn:
        note_result(1)
        deleted, version = await repo.delete(conn, (store.node.id, key_scope, session, key_path), expected)
        if not deleted:
            if version is None:
                raise NotFound(f"no entry at {key_path} in scope {key_scope}")
            raise Aborted(f"the entry is at version {version}, not {expected}")
    after_write(ctx)
