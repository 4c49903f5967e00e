"""Conversations: OpenAI-compatible conversations bound to one memory store and one scope.

Rules:
- a conversation belongs to the store and scope it was created with, for its whole life; every
  request on it reads them from its row and then authorizes on that store through the access
  seam: reading (retrieve, list and retrieve items) needs READ_MEMORY_STORE, changing (create,
  append, update metadata, delete it or an item) WRITE_MEMORY_STORE (actions `conversations.read`
  and `conversations.write`); the scope is held to the store's scope binding like an entry scope;
- 403 or 404: a conversation that exists answers 403 to a caller who may not use its store (also
  when the refusal is for a parent: the id is random, so its existence tells nothing the caller
  did not hold already); an id that names no conversation is 404 `NOT_FOUND`; creating one in a
  store that does not exist is 404 behind usable parents and 403 otherwise, as for entries;
- every change runs in one transaction with the request's audit event, whose securable is the
  store; appends serialize on the conversation's row (`repo.append`), so concurrent appends never
  lose or interleave an item;
- erasing a scope (`catalog.erasure`: everywhere, or in one store) removes its conversations too
  (`erase_scope`; `held_stores` names the held stores that keep some), in the erasing transaction;
- a create names its store and scope (`memory_store` requires `scope`). Without `memory_store`
  it goes to the server's default store (`CATALOG_DEFAULT_CONVERSATION_STORE`) in the scope it
  names, else in the caller's own (kind `user`: the token's `on_behalf_of`, else its subject),
  as a client that knows nothing of stores creates one (`POST /conversations {"items": []}`);
  with no default store set, that is a 400 naming the field and the setting. Either way the
  store and scope are authorized and bound as above.
"""

from __future__ import annotations

from typing import Any

import asyncpg

from catalog.access import Securable
from catalog.auth import Principal
from catalog.context import Context
from catalog.dialects.conversations import repo
from catalog.dialects.conversations.items import Item, check_items, new_conversation_id
from catalog.dialects.conversations.repo import ConversationRow
from catalog.dialects.conversations.schemas import (
    DEFAULT_PAGE,
    MAX_PAGE,
    Conversation,
    ConversationCreate,
    ConversationDeleted,
    ConversationItemList,
    ConversationItemsCreate,
    ConversationScopeOut,
    ConversationStore,
    ConversationUpdate,
)
from catalog.entries.service import resolve_store
from catalog.errors import InvalidParameter, NotFound
from catalog.governance.namespace.service import ensure_not_held, held_stores_keeping
from catalog.recorder import audited, note_result
from catalog.wire.entry_keys import validate_scope

erase_scope = repo.erase_scope  # a scope's conversations, for `catalog.erasure`


async def held_stores(conn: asyncpg.Connection, scope: str, *, subject: bool = False) -> list[str]:
    """The stores under legal hold that keep conversations of the scope (with `subject`: also of
    every scope starting `scope:`): `erase_scope` leaves them alone (for `catalog.erasure`)."""
    return await held_stores_keeping(conn, "conversations", "scope", scope, subject=subject)


def _answer(row: ConversationRow) -> Conversation:
    return Conversation(
        id=row.id,
        created_at=row.created_at,
        metadata=row.metadata,
        memory_store=ConversationStore(name=row.store_name),
        scope=ConversationScopeOut(kind=row.scope_kind, value=row.scope),
    )


async def _open(
    ctx: Context, principal: Principal, conversation_id: str, action_name: str
) -> tuple[ConversationRow, Securable]:
    """The conversation and its store, once `action_name` is allowed there (see the rules)."""
    row = await repo.find(ctx.pool, conversation_id)
    if row is None:
        raise NotFound(f"conversation {conversation_id} does not exist")
    store = await resolve_store(ctx, principal, row.store_name, action_name, [row.scope])
    if store.node.id != row.store_id:  # renamed and replaced between the two reads
        raise NotFound(f"conversation {conversation_id} does not exist")
    return row, store


async def _append(
    conn: asyncpg.Connection, store_id: str, conversation_id: str, items: list[Any], by: str
) -> None:
    """Append the items (an id already in the conversation is 409 ALREADY_EXISTS), or 404."""
    if not await repo.append(conn, store_id, conversation_id, items, by):
        raise NotFound(f"conversation {conversation_id} does not exist")


def _placement(ctx: Context, principal: Principal, data: ConversationCreate) -> tuple[str, str, str, str]:
    """Where a new conversation goes (see the rules): its store's full name, the field that named
    it, its scope and the scope's kind."""
    if data.memory_store is not None:
        if data.scope is None:
            raise InvalidParameter(
                "scope is required with memory_store: {kind, value} says whose conversation it is", "scope"
            )
        store, field = data.memory_store.name, "memory_store.name"
    else:
        default = ctx.settings.default_conversation_store
        if default is None:
            raise InvalidParameter(
                "memory_store is required: this server has no default store for conversations "
                "(CATALOG_DEFAULT_CONVERSATION_STORE is not set)",
                "memory_store",
            )
        store, field = default, "memory_store"
    if data.scope is None:
        return store, field, validate_scope(principal.on_behalf_of or principal.name, "scope.value"), "user"
    return store, field, validate_scope(data.scope.value, "scope.value"), data.scope.kind


async def create(ctx: Context, principal: Principal, data: ConversationCreate) -> Conversation:
    store_name, field, scope, kind = _placement(ctx, principal, data)
    items = check_items(data.items or [])
    store = await resolve_store(ctx, principal, store_name, "conversations.write", [scope], field=field)
    conversation_id = new_conversation_id()
    async with audited(ctx.pool) as conn:
        await repo.insert(
            conn, conversation_id, store.node.id, scope, kind, data.metadata or {}, principal.name
        )
        await _append(conn, store.node.id, conversation_id, items, principal.name)
        row = await repo.get(conn, store.node.id, conversation_id)
        note_result(len(items))
    assert row is not None  # inserted in this transaction
    return _answer(row)


