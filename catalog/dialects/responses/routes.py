"""`POST /responses` at `/ai-gateway/mlflow/v1` and its alias `/v1` (left out of the OpenAPI
document). With `stream: true` the answer is server-sent events in OpenAI's order
(`response.created`, `response.in_progress`, `response.output_item.added`,
`response.content_part.added`, `response.output_text.delta`, ..., `response.completed`); the 200
is sent only once the model's first answer arrived, so an upstream that fails at once is a 502
like without streaming, and a later failure is a `response.failed` event."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from litestar import Response, Router, post
from litestar.params import JSONBody
from litestar.response import Stream

from catalog.dialects.responses import service
from catalog.dialects.responses.schemas import ResponseCreate
from catalog.dialects.responses.service import Completed, Event, MessageDone, Prepared, Text, ToolRan
from catalog.errors import UpstreamFailed, is_unavailable
from catalog.web import routing
from catalog.web.deps import Ctx, Req
from catalog.web.openapi import errors

log = logging.getLogger("catalog.responses")

BASE = "/ai-gateway/mlflow/v1/responses"
ALIAS = "/v1/responses"


class _Events:
    """Server-sent events of one response, numbered in the order sent."""

    def __init__(self, prepared: Prepared) -> None:
        self.prepared = prepared
        self.sequence = 0
        self.output: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None  # the message whose text is streaming
        self.text: list[str] = []

    def event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()

    def start(self) -> list[bytes]:
        response = service.response_object(self.prepared, "in_progress", [], None)
        return [
            self.event("response.created", response=response),
            self.event("response.in_progress", response=response),
        ]

    def of(self, event: Event) -> list[bytes]:
        index = len(self.output)
        if isinstance(event, Text):
            sent = []
            if self.open is None:
                self.open = {
                    "type": "message",
                    "id": event.item_id,
                    "role": "assistant",
                    "status": "in_progress",
                    "content": [],
                }
                self.text = []
                sent.append(self.event("response.output_item.added", output_index=index, item=self.open))
                part = {"type": "output_text", "text": "", "annotations": []}
                sent.append(
                    self.event(
                        "response.content_part.added",
                        item_id=event.item_id,
                        output_index=index,
                        content_index=0,
                        part=part,
                    )
                )
            self.text.append(event.delta)
            where = {"item_id": event.item_id, "output_index": index, "content_index": 0}
            sent.append(self.event("response.output_text.delta", **where, delta=event.delta, logprobs=[]))
            return sent
        if isinstance(event, MessageDone):
            item = event.item
            sent = []
            if self.open is None:  # no delta came (an empty answer): the item opens and closes at once
                opened = {**item, "status": "in_progress", "content": []}
                sent.append(self.event("response.output_item.added", output_index=index, item=opened))
                sent.append(
                    self.event(
                        "response.content_part.added",
                        item_id=item["id"],
                        output_index=index,
                        content_index=0,
                        part={"type": "output_text", "text": "", "annotations": []},
                    )
                )
            part = item["content"][0]
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            sent.append(self.event("response.output_text.done", **where, text=part["text"], logprobs=[]))
            sent.append(self.event("response.content_part.done", **where, part=part))
            sent.append(self.event("response.output_item.done", output_index=index, item=item))
            self.output.append(item)
            self.open = None
            return sent
        if isinstance(event, ToolRan):
            item = event.item
            running = {k: v for k, v in item.items() if k not in ("output", "error")} | {
                "status": "in_progress"
            }
            self.output.append(item)
            return [
                self.event("response.output_item.added", output_index=index, item=running),
                self.event("response.output_item.done", output_index=index, item=item),
            ]
        return [self.event("response.completed", response=event.response)]

    def failed(self, message: str) -> list[bytes]:
        error = {"code": "server_error", "message": message}
        response = service.response_object(self.prepared, "failed", self.output, None, error)
        return [self.event("response.failed", response=response)]


async def _stream(
    events: _Events, first: Event, rest: AsyncIterator[Event], request_id: str
) -> AsyncIterator[bytes]:
    for chunk in events.start():
        yield chunk
    try:
        for chunk in events.of(first):
            yield chunk
        async for event in rest:
            for chunk in events.of(event):
                yield chunk
    except UpstreamFailed as exc:  # nothing of the turn is appended
        for chunk in events.failed(exc.message):
            yield chunk
    except Exception as exc:
        if not is_unavailable(exc):
            log.exception("a streamed response failed", extra={"request_id": request_id})
        for chunk in events.failed(
            f"the response failed (request id {request_id}); nothing was added to the conversation"
        ):
            yield chunk


def _router(path: str, documented: bool) -> Router:
    @post(
        "/",
        status_code=200,
        operation_id="createResponse" if documented else "createResponseV1Alias",
        include_in_schema=documented,
        responses=errors(404, 413, 501, 502),
        description="A model's answer over a conversation, with the conversation's memory tools; "
        "`stream: true` answers server-sent events",
    )
    async def create_response(request: Req, ctx: Ctx, data: JSONBody[ResponseCreate]) -> Any:
        prepared = await service.prepare(ctx, request.user, data)
        run = service.run(ctx, request.user, prepared, stream=data.stream)
        if not data.stream:
            async for event in run:
                if isinstance(event, Completed):
                    return Response(event.response)
            raise AssertionError("a response ends with Completed")
        first = await anext(run)  # an upstream failing here is a 502, not a stream
        request_id = request.scope.get("state", {}).get("request_id", "")
        return Stream(
            _stream(_Events(prepared), first, run, request_id),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    return routing.router(path=path, route_handlers=[create_response], tags=["responses"], memory_store=True)


routers = [_router(BASE, documented=True), _router(ALIAS, documented=False)]
