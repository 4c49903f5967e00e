"""OpenAI-compatible conversations, base `/ai-gateway/mlflow/v1` (what
`DatabricksOpenAI(use_ai_gateway=True)` calls) and its alias `/v1` (a plain
`openai.OpenAI(base_url=...)`). Both bases serve the same handlers; the alias is left out of the
OpenAPI document, which would otherwise list every operation twice."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from litestar import Router, delete, get, post
from litestar.params import JSONBody, Parameter

from catalog.dialects.conversations import service
from catalog.dialects.conversations.schemas import (
    MAX_ID,
    MAX_PAGE,
    Conversation,
    ConversationCreate,
    ConversationDeleted,
    ConversationItemList,
    ConversationItemsCreate,
    ConversationUpdate,
)
from catalog.web import routing
from catalog.web.deps import Ctx, Req
from catalog.web.openapi import errors
from catalog.wire.inputs import integer

BASE = "/ai-gateway/mlflow/v1/conversations"
ALIAS = "/v1/conversations"

# an id that names no conversation (or item) is 404, whatever its form
ConversationId = Annotated[
    str, Parameter(max_length=MAX_ID, description="the conversation's id (`conv_...`)")
]
ItemId = Annotated[str, Parameter(max_length=MAX_ID, description="the item's id")]
Include = Annotated[
    list[str] | None,
    Parameter(description="accepted for compatibility with OpenAI's clients; items are answered whole"),
]


def _routers(path: str, documented: bool) -> list[Router]:
    """The conversation routes under `path`: all are routes of a memory store (the one named in the
    body, or the conversation's), where a missing store, conversation or item is NOT_FOUND."""
    op = (lambda name: name) if documented else (lambda name: f"{name}V1Alias")

    @post(
        "/",
        status_code=200,
        operation_id=op("createConversation"),
        include_in_schema=documented,
        responses=errors(404, 413),
    )
    async def create_conversation(request: Req, ctx: Ctx, data: JSONBody[ConversationCreate]) -> Conversation:
        return await service.create(ctx, request.user, data)

    @get(
        "/{conversation_id:str}",
        operation_id=op("getConversation"),
        include_in_schema=documented,
        responses=errors(404),
    )
    async def get_conversation(request: Req, ctx: Ctx, conversation_id: ConversationId) -> Conversation:
        return await service.retrieve(ctx, request.user, conversation_id)

    @post(
        "/{conversation_id:str}",
        status_code=200,
        operation_id=op("updateConversation"),
        include_in_schema=documented,
        responses=errors(404, 413),
    )
    async def update_conversation(
        request: Req, ctx: Ctx, conversation_id: ConversationId, data: JSONBody[ConversationUpdate]
    ) -> Conversation:
        return await service.update(ctx, request.user, conversation_id, data)

    @delete(
        "/{conversation_id:str}",
        status_code=200,
        operation_id=op("deleteConversation"),
        include_in_schema=documented,
        responses=errors(404, 409),  # 409: the store is under legal hold
    )
    async def delete_conversation(
        request: Req, ctx: Ctx, conversation_id: ConversationId
    ) -> ConversationDeleted:
        return await service.delete(ctx, request.user, conversation_id)

    @post(
        "/{conversation_id:str}/items",
        status_code=200,
        operation_id=op("createConversationItems"),
        include_in_schema=documented,
        responses=errors(404, 409, 413),
    )
    async def create_items(
        request: Req,
        ctx: Ctx,
        conversation_id: ConversationId,
        data: JSONBody[ConversationItemsCreate],
        include: Include = None,
    ) -> ConversationItemList:
        return await service.append(ctx, request.user, conversation_id, data)

    @get(
        "/{conversation_id:str}/items",
        operation_id=op("listConversationItems"),
        include_in_schema=documented,
        responses=errors(404),
    )
    async def list_items(
        request: Req,
        ctx: Ctx,
        conversation_id: ConversationId,
        limit: Annotated[
            int | None, integer(1, MAX_PAGE, f"items per page, 1-{MAX_PAGE} (default 20)")
        ] = None,
        order: Annotated[
            Literal["asc", "desc"] | None,
            Parameter(description="`asc`: oldest first; `desc` (the default): newest first"),
        ] = None,
        after: Annotated[
            str | None,
            Parameter(max_length=MAX_ID, description="the id of the last item of the previous page"),
        ] = None,
        include: Include = None,
    ) -> ConversationItemList:
        return await service.list_items(ctx, request.user, conversation_id, limit, order, after)

    @get(
        "/{conversation_id:str}/items/{item_id:str}",
        operation_id=op("getConversationItem"),
        include_in_schema=documented,
        responses=errors(404),
    )
    async def get_item(
        request: Req, ctx: Ctx, conversation_id: ConversationId, item_id: ItemId, include: Include = None
    ) -> dict[str, Any]:
        return await service.retrieve_item(ctx, request.user, conversation_id, item_id)

    @delete(
        "/{conversation_id:str}/items/{item_id:str}",
        status_code=200,
        operation_id=op("deleteConversationItem"),
        include_in_schema=documented,
        responses=errors(404, 409),  # 409: the store is under legal hold
    )
    async def delete_item(
        request: Req, ctx: Ctx, conversation_id: ConversationId, item_id: ItemId
    ) -> Conversation:
        return await service.delete_item(ctx, request.user, conversation_id, item_id)

    tags = ["conversations"]
    return [
        routing.router(
            path=path,
            route_handlers=[
                create_conversation,
                get_conversation,
                update_conversation,
                delete_conversation,
                create_items,
                list_items,
                get_item,
                delete_item,
            ],
            tags=tags,
            memory_store=True,
        )
    ]


routers = [*_routers(BASE, documented=True), *_routers(ALIAS, documented=False)]
