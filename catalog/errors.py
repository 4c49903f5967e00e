"""The one error hierarchy, and the wire shape of an error.

Every error a client sees is `{"error_code", "message", "details"}` (`error_body`) with the status
the API documents for its code (docs/reference/errors.md; the OpenAPI document names each
route's). Services raise the errors below and know nothing of HTTP: `catalog.web.errors` maps them
(and Litestar's own exceptions, and the database's) to a response. Also here, for every part of the server
(requests and background workers alike): `is_unavailable`, which tells an outage of the database
from a bug, and `log_unexpected`, which logs an unexpected error's trace at most once a minute.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import asyncpg

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
    """401. `bearer_error` is RFC 6750's error code for the answer's `WWW-Authenticate` challenge:
    `invalid_token` (a token was sent and refused), `invalid_request` (the header is malformed),
    or None when no credentials were sent at all (the challenge then names no error)."""

    status_code = 401
    error_code = "UNAUTHENTICATED"

    def __init__(self, message: str, *, bearer_error: str | None = "invalid_token") -> None:
        super().__init__(message)
        self.bearer_error = bearer_error


class PermissionDenied(CatalogError):
    status_code = 403
    error_code = "PERMISSION_DENIED"


# The `opt` flag of the memory-store routes (`catalog.web.routing.router(..., memory_store=True)`).
MEMORY_STORE_ROUTE = "memory_store_route"


class NotFound(CatalogError):
    """A missing object: 404. The code depends on the route that answers it, by one rule
    (docs/reference/errors.md, "Not found: two codes"): a memory-store route
    (`/memory-stores/{name}` and everything under it, in both dialects; its router sets
    `MEMORY_STORE_ROUTE`) answers `NOT_FOUND`, as Databricks' managed-memory API does and its tools
    test for; every other route (catalogs, schemas, groups, ...) answers `RESOURCE_DOES_NOT_EXIST`,
    as Unity Catalog does."""

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


# What says "the database cannot serve this right now", told by class wherever asyncpg's class
# tells it. PostgreSQL's SQLSTATE classes (by code, so that a code asyncpg has no class for, an
# `UnknownPostgresError`, is told too): 08 connection exception (`PostgresConnectionError`,
# `ConnectionDoesNotExistError`: the connection went away mid-operation), 53 insufficient
# resources (too many connections, disk full), 57P operator intervention that ends the session
# (shutdown, crash, `CannotConnectNowError` while starting up, database dropped). Not the rest
# of class 57, which ends no session: 57014, a statement cancelled by statement_timeout, is a slow
# query, not an outage.
_UNAVAILABLE_SQLSTATES = ("08", "53", "57P")
_UNAVAILABLE_OS: tuple[type[BaseException], ...] = (
    ConnectionError,  # refused, reset: the socket going away
    FileNotFoundError,  # the embedded server's socket file is gone
    TimeoutError,  # no connection within the pool's timeout
)
# Two cases asyncpg tells only by message, with no subclass or SQLSTATE to tell them by:
# - a pooled connection whose server went away is closed (and may have been handed back to the
#   pool): a bare `InterfaceError` ("connection is closed", "pool is closed", "connection has been
#   released back to the pool"). Its subclasses (`ClientConfigurationError`, the unsupported
#   features) say what else went wrong and are never an outage;
# - a connection whose server went away mid-operation is left in a state its protocol reports as
#   an `InternalClientError`, "cannot switch to state N; another operation (M) is in progress"
#   (its other messages are bugs); the monitor's probe tells whether the database is down.
_GONE_MESSAGES = ("closed", "released back")
_STUCK_MESSAGE = "another operation"


def is_unavailable(exc: BaseException) -> bool:
    """Whether `exc` says the database is unreachable or refusing work (not a bug, not bad input)."""
    if isinstance(exc, asyncpg.PostgresError):
        return str(exc.sqlstate or "").startswith(_UNAVAILABLE_SQLSTATES)
    if isinstance(exc, _UNAVAILABLE_OS):
        return True
    if type(exc) is asyncpg.InterfaceError:
        message = str(exc).lower()
        return any(text in message for text in _GONE_MESSAGES)
    if isinstance(exc, asyncpg.InternalClientError):
        return _STUCK_MESSAGE in str(exc)
    return False


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
