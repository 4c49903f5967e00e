"""Session stores of the agent dialect, on the securables of memory stores.

A session store `x` is the store `<CATALOG_AGENTS_SCHEMA>.x` of kind `session`: the same securable
type (MEMORY_STORE), privileges, ownership, grants, scope binding and audit as a memory store; the
memory-store routes do not see it, nor these routes a memory store (404 NOT_FOUND). Reading
sessions and items needs READ_MEMORY_STORE (`sessions.read`), changing them WRITE_MEMORY_STORE
(`sessions.write`); an actor id is a scope, held to the store's scope binding like an entry scope,
and erasing a scope (`catalog.erasure`: everywhere, or in one store) removes that actor's sessions
with their items (`erase_scope`; `held_stores` names the held stores that keep some).
"""

from __future__ import annotations

import re
import uuid

import msgspec
from asyncpg import Connection

from catalog.access import Securable, SecurableType
from catalog.auth import Principal
from catalog.context import Context
from catalog.dialects.sessions import repo
from catalog.dialects.sessions.repo import ItemRow, SessionRow
from catalog.dialects.sessions.schemas import (
    MAX_ITEM_BYTES,
    MAX_ITEMS_PER_APPEND,
    MAX_METADATA,
    ORDER_BY_PATTERN,
    SESSION_ID_PATTERN,
    SESSION_ID_TEXT,
    SESSION_UPDATE_MASK_PATTERN,
    STORE_NAME_PATTERN,
    STORE_NAME_TEXT,
    STORE_UPDATE_MASK_PATTERN,
    AppendItems,
    PoppedItem,
    SessionCreate,
    SessionFork,
    SessionInfo,
    SessionItem,
    SessionItemList,
    SessionList,
    SessionStoreCreate,
    SessionStoreGrant,
    SessionStoreInfo,
    SessionStoreList,
    SessionStoreUpdate,
    SessionUpdate,
)
from catalog.entries.service import check_binding
from catalog.errors import InvalidParameter, NotFound, PayloadTooLarge
from catalog.governance.namespace import service as namespace
from catalog.governance.namespace.schemas import (
    MAX_PROPERTY_KEY,
    MAX_PROPERTY_VALUE,
    MemoryStoreCreate,
    MemoryStoreInfo,
    MemoryStoreUpdate,
)
from catalog.governance.namespace.service import scope_binding
from catalog.governance.permissions import service as permissions
from catalog.recorder import audited, note_result
from catalog.wire import rfc3339
from catalog.wire.entry_keys import validate_scope
from catalog.wire.inputs import within
from catalog.wire.pagination import Pages, collect_page

KIND = "session"
erase_scope = repo.erase_scope  # an actor's sessions, for `catalog.erasure`


async def held_stores(conn: Connection, scope: str, *, subject: bool = False) -> list[str]:
    """The stores under legal hold that keep sessions of the actor (the scope; with `subject`: also
    of every actor starting `scope:`): `erase_scope` leaves them alone (for `catalog.erasure`)."""
    return await namespace.held_stores_keeping(conn, "agent_sessions", "actor_id", scope, subject=subject)


MAX_STORE_PAGE = 100
DEFAULT_SESSION_PAGE, MAX_SESSION_PAGE = 100, 1000
DEFAULT_ITEM_PAGE, MAX_ITEM_PAGE = 100, 1000
_STORE_NAME = re.compile(STORE_NAME_PATTERN)
_SESSION_ID = re.compile(SESSION_ID_PATTERN)
_ORDER_BY = re.compile(ORDER_BY_PATTERN)
# `filter` of the sessions' list: `field = "value"` terms joined with AND
_FILTER_FIELDS = ("actor_id", "root_session_id", "parent_session_id")
_FILTER_TERM = re.compile(
    r"""\s*(actor_id|root_session_id|parent_session_id)\s*=\s*(?:"([^"]*)"|'([^']*)')\s*"""
)
_AND = re.compile(r"\s+AND\s+", re.IGNORECASE)


# --- validation ------------------------------------------------------------------------------------


def store_name(value: str | None, field: str = "session_store_name") -> str:
    if not isinstance(value, str) or not _STORE_NAME.fullmatch(value):
        raise InvalidParameter(f"{field} must be {STORE_NAME_TEXT}", field)
    return value


def session_id(value: str | None, field: str = "session_id") -> str:
    if not isinstance(value, str) or not _SESSION_ID.fullmatch(value):
        raise InvalidParameter(f"{field} must be {SESSION_ID_TEXT}", field)
    return value


