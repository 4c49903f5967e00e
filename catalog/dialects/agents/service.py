"""The agent-memory dialect on top of the same securables and entries.

A store id `x` is the Unity Catalog memory store `<CATALOG_AGENTS_SCHEMA>.x`, so both dialects,
the grants API and every privilege rule see one securable. An actor id is a scope. Entries are
named `memory-stores/<store>/entries/<entry uuid>`.
"""

from __future__ import annotations

import re
import uuid

from catalog.auth import Principal
from catalog.context import Context
from catalog.dialects.agents.schemas import (
    ENTRY_FIELDS,
    ENTRY_UPDATE_MASK_PATTERN,
    READ_MASK_PATTERN,
    STORE_ID_PATTERN,
    STORE_UPDATE_MASK_PATTERN,
    AgentDeleteMatchingResult,
    AgentEntry,
    AgentEntryCreate,
    AgentEntryList,
    AgentSearchHit,
    AgentSearchResult,
    AgentStore,
    AgentStoreList,
    DeleteMatchingBody,
    EntryUpdate,
    GrantRequest,
    SearchBody,
    StoreCreate,
    StoreUpdate,
)
from catalog.entries import EntryRow
from catalog.entries import operations as ops
from catalog.entries import service as entries
from catalog.entries.schemas import score_details, search_explain
from catalog.errors import InvalidParameter, NotFound
from catalog.governance.namespace import service as namespace
from catalog.governance.namespace.schemas import MemoryStoreCreate, MemoryStoreInfo, MemoryStoreUpdate
from catalog.governance.permissions import service as permissions
from catalog.wire import rfc3339
from catalog.wire.entry_keys import validate_scope

_STORE_ID = re.compile(STORE_ID_PATTERN)
_READ_MASK = re.compile(READ_MASK_PATTERN)
_STORE_UPDATE_MASK = re.compile(STORE_UPDATE_MASK_PATTERN)
_ENTRY_UPDATE_MASK = re.compile(ENTRY_UPDATE_MASK_PATTERN)
MAX_PAGE = 100
DISPLAY_NAME = "display_name"
# where this dialect's changes come from (their provenance's `via`)
AGENTS = ops.Channel(via="agents")
# what a caller who may write but not read is told of an entry it wrote
WRITE_ONLY_FIELDS = {"session_id", "create_time", "update_time"}


def store_id(value: str, field: str = "managed_memory_store_id") -> str:
    if not isinstance(value, str) or not _STORE_ID.fullmatch(value):
        raise InvalidParameter(
            f"{field} must be 3-56 lowercase letters, digits or hyphens, start with a letter and end "
            "with a letter or digit",
            field,
        )
    return value


def _full_name(ctx: Context, sid: str) -> str:
    return f"{ctx.settings.agents_schema}.{store_id(sid, 'memory_store')}"


def to_store(info: MemoryStoreInfo) -> AgentStore:
    return AgentStore(
        name=f"memory-stores/{info.name}",
        display_name=info.properties.get(DISPLAY_NAME, info.name),
        description=info.description,
        owner_user_id=info.owner,
        create_time=rfc3339(info.created_at),
        update_time=rfc3339(info.updated_at),
    )


def _fields(value: str | None, pattern: re.Pattern[str], field: str, names: list[str]) -> set[str]:
    """The field names of a mask: a comma-separated list of `names`; empty for none."""
    if value is None:
        return set()
    if not pattern.fullmatch(value):
        raise InvalidParameter(f"{field} must be a comma-separated list of {', '.join(names)}", field)
    return {f.strip() for f in value.split(",") if f.strip()}


def _mask(value: str | None, field: str) -> set[str] | None:
    return _fields(value, _READ_MASK, field, ["name", *ENTRY_FIELDS]) or None


