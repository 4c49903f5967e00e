"""The one error hierarchy and the one mapping to the wire shape.

Every error a client sees is `{"error_code", "message", "details"}` with the status the API
documents for its code (README, "API"; the OpenAPI document names each route's). Litestar's own
exceptions (validation, unknown route, body too large) are mapped here too, and anything
unexpected becomes INTERNAL_ERROR with no trace, logged with the request id.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import asyncpg
from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException, ValidationException

log = logging.getLogger("catalog.errors")


class CatalogError(Exception):
    status_code = 500
    error_code = "INTERNAL_ERROR"

    def __init__(self, message: str, details: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or []


class FieldError(CatalogError):
    """An error about one field of the request, named in the message and in `details[].field`."""

    def __init__(self, message: str, field: str | None = None) -> None:
        details = [{"@type": "field_violation", "field": field}] if field else None
        super().__init__(message, details)
        self.field = field


class InvalidParameter(FieldError):
    status_code = 400
    error_code = "INVALID_PARAMETER_VALUE"


class Unauthenticated(CatalogError):
    status_code = 401
    error_code = "UNAUTHENTICATED"


class PermissionDenied(CatalogError):
    status_code = 403
    error_code = "PERMISSION_DENIED"


# The `opt` flag of the memory-store routes (`catalog.web.routing.router(..., memory_store=True)`).
MEMORY_STORE_ROUTE = "memory_store_route"


class NotFound(CatalogError):
    """A missing object: 404. The code depends on the route that answers it, by one rule
    (README, "API": "404 codes"): a memory-store route (`/memory-stores/{name}` and everything under
    it, in both dialects; its router sets `MEMORY_STORE_ROUTE`) answers `NOT_FOUND`, as
    Databricks' managed-memory API does and its tools test for; every other route (catalogs,
    schemas, groups, ...) answers `RESOURCE_DOES_NOT_EXIST`, as Unity Catalog does."""

    status_code = 404
    error_code = "RESOURCE_DOES_NOT_EXIST"
    memory_store_error_code = "NOT_FOUND"


class AlreadyExists(CatalogError):
    status_code = 409
    error_code = "ALREADY_EXISTS"


class Aborted(CatalogError):
    status_code = 409
    error_code = "ABORTED"


class ResourceConflict(CatalogError):
    """The object is deliberately held (a legal hold): the change is refused, naming the hold."""

    status_code = 409
    error_code = "RESOURCE_CONFLICT"


class PayloadTooLarge(FieldError):
    """The body, or one text field of it, is over its limit (the field is named)."""

    status_code = 413
    error_code = "PAYLOAD_TOO_LARGE"


class RetryLater(CatalogError):
    """An error the client should retry after `retry_after` seconds (answered as `Retry-After`)."""

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RequestLimitExceeded(RetryLater):
    status_code = 429
    error_code = "REQUEST_LIMIT_EXCEEDED"


class TemporarilyUnavailable(RetryLater):
    """The database (or another part the request needs) cannot be reached right now, or the
    server is at a configured cap."""

    status_code = 503
    error_code = "TEMPORARILY_UNAVAILABLE"


class DeadlineExceeded(CatalogError):
    """The request took longer than the server's request timeout."""

    status_code = 504
    error_code = "DEADLINE_EXCEEDED"


class NotConfigured(CatalogError):
    """The route needs a part of the server that is not configured (an upstream model)."""

    status_code = 501
    error_code = "NOT_IMPLEMENTED"


class UpstreamFailed(CatalogError):
    """The upstream model server failed (after the retries the server allows itself)."""

    status_code = 502
    error_code = "BAD_GATEWAY"


# 5xx errors whose message is answered as is (the others are logged and answered as an internal
# error, with the request id): they say what a client or an operator can act on
ANSWERED_AS_IS = (DeadlineExceeded, NotConfigured, UpstreamFailed)


class RequestTimeout(CatalogError):
    """The client paused too long while sending its request (slow-client protection)."""

    status_code = 408
    error_code = "REQUEST_TIMEOUT"


def error_body(error_code: str, message: str, details: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"error_code": error_code, "message": message, "details": details or []}


def _from_litestar(exc: HTTPException) -> CatalogError:
    if isinstance(exc, ValidationException):
        problems = exc.extra if isinstance(exc.extra, list) else []
        for problem in problems:
            if isinstance(problem, dict) and problem.get("message"):
                key = problem.get("key")
                field = key if key and key != "data" else None
                where = f" (field `{field}`)" if field else ""
                return InvalidParameter(f"invalid request: {problem['message']}{where}", field)
        return InvalidParameter(f"invalid request: {exc.detail}")
    status = exc.status_code
    if status == 413:
        return PayloadTooLarge("request body is too large")
    if status == 404:
        return NotFound("no such endpoint")
    if status == 401:
        return Unauthenticated(exc.detail or "authentication required")
    if status == 403:
        return PermissionDenied(exc.detail or "permission denied")
    if status == 405:
        err = CatalogError("method not allowed on this endpoint")
        err.status_code, err.error_code = 405, "INVALID_PARAMETER_VALUE"
        return err
    if 400 <= status < 500:
        return InvalidParameter(f"invalid request: {exc.detail}")
    return CatalogError("internal error")