def _descending(order_by: str | None, default_desc: bool) -> bool:
    if order_by is None or not order_by.strip():
        return default_desc
    if not _ORDER_BY.fullmatch(order_by):
        raise InvalidParameter("order_by must be 'create_time asc' or 'create_time desc'", "order_by")
    return order_by.strip().lower().endswith("desc")


def _page_size(value: int | None, default: int, cap: int) -> int:
    if value is None or value == 0:
        return default
    if value < 0:
        raise InvalidParameter("page_size must not be negative", "page_size")
    return min(value, cap)


def _metadata(value: dict[str, str] | None, field: str = "metadata") -> dict[str, str]:
    """Metadata follows the rules of properties: at most 100 keys of 1-255 characters, values of
    at most 4,096 (413 naming `metadata.<key>`)."""
    value = dict(value or {})
    if len(value) > MAX_METADATA:
        raise InvalidParameter(f"{field} may hold at most {MAX_METADATA} keys", field)
    for key, item in value.items():
        if not key or len(key) > MAX_PROPERTY_KEY:
            raise InvalidParameter(f"{field} keys must be 1-{MAX_PROPERTY_KEY} characters", field)
        within(item, f"{field}.{key}", MAX_PROPERTY_VALUE)
    return value


def _filter(value: str | None) -> dict[str, str]:
    """`actor_id = "u1" AND root_session_id = "s1"` → {field: value}; 400 naming `filter`."""
    if value is None or not value.strip():
        return {}
    found: dict[str, str] = {}
    for term in _AND.split(value.strip()):
        match = _FILTER_TERM.fullmatch(term)
        if match is None or match[1] in found:
            raise InvalidParameter(
                'filter must be terms field = "value" joined with AND, each of '
                f"{', '.join(_FILTER_FIELDS)} at most once",
                "filter",
            )
        found[match[1]] = match[2] if match[2] is not None else match[3]
    return found


# --- answers ------------------------------------------------------------------------------------


def store_full_name(ctx: Context, name: str) -> str:
    return f"{ctx.settings.agents_schema}.{store_name(name, 'session_store')}"


def to_store(info: MemoryStoreInfo) -> SessionStoreInfo:
    return SessionStoreInfo(
        name=f"session-stores/{info.name}",
        session_store_name=info.name,
        session_store_id=info.name,
        description=info.description,
        metadata=dict(info.properties),
        creator_user_id=info.created_by,
        create_time=rfc3339(info.created_at),
        update_time=rfc3339(info.updated_at),
    )


def to_session(store: str, row: SessionRow) -> SessionInfo:
    return SessionInfo(
        name=f"session-stores/{store}/sessions/{row.session_id}",
        session_store_name=store,
        session_id=row.session_id,
        actor_id=row.actor_id,
        parent_session_id=row.parent_session_id,
        root_session_id=row.root_session_id,
        metadata=row.metadata,
        create_time=rfc3339(row.created_at),
        update_time=rfc3339(row.updated_at),
        last_activity_time=rfc3339(row.last_activity_at),
    )


def to_item(row: ItemRow) -> SessionItem:
    # the stored JSON text goes out as it is (msgspec writes Raw verbatim)
    return SessionItem(
        item_id=row.item_id, data=msgspec.Raw(row.data.encode()), create_time=rfc3339(row.created_at)
    )


# --- stores --------------------------------------------------------------------------------------


async def create_store(
    ctx: Context, principal: Principal, name: str | None, other_name: str | None, body: SessionStoreCreate
) -> SessionStoreInfo:
    """`name` is `session_store_name`, `other_name` `session_store_id` (the SDK sends both, equal)."""
    chosen = store_name(name or other_name)
    if other_name and other_name != chosen:
        raise InvalidParameter(
            "session_store_id must equal session_store_name when both are given", "session_store_id"
        )
    catalog_name, schema_name = ctx.settings.agents_schema.split(".")
    info = await namespace.create_store(
        ctx,
        principal,
        MemoryStoreCreate(
            name=chosen,
            catalog_name=catalog_name,
            schema_name=schema_name,
            description=body.description,
            properties=_metadata(body.metadata),
            scope_binding=body.scope_binding,
            shared_scopes=body.shared_scopes,
        ),
        kind=KIND,
    )
    return to_store(info)


async def get_store(ctx: Context, principal: Principal, name: str) -> SessionStoreInfo:
    return to_store(await namespace.get_store(ctx, principal, store_full_name(ctx, name), kind=KIND))


