"""The outermost request wrapper: a request id on every response (`X-Request-Id`) and one
structured log line per request (method, route, status, principal, duration, request id)."""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any
from urllib.parse import unquote_plus

from litestar.types import ASGIApp, HTTPResponseStartEvent, Message, Receive, Scope, Send

from catalog.audit.writer import AuditContext, current
from catalog.errors import error_body

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


UNAUDITED = {"/healthz", "/openapi.json", "/docs"}


def _storable(text: str) -> str:
    """PostgreSQL text cannot hold NUL: the audit keeps U+FFFD in its place."""
    return text.replace("\x00", "\ufffd")


def _query_pairs(scope: Scope) -> list[tuple[str, str]]:
    pairs = []
    for pair in (scope.get("query_string") or b"").decode(errors="replace").split("&"):
        if pair:
            key, _, value = pair.partition("=")
            pairs.append((unquote_plus(key), unquote_plus(value)))
    return pairs


def _params(scope: Scope) -> dict[str, Any]:
    """What the audit event keeps of a request: path and query parameters, never bodies."""
    params: dict[str, Any] = {
        _storable(str(k)): _storable(str(v)) for k, v in (scope.get("path_params") or {}).items()
    }
    for key, value in _query_pairs(scope):
        params.setdefault(_storable(key), _storable(value[:1024]))
    return params


def _nul_field(scope: Scope) -> str | None:
    """The path or query parameter holding a NUL character (no text column can store one)."""
    if "\x00" in scope.get("path", ""):
        return "path"
    query = scope.get("query_string") or b""
    if b"%00" not in query and b"\x00" not in query:
        return None
    for key, value in _query_pairs(scope):
        if "\x00" in key or "\x00" in value:
            return _storable(key)
    return None


class RequestContext:
    """The outermost wrapper: request id, log line, and the audit event, written (and committed)
    before the response starts, so that no answered request lacks its event."""

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
        audit = AuditContext()
        runtime = self._runtime(scope)
        if runtime is not None and _audited(scope):
            audit.enabled = runtime.audit.enabled
            audit.describe = lambda status: request_event(scope, state, audit, request_id, status)
        else:
            audit.enabled = False
        token = current.set(audit)

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode()))
                message["headers"] = headers  # type: ignore[typeddict-unknown-key]
                await self._audit(scope, state, audit, request_id, status)
            await send(message)

        try:
            field = _nul_field(scope)
            if field is not None:
                await self._refuse(state, send_with_id, f"`{field}` must not contain NUL characters")
            else:
                await self.app(scope, receive, send_with_id)
        finally:
            current.reset(token)
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

    @staticmethod
    async def _refuse(state: dict[str, Any], send: Send, message: str) -> None:
        state["error_code"] = "INVALID_PARAMETER_VALUE"
        body = json.dumps(error_body("INVALID_PARAMETER_VALUE", message)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        start: HTTPResponseStartEvent = {"type": "http.response.start", "status": 400, "headers": headers}
        await send(start)
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _audit(
        self, scope: Scope, state: dict[str, Any], audit: AuditContext, request_id: str, status: int
    ) -> None:
        runtime = self._runtime(scope)
        if runtime is None or not _audited(scope) or audit.committed:
            return
        await runtime.audit.record(**request_event(scope, state, audit, request_id, status))

    @staticmethod
    def _runtime(scope: Scope) -> Any:
        return getattr(scope["app"].state, "runtime", None) if "app" in scope else None  # type: ignore[typeddict-item]


def _audited(scope: Scope) -> bool:
    path = scope.get("path", "")
    return path not in UNAUDITED and not path.startswith("/docs")


def request_event(
    scope: Scope, state: dict[str, Any], audit: AuditContext, request_id: str, status: int
) -> dict[str, Any]:
    """The request's audit event, as far as the request has got."""
    route = _storable(scope.get("path_template") or scope.get("path", ""))
    decision = audit.decision
    if status == 401:
        decision = "unauthenticated"
    elif decision is None:
        decision = "deny" if status == 403 else "allow"
    headers = dict(scope.get("headers") or [])
    client = scope.get("client")
    return {
        "request_id": request_id,
        "principal": state.get("principal"),
        "on_behalf_of": state.get("on_behalf_of"),
        "source_ip": client[0] if client else None,
        "user_agent": _storable(headers.get(b"user-agent", b"").decode(errors="replace")[:512]) or None,
        "action_name": audit.action_name or f"http.{str(scope.get('method', '')).lower()} {route}",
        "securable_type": audit.securable_type,
        "securable_full_name": audit.securable_full_name,
        "securable_id": audit.securable_id,
        "privilege": audit.privilege,
        "decision": decision,
        "reason": audit.reason or (state.get("error_code") if status >= 400 else None),
        "status_code": status,
        "error_code": state.get("error_code") if status >= 400 else None,
        "request_params": _params(scope),
        "result_count": audit.result_count,
        "policy_revision": audit.policy_revision,
    }