def agent_entry(sid: str, row: EntryRow, mask: set[str] | None = None) -> AgentEntry:
    """An entry as this dialect answers it (only the fields `mask` names, when given)."""

    def keep(name: str) -> bool:
        return mask is None or name in mask

    return AgentEntry(
        name=f"memory-stores/{sid}/entries/{row.id}",
        actor_id=row.scope,
        path=row.path,
        session_id=(row.session_id or None) if keep("session_id") else None,
        content=row.contents if keep("content") else None,
        description=row.description if keep("description") else None,
        source_type=row.source_type if keep("source_type") else None,
        create_time=rfc3339(row.created_at) if keep("create_time") else None,
        update_time=rfc3339(row.updated_at) if keep("update_time") else None,
    )


def _entry_id(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise NotFound(f"memory entry {value[:80]} does not exist") from None


# --- stores --------------------------------------------------------------------------------------


async def create_store(ctx: Context, principal: Principal, sid: str | None, body: StoreCreate) -> AgentStore:
    sid = store_id(sid or body.display_name or "")
    catalog_name, schema_name = ctx.settings.agents_schema.split(".")
    info = await namespace.create_store(
        ctx,
        principal,
        MemoryStoreCreate(
            name=sid,
            catalog_name=catalog_name,
            schema_name=schema_name,
            description=body.description,
            properties={DISPLAY_NAME: body.display_name or sid},
        ),
    )
    return to_store(info)


async def get_store(ctx: Context, principal: Principal, sid: str) -> AgentStore:
    return to_store(await namespace.get_store(ctx, principal, _full_name(ctx, sid)))


async def list_stores(
    ctx: Context, principal: Principal, page_size: int | None, page_token: str | None
) -> AgentStoreList:
    if page_size is not None and not 0 <= page_size <= MAX_PAGE:
        raise InvalidParameter(f"page_size must be between 1 and {MAX_PAGE}", "page_size")
    catalog_name, schema_name = ctx.settings.agents_schema.split(".")
    listed = await namespace.list_stores(ctx, principal, catalog_name, schema_name, page_size, page_token)
    return AgentStoreList(
        managed_memory_stores=[to_store(s) for s in listed.memory_stores],
        next_page_token=listed.next_page_token,
    )


async def update_store(
    ctx: Context, principal: Principal, sid: str, update_mask: str | None, body: StoreUpdate
) -> AgentStore:
    fields = _fields(update_mask, _STORE_UPDATE_MASK, "update_mask", ["display_name", "description"]) or {
        name for name in ("display_name", "description") if getattr(body, name) is not None
    }
    if not fields:
        raise InvalidParameter("update_mask must name display_name and/or description", "update_mask")
    info = await namespace.update_store(  # one change, one audit event
        ctx,
        principal,
        _full_name(ctx, sid),
        MemoryStoreUpdate(description=body.description if "description" in fields else None),
        add_properties={DISPLAY_NAME: body.display_name}
        if "display_name" in fields and body.display_name
        else None,
    )
    return to_store(info)


async def delete_store(ctx: Context, principal: Principal, sid: str) -> None:
    await namespace.delete_store(ctx, principal, _full_name(ctx, sid))


async def grant(ctx: Context, principal: Principal, sid: str, body: GrantRequest) -> None:
    await permissions.grant_store_permission(
        ctx, principal, _full_name(ctx, sid), body.principal.name, body.permission, store_kind="memory"
    )


# --- entries -------------------------------------------------------------------------------------


async def create_entry(ctx: Context, principal: Principal, sid: str, body: AgentEntryCreate) -> AgentEntry:
    write = ops.Write(
        store=_full_name(ctx, sid),
        key=ops.ByKey(
            scope=validate_scope(body.actor_id, "actor_id"), path=body.path, session_id=body.session_id
        ),
        contents=body.content,
        description=body.description,
        source_type=body.source_type,
        channel=AGENTS,
    )
    written = await entries.write(ctx, principal, write)
    return agent_entry(sid, written.row, None if written.readable else WRITE_ONLY_FIELDS)


async def get_entry(
    ctx: Context, principal: Principal, sid: str, entry_id: str, read_mask: str | None
) -> AgentEntry:
    mask = _mask(read_mask, "read_mask")
    target = ops.ById(entry_id=_entry_id(entry_id))
    return agent_entry(
        sid, await entries.get(ctx, principal, ops.Get(store=_full_name(ctx, sid), target=target)), mask
    )


async def list_entries(
    ctx: Context,
    principal: Principal,
    sid: str,
    actor_id: str | None,
    path_prefix: str | None,
    path: str | None,
    session_id: str | None,
    page_size: int | None,
    page_token: str | None,
    read_mask: str | None,
) -> AgentEntryList:
    scope = validate_scope(actor_id, "actor_id")
    if page_size is not None and not 0 <= page_size <= MAX_PAGE:
        raise InvalidParameter(f"page_size must be between 1 and {MAX_PAGE}", "page_size")
    mask = _mask(read_mask, "read_mask")
    listing = ops.List(
        store=_full_name(ctx, sid),
        scopes=(scope,),
        path_prefix=path_prefix,
        exact_path=path or None,
        session_id=session_id,
        page_size=page_size or MAX_PAGE,
        page_token=page_token,
        max_page=MAX_PAGE,
        listing="agents",
    )
    page = await entries.list_entries(ctx, principal, listing)
    return AgentEntryList(
        managed_memory_entries=[agent_entry(sid, row, mask) for row in page.rows],
        next_page_token=page.next_page_token,
    )


async def update_entry(
    ctx: Context, principal: Principal, sid: str, entry_id: str, update_mask: str | None, body: EntryUpdate
) -> AgentEntry:
    fields = _fields(update_mask, _ENTRY_UPDATE_MASK, "update_mask", ["content", "description"]) or {
        name for name in ("content", "description") if getattr(body, name) is not None
    }
    if not fields:
        raise InvalidParameter("update_mask must name content and/or description", "update_mask")
    edit = ops.Edit(
        store=_full_name(ctx, sid),
        target=ops.ById(entry_id=_entry_id(entry_id)),
        change=ops.ReplaceAll(contents=body.content) if "content" in fields else None,
        description=body.description if "description" in fields else None,
        set_description="description" in fields,
        channel=AGENTS,
    )
    written = await entries.edit(ctx, principal, edit)
    return agent_entry(sid, written.row, None if written.readable else WRITE_ONLY_FIELDS)


async def delete_entry(ctx: Context, principal: Principal, sid: str, entry_id: str) -> None:
    target = ops.ById(entry_id=_entry_id(entry_id))
    await entries.delete(
        ctx, principal, ops.Delete(store=_full_name(ctx, sid), target=target, channel=AGENTS)
    )


async def search(ctx: Context, principal: Principal, sid: str, body: SearchBody) -> AgentSearchResult:
    top_k = body.page_size or body.limit or 10
    mask = _mask(body.read_mask, "read_mask")
    query = ops.Search(
        store=_full_name(ctx, sid),
        scopes=(validate_scope(body.actor_id, "actor_id"),),
        query=body.query,
        top_k=top_k,
        path_prefix=body.path_prefix,
        session_id=body.session_id,
        explain=body.explain,
    )
    found = await entries.search(ctx, principal, query)
    details = found.explained.hits if found.explained is not None else {}
    return AgentSearchResult(
        results=[
            AgentSearchHit(
                managed_memory_entry=agent_entry(sid, row, mask),
                score=score,
                score_details=score_details(details[row.id]) if row.id in details else None,
            )
            for row, score in found.hits
        ],
        degraded=list(found.degraded) or None,
        explain=search_explain(found.explained),
    )


async def delete_matching(
    ctx: Context, principal: Principal, sid: str, body: DeleteMatchingBody
) -> AgentDeleteMatchingResult:
    """Forget by query in the actor's scope (as `entries:deleteMatching`): the names of the
    entries deleted (a dry run: that would be), at most 100."""
    op = ops.DeleteMatching(
        channel=AGENTS,
        store=_full_name(ctx, sid),
        scopes=(validate_scope(body.actor_id, "actor_id"),),
        query=body.query,
        min_score=body.min_score,
        path_prefix=body.path_prefix,
        dry_run=body.dry_run,
    )
    forgotten = await entries.delete_matching(ctx, principal, op)
    return AgentDeleteMatchingResult(
        deleted=[f"memory-stores/{sid}/entries/{row.id}" for row in forgotten.rows],
        truncated=forgotten.truncated,
    )