# SQLSTATE classes and client errors that mean "the database cannot serve this right now":
# connection exceptions (08), operator intervention (57: shutdown, crash, starting up) and
# insufficient resources (53: too many connections, disk full), and the socket going away.
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,
    asyncpg.OperatorInterventionError,
    asyncpg.InsufficientResourcesError,
    asyncpg.ConnectionDoesNotExistError,
    ConnectionError,
    FileNotFoundError,  # the embedded server's socket file is gone
    TimeoutError,  # no connection within the pool's timeout
)


def is_unavailable(exc: BaseException) -> bool:
    """Whether `exc` says the database is unreachable or refusing work (not a bug, not bad input)."""
    if isinstance(exc, asyncpg.QueryCanceledError):  # statement_timeout: a slow query, not an outage
        return False
    if isinstance(exc, _UNAVAILABLE):
        return True
    if isinstance(exc, asyncpg.InternalClientError):
        # a connection whose server went away mid-operation is left in a state asyncpg reports
        # as "another operation is in progress"; the monitor's probe tells whether it is down
        return "another operation" in str(exc)
    # a pooled connection whose server went away is closed (and may be handed back to the pool)
    message = str(exc).lower()
    return isinstance(exc, asyncpg.InterfaceError) and ("closed" in message or "released back" in message)


def to_catalog_error(exc: Exception) -> CatalogError:
    if isinstance(exc, CatalogError):
        return exc
    if is_unavailable(exc):
        return TemporarilyUnavailable("the database is unavailable; retry shortly", retry_after=2.0)
    if isinstance(exc, HTTPException):
        return _from_litestar(exc)
    if isinstance(exc, asyncpg.CharacterNotInRepertoireError | asyncpg.UntranslatableCharacterError):
        # a NUL character (or \u0000 in JSON) in some text value: PostgreSQL cannot store it
        return InvalidParameter("text values must not contain NUL characters (\\u0000)")
    return CatalogError("internal error")


_TRACED: dict[tuple[str, str, str], float] = {}
TRACE_EVERY = 60.0  # seconds: an unexpected error's trace is logged once per this, per kind


def log_unexpected(exc: BaseException, *, request_id: str | None, route: str | None) -> None:
    """An unexpected error: its trace once a minute per (type, message, route), one line else."""
    key = (type(exc).__name__, str(exc)[:200], route or "")
    now = time.monotonic()
    traced = _TRACED.get(key)
    extra = {"request_id": request_id, "route": route, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    if traced is None or now - traced >= TRACE_EVERY:
        if len(_TRACED) > 1000:
            _TRACED.clear()
        _TRACED[key] = now
        log.error("internal error", exc_info=exc, extra=extra)
    else:
        log.error("internal error (seen before; trace logged at most once a minute)", extra=extra)


def wire_code(err: CatalogError, request: Request[Any, Any, Any]) -> str:
    """The error code answered for `err` on this request's route (see `NotFound`)."""
    handler = request.scope.get("route_handler")
    if isinstance(err, NotFound) and handler is not None and handler.opt.get(MEMORY_STORE_ROUTE):
        return err.memory_store_error_code
    return err.error_code


def handle_exception(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """The single exception handler, registered for `Exception` on the app."""
    err = to_catalog_error(exc)
    request_id = request.scope.get("state", {}).get("request_id")
    if isinstance(err, TemporarilyUnavailable) and not isinstance(exc, CatalogError):
        runtime = getattr(request.app.state, "runtime", None)
        if runtime is not None:
            runtime.db.suspect()  # probe now; requests are refused at once while it is down
    elif err.status_code >= 500 and not isinstance(err, ANSWERED_AS_IS):
        log_unexpected(exc, request_id=request_id, route=request.scope.get("path"))
        err = CatalogError(f"internal error (request id {request_id})")
    error_code = wire_code(err, request)
    request.scope.setdefault("state", {})["error_code"] = error_code
    # Litestar's own headers stay (a 405 names the allowed methods in `Allow`, RFC 9110)
    kept = dict(exc.headers or {}) if isinstance(exc, HTTPException) else {}
    return Response(
        content=error_body(error_code, err.message, err.details),
        status_code=err.status_code,
        media_type=MediaType.JSON,
        headers={**kept, **retry_headers(err)},
    )


def retry_headers(err: CatalogError) -> dict[str, str]:
    if isinstance(err, RequestTimeout):  # the rest of the body may still come: not a next request
        return {"Connection": "close"}
    if isinstance(err, NotConfigured | UpstreamFailed):
        # the server has retried the upstream itself: OpenAI's clients would send it twice more
        return {"x-should-retry": "false"}
    if isinstance(err, RetryLater):
        return {"Retry-After": str(max(1, math.ceil(err.retry_after)))}
    return {}