async def retrieve(ctx: Context, principal: Principal, conversation_id: str) -> Conversation:
    row, _ = await _open(ctx, principal, conversation_id, "conversations.read")
    note_result(1)
    return _answer(row)


async def update(
    ctx: Context, principal: Principal, conversation_id: str, data: ConversationUpdate
) -> Conversation:
    found, _ = await _open(ctx, principal, conversation_id, "conversations.write")
    async with audited(ctx.pool) as conn:
        if not await repo.set_metadata(conn, found.store_id, conversation_id, data.metadata or {}):
            raise NotFound(f"conversation {conversation_id} does not exist")
        row = await repo.get(conn, found.store_id, conversation_id)
        note_result(1)
    assert row is not None
    return _answer(row)


async def delete(ctx: Context, principal: Principal, conversation_id: str) -> ConversationDeleted:
    found, store = await _open(ctx, principal, conversation_id, "conversations.write")
    await ensure_not_held(ctx, store, "deleted")
    async with audited(ctx.pool) as conn:
        if not await repo.delete(conn, found.store_id, conversation_id):
            raise NotFound(f"conversation {conversation_id} does not exist")
        note_result(1)
    return ConversationDeleted(id=conversation_id)


async def append(
    ctx: Context, principal: Principal, conversation_id: str, data: ConversationItemsCreate
) -> ConversationItemList:
    """OpenAI answers the items it added, as a list (`has_more` false)."""
    items = check_items(data.items)
    found, _ = await _open(ctx, principal, conversation_id, "conversations.write")
    async with audited(ctx.pool) as conn:
        await _append(conn, found.store_id, conversation_id, items, principal.name)
        note_result(len(items))
    data_out = [item.item for item in items]
    return ConversationItemList(
        data=data_out,
        first_id=data_out[0]["id"] if data_out else None,
        last_id=data_out[-1]["id"] if data_out else None,
        has_more=False,
    )


async def list_items(
    ctx: Context,
    principal: Principal,
    conversation_id: str,
    limit: int | None,
    order: str | None,
    after: str | None,
) -> ConversationItemList:
    """One page in position order (`desc`, the default as in OpenAI: newest first); `after` is the
    id of the last item of the previous page."""
    size = DEFAULT_PAGE if limit is None else limit
    if not 1 <= size <= MAX_PAGE:
        raise InvalidParameter(f"limit must be between 1 and {MAX_PAGE}", "limit")
    descending = (order or "desc") == "desc"
    found, _ = await _open(ctx, principal, conversation_id, "conversations.read")
    start = None
    if after is not None:
        start = await repo.position(ctx.pool, found.store_id, conversation_id, after)
        if start is None:
            raise InvalidParameter(f"after: no item {after} in conversation {conversation_id}", "after")
    rows = await repo.list_items(ctx.pool, found.store_id, conversation_id, start, size + 1, descending)
    page = rows[:size]
    note_result(len(page))
    return ConversationItemList(
        data=page,
        first_id=page[0]["id"] if page else None,
        last_id=page[-1]["id"] if page else None,
        has_more=len(rows) > size,
    )


async def retrieve_item(
    ctx: Context, principal: Principal, conversation_id: str, item_id: str
) -> dict[str, Any]:
    found, _ = await _open(ctx, principal, conversation_id, "conversations.read")
    item = await repo.get_item(ctx.pool, found.store_id, conversation_id, item_id)
    if item is None:
        raise NotFound(f"no item {item_id} in conversation {conversation_id}")
    note_result(1)
    return item


async def delete_item(ctx: Context, principal: Principal, conversation_id: str, item_id: str) -> Conversation:
    """OpenAI answers the conversation the item was deleted from."""
    found, store = await _open(ctx, principal, conversation_id, "conversations.write")
    await ensure_not_held(ctx, store, "deleted")
    async with audited(ctx.pool) as conn:
        if not await repo.delete_item(conn, found.store_id, conversation_id, item_id):
            raise NotFound(f"no item {item_id} in conversation {conversation_id}")
        row = await repo.get(conn, found.store_id, conversation_id)
        note_result(1)
    if row is None:
        raise NotFound(f"conversation {conversation_id} does not exist")
    return _answer(row)


# --- for responses (catalog.dialects.responses): a turn read and written through this slice -----------


async def open_conversation(
    ctx: Context, principal: Principal, conversation_id: str, action_name: str
) -> tuple[ConversationRow, Securable]:
    """The conversation and its store, once `action_name` is allowed there (403 / 404 as above)."""
    return await _open(ctx, principal, conversation_id, action_name)


async def recent_items(ctx: Context, store_id: str, conversation_id: str, limit: int) -> list[dict[str, Any]]:
    """The conversation's (of the store) last `limit` items, oldest first (a model's context window)."""
    rows = await repo.list_items(ctx.pool, store_id, conversation_id, None, limit, True)
    return rows[::-1]


async def append_turn(
    ctx: Context, principal: Principal, store_id: str, conversation_id: str, items: list[Item]
) -> None:
    """Append a response's turn (checked items: its input, tool calls, outputs and answer) to the
    conversation of the store, in one transaction with the request's audit event, all or nothing."""
    async with audited(ctx.pool) as conn:
        await _append(conn, store_id, conversation_id, items, principal.name)
        note_result(len(items))
