"""`POST /api/2.0/agents/session-stores/{store}/sessions/{session_id}/extractions`: what
`Session.extract_memories(memory_store=..., instructions=..., dry_run=...)` sends."""

from __future__ import annotations

from typing import Annotated

from litestar import post
from litestar.params import JSONBody, Parameter

from catalog.dialects.extraction import service
from catalog.dialects.extraction.schemas import ExtractionRequest, ExtractionResult
from catalog.dialects.sessions.schemas import (
    SESSION_ID_PATTERN,
    SESSION_ID_TEXT,
    STORE_NAME_PATTERN,
    STORE_NAME_TEXT,
)
from catalog.web import routing
from catalog.web.deps import Ctx, Req
from catalog.web.openapi import errors

StoreName = Annotated[str, Parameter(pattern=STORE_NAME_PATTERN, description=STORE_NAME_TEXT)]
SessionIdParam = Annotated[str, Parameter(pattern=SESSION_ID_PATTERN, description=SESSION_ID_TEXT)]


@post(
    "/{store_name:str}/sessions/{session_id:str}/extractions",
    status_code=200,
    operation_id="agentsExtractMemories",
    responses=errors(404, 413, 501, 502),
    description="An upstream model turns the session's transcript into memory entries of its actor "
    "in the memory store (`dry_run`: what it would write, nothing written)",
)
async def extract_memories(
    request: Req,
    ctx: Ctx,
    store_name: StoreName,
    session_id: SessionIdParam,
    data: JSONBody[ExtractionRequest],
) -> ExtractionResult:
    return await service.extract(ctx, request.user, store_name, session_id, data)


router = routing.router(
    path="/api/2.0/agents/session-stores",
    route_handlers=[extract_memories],
    tags=["agents"],
    memory_store=True,
)
