"""Wire types of the agent dialect's session stores (`/api/2.0/agents/session-stores`), as the
public `databricks-agentbricks` SDK sends and reads them. Times are RFC 3339 strings."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from catalog.governance.namespace.schemas import (
    MAX_PROPERTIES,
    Comment,
    Properties,
    ScopeBinding,
    SharedScopes,
)
from catalog.wire import Input, Output
from catalog.wire.inputs import NO_NUL, PrincipalName, Scope

MAX_ITEM_BYTES = 256 * 1024  # one item's `data`, as JSON
MAX_ITEMS_PER_APPEND = 100
MAX_METADATA = MAX_PROPERTIES  # metadata (of a store or a session): the rules of properties

# A session store's name: the rule of a memory store's id in this dialect (both are stores of the
# schema CATALOG_AGENTS_SCHEMA, with names unique across the two kinds).
STORE_NAME_PATTERN = r"^[a-z][a-z0-9-]{1,54}[a-z0-9]$"
STORE_NAME_TEXT = "3-56 lowercase letters, digits or '-', starting with a letter, not ending with '-'"
# A session id: one path segment of 1-256 characters without '/' or control characters.
MAX_SESSION_ID = 256
SESSION_ID_PATTERN = r"^[^/\x00-\x1f\x7f-\x9f]{1,256}$"
SESSION_ID_TEXT = "1-256 characters, no '/' and no control characters"
SESSION_UPDATE_MASK_PATTERN = r"^ *(metadata)? *$"
_STORE_FIELD = "(description|metadata|scope_binding|shared_scopes|legal_hold)"
STORE_UPDATE_MASK_PATTERN = rf"^ *({_STORE_FIELD} *(, *{_STORE_FIELD} *)*)? *$"
# What `order_by` may say: by creation (append) order, ascending unless `desc`.
ORDER_BY_PATTERN = r"^ *(create_time( +(asc|desc|ASC|DESC))?)? *$"


SessionId = Annotated[str, msgspec.Meta(pattern=SESSION_ID_PATTERN, description=SESSION_ID_TEXT)]
Metadata = Properties


class SessionStoreCreate(Input, kw_only=True):
    description: Comment | None = None
    metadata: Metadata | None = None  # the store's properties
    # not sent by the SDK: tie sessions to the caller's verified end user (as for memory stores)
    scope_binding: ScopeBinding = "caller"
    shared_scopes: SharedScopes | None = None


class SessionStoreUpdate(Input, kw_only=True):
    description: Comment | None = None
    metadata: Metadata | None = None
    scope_binding: ScopeBinding | None = None
    shared_scopes: SharedScopes | None = None
    # while true, no session or item of the store can be deleted (409 RESOURCE_CONFLICT)
    legal_hold: bool | None = None


class SessionStoreGrantee(Input, kw_only=True):
    type: Annotated[str, msgspec.Meta(pattern=NO_NUL)] | None = None
    name: PrincipalName


class SessionStoreGrant(Input, kw_only=True):
    principal: SessionStoreGrantee
    permission: Literal["READ", "WRITE"] = "WRITE"


class SessionCreate(Input, kw_only=True):
    actor_id: Scope
    parent_session_id: SessionId | None = None
    metadata: Metadata | None = None


class SessionUpdate(Input, kw_only=True):
    metadata: Metadata | None = None


class SessionFork(Input, kw_only=True):
    source_session_id: SessionId
    actor_id: Scope
    up_to_item_id: Annotated[str, msgspec.Meta(max_length=64)] | None = None
    session_id: SessionId | None = None
    metadata: Metadata | None = None


class NewItem(Input, kw_only=True):
    data: Any  # any JSON value, kept as sent (size checked by the service: 413 naming the item)


class AppendItems(Input, kw_only=True):
    items: Annotated[list[NewItem], msgspec.Meta(min_length=1, max_length=MAX_ITEMS_PER_APPEND)]


class NoFields(Input, kw_only=True):
    """`{}`: what a pop or a clear sends."""


class SessionStoreInfo(Output, kw_only=True):
    name: str
    session_store_name: str
    session_store_id: str
    description: str | None = None
    metadata: dict[str, str]
    creator_user_id: str | None = None
    create_time: str
    update_time: str


class SessionStoreList(Output, kw_only=True):
    session_stores: list[SessionStoreInfo]
    next_page_token: str | None = None


class SessionInfo(Output, kw_only=True):
    name: str
    session_store_name: str
    session_id: str
    actor_id: str
    parent_session_id: str | None = None
    root_session_id: str
    metadata: dict[str, str]
    create_time: str
    update_time: str
    last_activity_time: str


class SessionList(Output, kw_only=True):
    sessions: list[SessionInfo]
    next_page_token: str | None = None


class SessionItem(msgspec.Struct, kw_only=True):
    item_id: str
    data: Any
    create_time: str


class SessionItemList(Output, kw_only=True):
    session_items: list[SessionItem]
    next_page_token: str | None = None


class PoppedItem(msgspec.Struct, kw_only=True):
    item: SessionItem | None
