"""`/mcp/memory-stores/{catalog.schema.store}`: the memory tools of one store over MCP.

Before a message reaches the MCP server, the request is authenticated (the JWT middleware, like
every route), `mcp.connect` is authorized on the store (any privilege on it: what the tools may
then do is decided per call), and the scope is bound: the verified end user (the token's
`on_behalf_of`, else its subject), or one of the store's shared scopes named with `?scope=`.
Refusals here are the server's usual JSON errors (401, 403, 404 `NOT_FOUND` as on every
memory-store route, 400), also where the MCP transport would answer plain text (a body that is not
`application/json`). A 401 names the store's protected resource metadata in its `WWW-Authenticate`
(RFC 9728, as the MCP authorization specification asks: `catalog.dialects.mcp.discovery`).

A message with a `method` and an `id` that is neither a string nor an integer (an object, an
array, a boolean, null, a number with a fraction or an exponent: MCP allows only those two) is a
request the transport would take for a notification and answer 202 with nothing: it is answered
here as JSON-RPC 2.0 says, with the error `-32600` (invalid request) and `id` null, status 400 as
the transport's own refusals of a malformed message, audited as a 400 `INVALID_PARAMETER_VALUE`.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs

import msgspec
from litestar import Litestar, asgi
from litestar.exceptions import MethodNotAllowedException
from litestar.types import Receive, Scope, Send

from catalog.auth import PROTECTED_RESOURCE, Principal
from catalog.context import Context
from catalog.dialects.mcp.server import STATE_KEY, Binding, serving
from catalog.entries.service import resolve_store
from catalog.errors import MEMORY_STORE_ROUTE, InvalidParameter, NotFound, PayloadTooLarge, PermissionDenied
from catalog.governance.namespace.service import scope_binding
from catalog.recorder import current
from catalog.toolkit.tools import Bound
from catalog.web.deps import ServerParts, server_parts
from catalog.wire.entry_keys import validate_scope

BASE = "/mcp/memory-stores"
TEMPLATE = f"{BASE}/{{full_name}}"
ALLOW = "POST, OPTIONS"
INVALID_REQUEST = -32600  # JSON-RPC 2.0's code for a message that is not a valid request
_INTEGER = re.compile(rb"-?(0|[1-9][0-9]*)")  # a JSON number that is an integer as written


def _requested_scope(scope: Scope) -> str | None:
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    unknown = sorted(set(query) - {"scope"})
    if unknown:
        raise InvalidParameter(
            f"unknown query parameter `{unknown[0]}`; only `scope` is accepted", unknown[0]
        )
    values = query.get("scope")
    return validate_scope(values[0], "scope") if values else None


async def bind(ctx: Context, principal: Principal, full_name: str, requested: str | None) -> Bound:
    """The store and scope a principal's tools act on (raises the refusal otherwise)."""
    store = await resolve_store(ctx, principal, full_name, "mcp.connect")
    identity = principal.on_behalf_of or principal.name
    if requested is None or requested == identity:
        return Bound(principal=principal, store=store.full_name, scope=identity)
    _, shared = await scope_binding(ctx, store)
    if requested not in shared:
        raise PermissionDenied(
            f"scope '{requested}' is not a shared scope of memory store {store.full_name}; without "
            f"?scope= the tools use your own scope '{identity}'"
        )
    return Bound(principal=principal, store=store.full_name, scope=requested)


