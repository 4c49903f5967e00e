"""The one mapping of errors to responses: the app's exception handler.

Every error is answered in the wire shape (`catalog.errors.error_body`) with its code's status:
an error of the hierarchy as it is; Litestar's own exceptions (validation, unknown route, body too
large, method not allowed) as the error they mean; a database that cannot be reached as 503
`TEMPORARILY_UNAVAILABLE` (and the database monitor is told, which probes at once); NUL in a text
value as 400. Anything else is unexpected: it becomes INTERNAL_ERROR naming the request id, with
no trace, and is logged (`catalog.errors.log_unexpected`).
"""

from __future__ import annotations

import math
from typing import Any

import asyncpg
from litestar import MediaType, Response
from litestar.exceptions import HTTPException, ValidationException

from catalog.auth import PROTECTED_RESOURCE, bearer_challenge, metadata_url
from catalog.errors import (
    ANSWERED_AS_IS,
    MEMORY_STORE_ROUTE,
    CatalogError,
    InvalidParameter,
    NotConfigured,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    RequestTimeout,
    RetryLater,
    TemporarilyUnavailable,
    Unauthenticated,
    UpstreamFailed,
    error_body,
    is_unavailable,
    log_unexpected,
)
from catalog.web.deps import Req, server_parts


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


def wire_code(err: CatalogError, request: Req) -> str:
    """The error code answered for `err` on this request's route (see `NotFound`)."""
    handler = request.scope.get("route_handler")
    if isinstance(err, NotFound) and handler is not None and handler.opt.get(MEMORY_STORE_ROUTE):
        return err.memory_store_error_code
    return err.error_code


def handle_exception(request: Req, exc: Exception) -> Response[Any]:
    """The single exception handler, registered for `Exception` on the app."""
    err = to_catalog_error(exc)
    request_id = request.scope.get("state", {}).get("request_id")
    if isinstance(err, TemporarilyUnavailable) and not isinstance(exc, CatalogError):
        parts = server_parts(request.app)
        if parts is not None:
            # probe now: while the verdict is down, a request is refused before it touches the
            # database, but only once its own quick attempt fails too (catalog.db.health)
            parts.database.suspect()
    elif err.status_code >= 500 and not isinstance(err, ANSWERED_AS_IS):
        log_unexpected(exc, request_id=request_id, route=request.scope.get("path"))
        err = CatalogError(f"internal error (request id {request_id})")
    error_code = wire_code(err, request)
    request.scope.setdefault("state", {})["error_code"] = error_code
    # Litestar's own headers stay (a 405 names the allowed methods in `Allow`, RFC 9110)
    kept = dict(exc.headers or {}) if isinstance(exc, HTTPException) else {}
    if isinstance(err, Unauthenticated):
        kept["WWW-Authenticate"] = challenge(request, err)
    return Response(
        content=error_body(error_code, err.message, err.details),
        status_code=err.status_code,
        media_type=MediaType.JSON,
        headers={**kept, **retry_headers(err)},
    )


def challenge(request: Req, err: Unauthenticated) -> str:
    """A 401's `WWW-Authenticate` (RFC 6750): the Bearer scheme, what was wrong with the token
    sent (nothing when none was), and where the metadata of what answered says how to get one
    (RFC 9728; `catalog.auth.discovery`): the route's own when it is a protected resource of its
    own (a memory store's MCP server), else the server's."""
    handler = request.scope.get("route_handler")
    own = handler is not None and handler.opt.get(PROTECTED_RESOURCE)
    # the path as asked: a mount's handler sees only the rest of it
    path = bytes(request.scope.get("raw_path") or b"").decode("latin-1") if own else None
    return bearer_challenge(metadata_url(str(request.base_url), path), err.bearer_error, err.message)


def retry_headers(err: CatalogError) -> dict[str, str]:
    if isinstance(err, RequestTimeout):  # the rest of the body may still come: not a next request
        return {"Connection": "close"}
    if isinstance(err, NotConfigured | UpstreamFailed):
        # the server has retried the upstream itself: OpenAI's clients would send it twice more
        return {"x-should-retry": "false"}
    if isinstance(err, RetryLater):
        return {"Retry-After": str(max(1, math.ceil(err.retry_after)))}
    return {}