async def list_stores(
    ctx: Context, principal: Principal, page_size: int | None, page_token: str | None
) -> SessionStoreList:
    if page_size is not None and not 0 <= page_size <= MAX_STORE_PAGE:
        raise InvalidParameter(f"page_size must be between 1 and {MAX_STORE_PAGE}", "page_size")
    catalog_name, schema_name = ctx.settings.agents_schema.split(".")
    listed = await namespace.list_stores(
        ctx, principal, catalog_name, schema_name, page_size, page_token, kind=KIND
    )
    return SessionStoreList(
        session_stores=[to_store(s) for s in listed.memory_stores], next_page_token=listed.next_page_token
    )


_STORE_MASK = re.compile(STORE_UPDATE_MASK_PATTERN)


async def update_store(
    ctx: Context, principal: Principal, name: str, update_mask: str | None, body: SessionStoreUpdate
) -> SessionStoreInfo:
    names = ("description", "metadata", "scope_binding", "shared_scopes", "legal_hold")
    if update_mask is not None and not _STORE_MASK.fullmatch(update_mask):
        raise InvalidParameter(
            f"update_mask must be a comma-separated list of {', '.join(names)}", "update_mask"
        )
    fields = {f.strip() for f in (update_mask or "").split(",") if f.strip()} or {
        n for n in names if getattr(body, n) is not None
    }
    if not fields:
        raise InvalidParameter(f"update_mask must name one or more of {', '.join(names)}", "update_mask")
    change = MemoryStoreUpdate(
        description=body.description if "description" in fields else None,
        # metadata replaces the store's metadata (an empty object clears it)
        properties=_metadata(body.metadata) if "metadata" in fields else None,
        scope_binding=body.scope_binding if "scope_binding" in fields else None,
        shared_scopes=body.shared_scopes if "shared_scopes" in fields else None,
        legal_hold=body.legal_hold if "legal_hold" in fields else None,
    )
    info = await namespace.update_store(ctx, principal, store_full_name(ctx, name), change, kind=KIND)
    return to_store(info)


async def delete_store(ctx: Context, principal: Principal, name: str) -> None:
    await namespace.delete_store(ctx, principal, store_full_name(ctx, name), kind=KIND)


async def grant(ctx: Context, principal: Principal, name: str, body: SessionStoreGrant) -> None:
    """As for memory stores in this dialect: WRITE grants READ and WRITE, READ grants READ."""
    await permissions.grant_store_permission(
        ctx, principal, store_full_name(ctx, name), body.principal.name, body.permission, store_kind=KIND
    )


# --- sessions ------------------------------------------------------------------------------------


async def _store(ctx: Context, principal: Principal, name: str, action_name: str) -> Securable:
    parts = store_full_name(ctx, name).split(".")
    return await ctx.access.resolve(
        principal, action_name, SecurableType.MEMORY_STORE, parts, store_kind=KIND
    )


async def _locked(
    conn: Connection, ctx: Context, principal: Principal, store: Securable, sid: str
) -> SessionRow:
    """The session under its row lock (in `conn`'s transaction), its actor held to the binding."""
    row = await repo.get_session(conn, store.node.id, session_id(sid), lock=True)
    if row is None:
        raise NotFound(f"session {sid} does not exist")
    await check_binding(ctx, principal, store, [row.actor_id])
    return row


async def _session(ctx: Context, principal: Principal, store: Securable, sid: str) -> SessionRow:
    """The session (its actor held to the store's scope binding), or 404."""
    row = await repo.get_session(ctx.pool, store.node.id, session_id(sid))
    if row is None:
        raise NotFound(f"session {sid} does not exist")
    await check_binding(ctx, principal, store, [row.actor_id])
    return row


async def create_session(
    ctx: Context, principal: Principal, name: str, sid: str | None, body: SessionCreate
) -> SessionInfo:
    new_id = session_id(sid) if sid else str(uuid.uuid4())
    actor = validate_scope(body.actor_id, "actor_id")
    metadata = _metadata(body.metadata)
    store = await _store(ctx, principal, name, "sessions.write")
    await check_binding(ctx, principal, store, [actor])
    root = new_id
    if body.parent_session_id is not None:
        parent = await repo.get_session(
            ctx.pool, store.node.id, session_id(body.parent_session_id, "parent_session_id")
        )
        if parent is None:
            raise InvalidParameter(
                f"parent_session_id {body.parent_session_id} is no session of this store", "parent_session_id"
            )
        await check_binding(ctx, principal, store, [parent.actor_id])
        root = parent.root_session_id
    async with audited(ctx.pool) as conn:
        row = await repo.insert_session(
            conn,
            store.node.id,
            session_id=new_id,
            actor_id=actor,
            parent_session_id=body.parent_session_id,
            root_session_id=root,
            metadata=metadata,
        )
    return to_session(name, row)