# A mount (an ASGI handler with a path parameter is not routed for every method): the rest of the
# path names the store; the scope gets its whole path and the route's template back for the log
# line and the audit event.
# Each store's MCP server is a protected resource of its own: a 401 names its metadata, served at
# /.well-known/oauth-protected-resource/mcp/memory-stores/{full_name} (catalog.dialects.mcp.discovery).
@asgi(BASE, is_mount=True, copy_scope=False, opt={MEMORY_STORE_ROUTE: True, PROTECTED_RESOURCE: True})
async def memory_mcp(scope: Scope, receive: Receive, send: Send) -> None:
    full_name = scope["path"].strip("/")
    scope["path"] = f"{BASE}/{full_name}"
    scope["path_template"] = TEMPLATE  # type: ignore[typeddict-unknown-key]
    if not full_name or "/" in full_name:
        raise NotFound(f"no MCP server at {scope['path']}; use {TEMPLATE}")
    # POST only: every message is answered on its own request, the server never sends on its own
    # (no stream to GET) and there is no session to DELETE
    method = scope.get("method")
    if method == "OPTIONS":
        await _options(send)
        return
    if method != "POST":
        raise MethodNotAllowedException(headers={"Allow": ALLOW})
    app: Any = scope["app"]
    ctx = _parts(app).context
    bound = await bind(ctx, scope["user"], full_name, _requested_scope(scope))
    _ensure_json(scope)
    state: Any = scope["state"]
    state[STATE_KEY] = Binding(ctx, bound, current.get(), state.get("request_id", ""))
    body = await _body(receive, ctx.settings.mcp_max_body_bytes)
    if body is None:
        return  # the client went away before its message arrived: nothing was done, nothing to answer
    invalid = _invalid_id(body)
    if invalid is not None:
        state["error_code"] = InvalidParameter.error_code  # for the request's audit event
        await _json_rpc_error(send, INVALID_REQUEST, f"Invalid Request: {invalid}")
        return
    await app.state.mcp.handle_request(scope, _replay(body, receive), send)


def _parts(app: Litestar) -> ServerParts:
    """The running server's parts (an ASGI mount is given no dependencies): the app's lifespan,
    which runs before this module's, has put them there."""
    parts = server_parts(app)
    assert parts is not None, "the MCP route is served only by a started app"
    return parts


def _ensure_json(scope: Scope) -> None:
    """A message is JSON. The transport answers any other body with a plain-text 400; this route
    refuses it first with the contract's error shape, as it refuses everything else before the
    message is read (401, 403, 404, 413): no JSON-RPC request has been read yet, so there is no id
    a JSON-RPC error could answer, and an MCP client treats a refusal with no JSON-RPC error in it
    by its status, as it does the other refusals of this route."""
    raw = next((value for key, value in scope["headers"] if key == b"content-type"), b"")
    media_type = raw.decode("latin-1").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        sent = f"not {media_type[:100]!r}" if media_type else "the request has none"
        raise InvalidParameter(
            f"an MCP message is JSON: Content-Type must be application/json ({sent})", "Content-Type"
        )


class _Envelope(msgspec.Struct):
    """What this route reads of a message before the transport does: its method and its id, as
    written (the rest is skipped)."""

    method: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    id: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET


_ENVELOPE = msgspec.json.Decoder(_Envelope)
_JSON_TYPES = {ord("{"): "an object", ord("["): "an array", ord("t"): "a boolean", ord("f"): "a boolean"}


def _invalid_id(body: bytes) -> str | None:
    """What is wrong with the id of a request whose id is neither a string nor an integer; None
    for any other message (the transport answers what is not JSON, not an object, or not a
    message, and takes a message without an id for a notification)."""
    try:
        message = _ENVELOPE.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    raw = message.id
    if message.method is msgspec.UNSET or isinstance(raw, msgspec.UnsetType):
        return None
    written = bytes(raw)
    if written.startswith(b'"') or _INTEGER.fullmatch(written):
        return None
    kind = "null" if written == b"null" else _JSON_TYPES.get(written[0], "a number that is not an integer")
    return f"the id of a request is a string or an integer, not {kind}"


async def _json_rpc_error(send: Send, code: int, message: str) -> None:
    """A JSON-RPC error answering no request id (`id` null), status 400."""
    body = msgspec.json.encode({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}})
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _options(send: Send) -> None:
    body = b"{}"
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"allow", ALLOW.encode()),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _body(receive: Receive, limit: int) -> bytes | None:
    """The whole request body (413 over `limit`), or None if the client disconnected first."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk: bytes = message.get("body", b"")  # type: ignore[assignment]
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"an MCP message may be at most {limit} bytes", "body")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """`receive` that hands over the body already read, then waits for the disconnect."""
    delivered = False

    async def replayed() -> Any:
        nonlocal delivered
        if delivered:
            return await receive()
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


@asynccontextmanager
async def lifespan(app: Litestar) -> AsyncIterator[None]:
    async with serving(_parts(app).settings.mcp_max_body_bytes) as manager:
        app.state.mcp = manager
        yield
