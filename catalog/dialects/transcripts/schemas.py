"""Wire types of transcript search: the Unity Catalog dialect's (a memory store's conversations,
times in epoch milliseconds) and the agent dialect's (a session store's sessions, times in RFC
3339). Inputs forbid unknown fields."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from catalog.entries.schemas import MAX_QUERY, MAX_TOP_K  # the same limits as searching entries
from catalog.wire import Degraded, Input, Output
from catalog.wire.entry_keys import MAX_SCOPES
from catalog.wire.inputs import NOT_BLANK, Scope

MAX_THREAD_ID = 256

Query = Annotated[str, msgspec.Meta(max_length=MAX_QUERY, pattern=NOT_BLANK, description="what to look for")]
TopK = Annotated[int, msgspec.Meta(ge=1, le=MAX_TOP_K, description=f"how many hits, 1-{MAX_TOP_K}")]
Role = Literal["user", "assistant", "system", "developer"]
Mode = Literal["hybrid", "keyword", "semantic"]
ThreadId = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_THREAD_ID, pattern=r"^[^/\x00-\x1f]+$")]


class ConversationSearch(Input, kw_only=True):
    """Search the message items of a memory store's conversations in some scopes."""

    query: Query
    scope: Scope | None = None
    scopes: Annotated[list[Scope], msgspec.Meta(max_length=MAX_SCOPES)] | None = None
    conversation_id: ThreadId | None = None  # only this conversation
    role: Role | None = None  # only messages of this role
    top_k: TopK = 10
    mode: Mode = "hybrid"
    min_score: float | None = None


class ConversationHitItem(Output, kw_only=True):
    conversation_id: str
    item_id: str
    role: str
    text: str
    scope: str
    created_at: int  # epoch milliseconds


class ConversationHit(msgspec.Struct, kw_only=True):
    conversation_item: ConversationHitItem
    score: float


class ConversationSearchResponse(Output):
    results: list[ConversationHit]
    degraded: Degraded = None


class SessionItemSearch(Input, kw_only=True):
    """Search the message items of a session store's sessions of one actor (or several)."""

    query: Query
    actor_id: Scope | None = None
    actor_ids: Annotated[list[Scope], msgspec.Meta(max_length=MAX_SCOPES)] | None = None
    session_id: ThreadId | None = None  # only this session
    role: Role | None = None
    top_k: TopK = 10
    mode: Mode = "hybrid"
    min_score: float | None = None


class SessionHitItem(Output, kw_only=True):
    session_id: str
    item_id: str
    role: str
    text: str
    actor_id: str
    create_time: str


class SessionHit(msgspec.Struct, kw_only=True):
    session_item: SessionHitItem
    score: float


class SessionItemSearchResponse(Output):
    results: list[SessionHit]
    degraded: Degraded = None
