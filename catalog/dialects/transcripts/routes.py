"""Transcript search routes: a memory store's conversations (Unity Catalog dialect) and a session
store's sessions (agent dialect). A missing store is NOT_FOUND, as on the other routes of a store."""

from __future__ import annotations

from typing import Annotated

from litestar import post
from litestar.params import JSONBody, Parameter

from catalog.dialects.sessions.schemas import STORE_NAME_PATTERN, STORE_NAME_TEXT
from catalog.dialects.transcripts import service
from catalog.dialects.transcripts.repo import TranscriptRow
from catalog.dialects.transcripts.schemas import (
    ConversationHit,
    ConversationHitItem,
    ConversationSearch,
    ConversationSearchResponse,
    SessionHit,
    SessionHitItem,
    SessionItemSearch,
    SessionItemSearchResponse,
)
from catalog.web import routing
from catalog.web.deps import Ctx, Req
from catalog.web.openapi import errors
from catalog.wire import rfc3339
from catalog.wire.entry_keys import StoreFullNameParam as StoreFullName

StoreName = Annotated[str, Parameter(pattern=STORE_NAME_PATTERN, description=STORE_NAME_TEXT)]


def _conversation_item(row: TranscriptRow) -> ConversationHitItem:
    return ConversationHitItem(
        conversation_id=row.thread_id,
        item_id=row.item_id,
        role=row.role,
        text=row.text,
        scope=row.scope,
        created_at=row.created_at,
    )


def _session_item(row: TranscriptRow) -> SessionHitItem:
    return SessionHitItem(
        session_id=row.thread_id,
        item_id=row.item_id,
        role=row.role,
        text=row.text,
        actor_id=row.scope,
        create_time=rfc3339(row.created_at),
    )


@post(
    "/{full_name:str}/conversations:search",
    status_code=200,
    operation_id="searchConversations",
    responses=errors(404, 413),
)
async def search_conversations(
    request: Req, ctx: Ctx, full_name: StoreFullName, data: JSONBody[ConversationSearch]
) -> ConversationSearchResponse:
    """Search the messages of the store's conversations in the given scopes (episodic memory)."""
    found = await service.search_conversations(ctx, request.user, full_name, data)
    return ConversationSearchResponse(
        results=[
            ConversationHit(conversation_item=_conversation_item(row), score=score)
            for row, score in found.hits
        ],
        degraded=list(found.degraded) or None,
    )


@post(
    "/{store_name:str}/items:search",
    status_code=200,
    operation_id="agentsSearchSessionItems",
    responses=errors(404, 413),
)
async def search_session_items(
    request: Req, ctx: Ctx, store_name: StoreName, data: JSONBody[SessionItemSearch]
) -> SessionItemSearchResponse:
    """Search the messages of the store's sessions of the given actors (episodic memory)."""
    found = await service.search_sessions(ctx, request.user, store_name, data)
    return SessionItemSearchResponse(
        results=[SessionHit(session_item=_session_item(row), score=score) for row, score in found.hits],
        degraded=list(found.degraded) or None,
    )


routers = [
    routing.router(
        path="/api/2.1/unity-catalog/memory-stores",
        route_handlers=[search_conversations],
        tags=["conversations"],
        memory_store=True,
    ),
    routing.router(
        path="/api/2.0/agents/session-stores",
        route_handlers=[search_session_items],
        tags=["agents"],
        memory_store=True,
    ),
]