async def get_session(ctx: Context, principal: Principal, name: str, sid: str) -> SessionInfo:
    store = await _store(ctx, principal, name, "sessions.read")
    return to_session(name, await _session(ctx, principal, store, sid))


async def list_sessions(
    ctx: Context,
    principal: Principal,
    name: str,
    filter_text: str | None,
    order_by: str | None,
    page_size: int | None,
    page_token: str | None,
) -> SessionList:
    terms = _filter(filter_text)
    descending = _descending(order_by, default_desc=True)
    size = _page_size(page_size, DEFAULT_SESSION_PAGE, MAX_SESSION_PAGE)
    store = await _store(ctx, principal, name, "sessions.read")
    if "actor_id" in terms:
        await check_binding(ctx, principal, store, [terms["actor_id"]])
    binding, shared = await scope_binding(ctx, store)
    identity = principal.on_behalf_of or principal.name
    within_limits = ctx.access.scope_filter(store)  # grants limited to scopes show only theirs

    def visible(row: SessionRow) -> bool:
        # under end_user binding a list shows only the sessions the caller's end user may touch
        actor = row.actor_id
        return within_limits(actor) and (
            binding != "end_user" or actor == identity or actor.startswith(f"{identity}:") or actor in shared
        )

    pages = Pages(ctx.pool, "sessions", store=store.node.id, descending=descending, **terms)
    after = await pages.after(page_token, tuple[int, str])
    rows, token = await collect_page(
        lambda cursor, limit: repo.list_sessions(
            ctx.pool,
            store.node.id,
            descending=descending,
            after=cursor,
            limit=limit,
            actor_id=terms.get("actor_id"),
            root_session_id=terms.get("root_session_id"),
            parent_session_id=terms.get("parent_session_id"),
        ),
        lambda row: (row.created_us, row.session_id),
        visible,
        pages=pages,
        after=after,
        size=size,
    )
    return SessionList(sessions=[to_session(name, row) for row in rows], next_page_token=token)


async def update_session(
    ctx: Context, principal: Principal, name: str, sid: str, update_mask: str | None, body: SessionUpdate
) -> SessionInfo:
    if update_mask is not None and not re.fullmatch(SESSION_UPDATE_MASK_PATTERN, update_mask):
        raise InvalidParameter("update_mask must be metadata", "update_mask")
    if body.metadata is None:
        raise InvalidParameter("metadata is required", "metadata")
    metadata = _metadata(body.metadata)
    store = await _store(ctx, principal, name, "sessions.write")
    row = await _session(ctx, principal, store, sid)
    async with audited(ctx.pool) as conn:
        updated = await repo.update_metadata(conn, row, metadata)
        if updated is None:
            raise NotFound(f"session {sid} does not exist")
    return to_session(name, updated)


async def delete_session(ctx: Context, principal: Principal, name: str, sid: str) -> None:
    """Deletes the session with its items; sessions forked from it keep their items and name it
    as their parent (`force` is accepted for the SDK and changes nothing)."""
    store = await _store(ctx, principal, name, "sessions.write")
    row = await _session(ctx, principal, store, sid)
    await namespace.ensure_not_held(ctx, store, "deleted", kind="session store", things="sessions")
    async with audited(ctx.pool) as conn:
        if not await repo.delete_session(conn, row):
            raise NotFound(f"session {sid} does not exist")


async def fork_session(ctx: Context, principal: Principal, name: str, body: SessionFork) -> SessionInfo:
    """A new session (child of the source, same root) holding the source's items up to and
    including `up_to_item_id` (all without it), in order, under new item ids."""
    source_id = session_id(body.source_session_id, "source_session_id")
    new_id = session_id(body.session_id) if body.session_id else str(uuid.uuid4())
    actor = validate_scope(body.actor_id, "actor_id")
    metadata = _metadata(body.metadata)
    up_to_id = _item_id(body.up_to_item_id) if body.up_to_item_id is not None else None
    store = await _store(ctx, principal, name, "sessions.write")
    await ctx.access.ensure(principal, "sessions.read", store)  # it reads the source's items
    await check_binding(ctx, principal, store, [actor])
    async with audited(ctx.pool) as conn:
        # the source's row lock: its items cannot change while they are copied
        source = await repo.get_session(conn, store.node.id, source_id, lock=True)
        if source is None:
            raise NotFound(f"session {source_id} does not exist")
        await check_binding(ctx, principal, store, [source.actor_id])
        up_to = None
        if up_to_id is not None:
            up_to = await repo.item_position(conn, source, up_to_id)
            if up_to is None:
                raise InvalidParameter(
                    f"up_to_item_id {up_to_id} is no item of session {source_id}", "up_to_item_id"
                )
        row = await repo.insert_session(
            conn,
            store.node.id,
            session_id=new_id,
            actor_id=actor,
            parent_session_id=source.session_id,
            root_session_id=source.root_session_id,
            metadata=metadata,
        )
        note_result(await repo.copy_items(conn, source, row, up_to))
    return to_session(name, row)


