"""Wire types of the agent-memory dialect (`/api/2.0/agents/memory-stores`), as the public
`databricks-agentbricks` SDK sends and reads them. Times are RFC 3339 strings."""

from __future__ import annotations

from typing import Literal

import msgspec


class _Input(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pass


class _Output(msgspec.Struct, omit_defaults=True, kw_only=True):
    pass


class StoreCreate(_Input, kw_only=True):
    display_name: str | None = None
    description: str | None = None


class StoreUpdate(_Input, kw_only=True):
    display_name: str | None = None
    description: str | None = None


class PrincipalRef(_Input, kw_only=True):
    type: str | None = None
    name: str


class GrantRequest(_Input, kw_only=True):
    principal: PrincipalRef
    permission: Literal["READ", "WRITE"] = "WRITE"


class EntryCreate(_Input, kw_only=True):
    actor_id: str
    path: str
    content: str | None = None
    description: str | None = None
    session_id: str | None = None
    source_type: str | None = None


class EntryUpdate(_Input, kw_only=True):
    content: str | None = None
    description: str | None = None


class SearchBody(_Input, kw_only=True):
    actor_id: str
    query: str
    limit: int | None = None
    page_size: int | None = None
    path_prefix: str | None = None
    session_id: str | None = None
    read_mask: str | None = None


class AgentStore(_Output, kw_only=True):
    name: str
    display_name: str
    description: str | None = None
    owner_user_id: str | None = None
    create_time: str
    update_time: str


class AgentStoreList(_Output, kw_only=True):
    managed_memory_stores: list[AgentStore]
    next_page_token: str | None = None


class AgentEntry(_Output, kw_only=True):
    name: str
    actor_id: str
    path: str
    session_id: str | None = None
    content: str | None = None
    description: str | None = None
    source_type: str | None = None
    create_time: str | None = None
    update_time: str | None = None


class AgentEntryList(_Output, kw_only=True):
    managed_memory_entries: list[AgentEntry]
    next_page_token: str | None = None


class AgentSearchHit(msgspec.Struct, kw_only=True):
    managed_memory_entry: AgentEntry
    score: float


class AgentSearchResult(msgspec.Struct, kw_only=True):
    results: list[AgentSearchHit]
