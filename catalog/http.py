"""The outermost request wrapper: a request id on every response (`X-Request-Id`) and one
structured log line per request (method, route, status, principal, duration, request id)."""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

from litestar.types import ASGIApp, Message, Receive, Scope, Send

request_log = logging.getLogger("catalog.request")

_STANDARD_RECORD_KEYS = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line; `extra=` fields become top-level keys."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD_RECORD_KEYS and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("uvicorn.access", "pgserver"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


class RequestContext:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = uuid.uuid4().hex
        state = scope.setdefault("state", {})  # type: ignore[typeddict-item]
        state["request_id"] = request_id
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode()))
                message["headers"] = headers  # type: ignore[typeddict-unknown-key]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            route = scope.get("path_template") or scope.get("path")
            request_log.info(
                "request",
                extra={
                    "method": scope.get("method"),
                    "route": route,
                    "status": status,
                    "principal": state.get("principal"),
                    "duration_ms": round((time.perf_counter() - started) * 1000, 3),
                    "request_id": request_id,
                },
            )