# --- items -----------------------------------------------------------------------------------------


def _item_id(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise InvalidParameter(
            "up_to_item_id must be an item id of the source session", "up_to_item_id"
        ) from None


def _encoded(body: AppendItems) -> list[str]:
    if not body.items:
        raise InvalidParameter("items must hold at least one item", "items")
    if len(body.items) > MAX_ITEMS_PER_APPEND:
        raise InvalidParameter(f"items may hold at most {MAX_ITEMS_PER_APPEND} items per request", "items")
    texts = []
    for i, item in enumerate(body.items):
        encoded = msgspec.json.encode(item.data)
        if len(encoded) > MAX_ITEM_BYTES:
            raise PayloadTooLarge(
                f"items[{i}].data must be at most {MAX_ITEM_BYTES} bytes as JSON", f"items[{i}].data"
            )
        # PostgreSQL's jsonb holds no NUL character
        if b"\\u0000" in encoded:
            raise InvalidParameter(f"items[{i}].data must not contain the NUL character", f"items[{i}].data")
        texts.append(encoded.decode())
    return texts


async def append_items(
    ctx: Context, principal: Principal, name: str, sid: str, body: AppendItems
) -> SessionItemList:
    texts = _encoded(body)
    store = await _store(ctx, principal, name, "sessions.write")
    async with audited(ctx.pool) as conn:
        items = await repo.append(conn, await _locked(conn, ctx, principal, store, sid), texts)
        note_result(len(items))
    return SessionItemList(session_items=[to_item(item) for item in items])


async def list_items(
    ctx: Context,
    principal: Principal,
    name: str,
    sid: str,
    order_by: str | None,
    page_size: int | None,
    page_token: str | None,
) -> SessionItemList:
    descending = _descending(order_by, default_desc=False)
    size = _page_size(page_size, DEFAULT_ITEM_PAGE, MAX_ITEM_PAGE)
    store = await _store(ctx, principal, name, "sessions.read")
    session = await _session(ctx, principal, store, sid)
    pages = Pages(ctx.pool, "session_items", session=session.id, descending=descending)
    after = await pages.after(page_token, int)
    rows = await repo.list_items(ctx.pool, session, descending=descending, after=after, limit=size + 1)
    token = await pages.token(rows[size - 1].position) if len(rows) > size else None
    note_result(min(len(rows), size))
    return SessionItemList(session_items=[to_item(row) for row in rows[:size]], next_page_token=token)


async def pop_item(ctx: Context, principal: Principal, name: str, sid: str) -> PoppedItem:
    """Removes and answers the last item: WRITE, and READ since it answers what it removed."""
    store = await _store(ctx, principal, name, "sessions.write")
    await ctx.access.ensure(principal, "sessions.read", store)
    await namespace.ensure_not_held(ctx, store, "removed", kind="session store", things="items")
    async with audited(ctx.pool) as conn:
        item = await repo.pop(conn, await _locked(conn, ctx, principal, store, sid))
        note_result(1 if item else 0)
    return PoppedItem(item=to_item(item) if item else None)


async def clear_items(ctx: Context, principal: Principal, name: str, sid: str) -> None:
    store = await _store(ctx, principal, name, "sessions.write")
    await namespace.ensure_not_held(ctx, store, "removed", kind="session store", things="items")
    async with audited(ctx.pool) as conn:
        note_result(await repo.clear(conn, await _locked(conn, ctx, principal, store, sid)))


# --- for memory extraction (catalog.dialects.extraction): a session's transcript read through this slice ----


async def open_session(
    ctx: Context, principal: Principal, name: str, sid: str, action_name: str
) -> tuple[SessionRow, Securable]:
    """The session and its store, once `action_name` is allowed on the store and the session's
    actor is within the store's scope binding (403 / 404 as for the other session routes)."""
    store = await _store(ctx, principal, name, action_name)
    return await _session(ctx, principal, store, sid), store


async def transcript(ctx: Context, session: SessionRow, limit: int) -> list[ItemRow]:
    """The session's last `limit` items, oldest first."""
    rows = await repo.list_items(ctx.pool, session, descending=True, after=None, limit=limit)
    return rows[::-1]
