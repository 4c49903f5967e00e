"""The OpenAPI document: what Litestar derives from the routes, plus what it cannot say by itself.

Routes declare their error statuses with `responses=errors(...)` (every error has the body
`ErrorBody`). `finish(app)` then makes one pass over the generated document:
- component schemas of the wire types are msgspec's own JSON Schema of them, so the document
  states exactly what decoding enforces (patterns and lengths of list items and map keys,
  `additionalProperties: false` for inputs, which Litestar's generator leaves out);
- a query parameter that may be absent is documented as its type (no `null`: a query string
  cannot carry one);
- a memory-store route's 404 is described as `NOT_FOUND` (the others' as `RESOURCE_DOES_NOT_EXIST`);
- a route with a query parameter whose documented maximum length alone fills the request head
  (`page_token`: 16 KiB, as much as the connection layer takes of a request line and its headers,
  `catalog.wire.inputs.MAX_HEAD_BYTES`) documents the 431 such a value is answered;
- `X-Request-Id` on every response, `Retry-After` on every 429 and 503 that sets it;
- the open routes (`/healthz`, `/openapi.json`, `/docs`: the authentication middleware's exempt
  paths) say so with `security: []`; `/openapi.json` and `/docs` themselves are documented.

`/docs`, the API explorer (`ApiExplorer`), is Swagger UI over this document, its script and style
served by the server itself under `/docs/assets/` (`explorer_assets`) from the files the
`swagger-ui-bundle-v2` package ships: the page fetches nothing from another site, so it works
without internet.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import msgspec
from litestar import Litestar, Request, Router
from litestar.datastructures import CacheControlHeader
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.plugins import SwaggerRenderPlugin
from litestar.openapi.spec import (
    OpenAPI,
    OpenAPIHeader,
    OpenAPIMediaType,
    OpenAPIResponse,
    Operation,
    PathItem,
    Reference,
    Schema,
)
from litestar.static_files import create_static_files_router
from swagger_ui_bundle import swagger_ui_path

from catalog.auth import AUTH_EXEMPT_PATHS
from catalog.errors import MEMORY_STORE_ROUTE
from catalog.wire.inputs import MAX_HEAD_BYTES


class ErrorDetail(msgspec.Struct, kw_only=True, rename={"type": "@type"}):
    type: str  # "field_violation"
    field: str | None = None  # the request field at fault


class ErrorBody(msgspec.Struct, kw_only=True):
    """Every error answer."""

    error_code: typing.Annotated[
        str,
        msgspec.Meta(
            pattern=r"^[A-Z][A-Z_]*$",
            description="INVALID_PARAMETER_VALUE (400), UNAUTHENTICATED (401), PERMISSION_DENIED (403), "
            "RESOURCE_DOES_NOT_EXIST or NOT_FOUND (404), ALREADY_EXISTS, ABORTED or RESOURCE_CONFLICT "
            "(409), PAYLOAD_TOO_LARGE (413), REQUEST_LIMIT_EXCEEDED (429), TEMPORARILY_UNAVAILABLE "
            "(503), DEADLINE_EXCEEDED (504)",
        ),
    ]
    message: str
    details: list[ErrorDetail]


class Empty(msgspec.Struct):
    """What a delete (or a grant) answers: `{}`."""


class Health(msgspec.Struct, omit_defaults=True, kw_only=True):
    status: Literal["ok", "unavailable"]
    reason: Literal["database", "search index"] | None = None


_WHY = {
    400: "INVALID_PARAMETER_VALUE: a parameter or body field is malformed or out of range (the message "
    "and `details` name it), a query parameter is repeated, or a value holds NUL",
    401: "UNAUTHENTICATED: no bearer token, or one that is not valid",
    403: "PERMISSION_DENIED: the caller lacks a privilege the action needs",
    404: "RESOURCE_DOES_NOT_EXIST: the object named does not exist",
    409: "ALREADY_EXISTS, ABORTED (If-Match no longer matches, a concurrent change) or "
    "RESOURCE_CONFLICT (the object is held)",
    413: "PAYLOAD_TOO_LARGE: the body, or a text field in it, is longer than allowed",
    431: "REQUEST_HEADER_FIELDS_TOO_LARGE: the request line and headers are over 16 KiB together (a "
    "query parameter at its maximum length is)",
    429: "REQUEST_LIMIT_EXCEEDED: the caller's rate limit is exceeded; retry after `Retry-After` seconds",
    501: "NOT_IMPLEMENTED: no upstream model is configured (CATALOG_LLM_BASE_URL)",
    502: "BAD_GATEWAY: the upstream model failed (its status and message are in the message)",
    503: "TEMPORARILY_UNAVAILABLE: the database cannot be reached; retry after `Retry-After` seconds",
    504: "DEADLINE_EXCEEDED: the request took longer than the server allows",
}
# A memory-store route's 404 (`catalog.errors.NotFound`: one rule, set by the route's router).
_WHY_MEMORY_STORE_404 = "NOT_FOUND: the memory store named, or the entry named in it, does not exist"

# Answered by any authenticated route: bad parameters, authentication, authorization, rate limits,
# an unreachable database, the request deadline.
COMMON = (400, 401, 403, 429, 503, 504)


def errors(*statuses: int) -> dict[int, ResponseSpec]:
    """The error answers of a route: the common ones and `statuses` (404, 409, 413, ...)."""
    return {
        status: ResponseSpec(data_container=ErrorBody, description=_WHY[status], generate_examples=False)
        for status in sorted({*COMMON, *statuses})
    }


# --- the pass over the generated document ------------------------------------------------------------

_REQUEST_ID = OpenAPIHeader(
    schema=Schema(type="string", pattern="^[0-9a-f]{32}$"),  # type: ignore[arg-type]
    description="the request's id, also the `request_id` of its audit event",
    required=True,
)
_RETRY_AFTER = OpenAPIHeader(
    schema=Schema(type="integer", minimum=1),  # type: ignore[arg-type]
    description="seconds to wait before retrying",
    required=True,
)
_OPEN = [re.compile(pattern) for pattern in AUTH_EXEMPT_PATHS]


def finish(app: Litestar) -> OpenAPI:
    """Complete the app's OpenAPI document in place (it is built once and served as it is)."""
    doc = app.openapi_schema
    _document_open_routes(doc)
    components = doc.components.schemas if doc.components and doc.components.schemas is not None else {}
    components.update(_wire_schemas(app))  # type: ignore[arg-type]
    store_operations = _memory_store_operations(app)
    for path, item in (doc.paths or {}).items():
        open_route = any(pattern.search(path) for pattern in _OPEN)
        for method, operation in _operations(item):
            if open_route:
                operation.security = []
            not_found = (operation.responses or {}).get("404")
            if (path, method) in store_operations and isinstance(not_found, OpenAPIResponse):
                not_found.description = _WHY_MEMORY_STORE_404
            if _fills_the_head(operation):
                _add_error(operation, 431)
            for parameter in operation.parameters or []:
                if not isinstance(parameter, Reference) and isinstance(parameter.schema, Schema):
                    _drop_null(parameter.schema)
            for status, response in (operation.responses or {}).items():
                if isinstance(response, Reference):
                    continue
                headers = dict(response.headers or {})
                headers["X-Request-Id"] = _REQUEST_ID
                if status in ("429", "503") and not open_route:
                    headers["Retry-After"] = _RETRY_AFTER
                response.headers = headers
    return doc


def _fills_the_head(operation: Operation) -> bool:
    """Whether a query parameter of the operation, at its documented maximum length, is as long
    as the connection layer takes of a whole request head (the request line is longer still)."""
    for parameter in operation.parameters or []:
        if isinstance(parameter, Reference) or parameter.param_in != "query":
            continue
        schema = parameter.schema
        branches = [schema, *(schema.one_of or [])] if isinstance(schema, Schema) else []
        if any(isinstance(b, Schema) and (b.max_length or 0) >= MAX_HEAD_BYTES for b in branches):
            return True
    return False


def _add_error(operation: Operation, status: int) -> None:
    """An error answer the route itself does not declare, in the order of the statuses."""
    responses = dict(operation.responses or {})
    responses[str(status)] = OpenAPIResponse(
        description=_WHY[status],
        content={"application/json": _json(Reference(ref="#/components/schemas/ErrorBody"))},
    )
    operation.responses = dict(sorted(responses.items()))


def _operations(item: PathItem) -> Iterator[tuple[str, Operation]]:
    for method in ("get", "put", "post", "delete", "options", "head", "patch", "trace"):
        operation = getattr(item, method, None)
        if operation is not None:
            yield method, operation


def _memory_store_operations(app: Litestar) -> set[tuple[str, str]]:
    """(path, method) of every memory-store route (their 404 is NOT_FOUND)."""
    found: set[tuple[str, str]] = set()
    for route in app.routes:
        for handler in getattr(route, "route_handlers", []):
            if isinstance(handler, HTTPRouteHandler) and handler.opt.get(MEMORY_STORE_ROUTE):
                found.update((route.path_format, method.lower()) for method in handler.http_methods)
    return found


def _drop_null(schema: Schema) -> None:
    """`{oneOf: [T, null], maxLength: ...}` → `{type: T, maxLength: ...}`."""
    branches = schema.one_of or []
    kept = [b for b in branches if not (isinstance(b, Schema) and b.type == "null")]
    if len(branches) == 2 and len(kept) == 1 and isinstance(kept[0], Schema):
        schema.one_of = None
        for name, value in vars(kept[0]).items():
            if value is not None and getattr(schema, name, None) is None:
                setattr(schema, name, value)


def _structs(annotation: Any, found: set[type]) -> None:
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        found.add(annotation)
    for arg in typing.get_args(annotation):
        _structs(arg, found)


def _wire_schemas(app: Litestar) -> dict[str, Any]:
    """msgspec's JSON Schema of every wire type the routes read or answer, keyed like Litestar's
    components (by class name: the wire types' names are unique, see tests/test_inputs.py)."""
    found: set[type] = {ErrorBody, Health, Empty}
    for route in app.routes:
        for handler in getattr(route, "route_handlers", []):
            if not isinstance(handler, HTTPRouteHandler):
                continue
            signature = handler.parsed_fn_signature
            _structs(signature.return_type.annotation, found)
            if (data := signature.parameters.get("data")) is not None:
                _structs(data.annotation, found)
    ordered = sorted(found, key=lambda t: t.__name__)
    _, components = msgspec.json.schema_components(ordered, ref_template="#/components/schemas/{name}")
    return components


def _json(schema: Any) -> OpenAPIMediaType:
    return OpenAPIMediaType(schema=schema)


def _document_open_routes(doc: OpenAPI) -> None:
    """`/healthz` answers `Health` (200 ready, 503 not); `/openapi.json` and `/docs` are served by
    Litestar itself, outside the route table, so they are added here."""
    health = Reference(ref="#/components/schemas/Health")
    error = Reference(ref="#/components/schemas/ErrorBody")
    common = {
        "400": OpenAPIResponse(description=_WHY[400], content={"application/json": _json(error)}),
        "504": OpenAPIResponse(description=_WHY[504], content={"application/json": _json(error)}),
    }
    paths = doc.paths if doc.paths is not None else {}
    healthz = paths.get("/healthz")
    if healthz is not None and healthz.get is not None:
        healthz.get.description = "Ready when the database answers and the search index is open."
        healthz.get.responses = {
            "200": OpenAPIResponse(description="ready", content={"application/json": _json(health)}),
            "503": OpenAPIResponse(
                description="not ready: `reason` says what is missing",
                content={"application/json": _json(health)},
            ),
            **common,
        }
    paths["/openapi.json"] = PathItem(
        get=Operation(
            operation_id="openapi",
            tags=["operations"],
            summary="This document",
            responses={
                "200": OpenAPIResponse(
                    description="the OpenAPI 3.1 document",
                    # the media type Litestar serves it as
                    content={"application/vnd.oai.openapi+json": _json(Schema(type="object"))},  # type: ignore[arg-type]
                ),
                **common,
            },
        )
    )
    paths["/docs"] = PathItem(
        get=Operation(
            operation_id="docs",
            tags=["operations"],
            summary="Browsable documentation",
            responses={
                "200": OpenAPIResponse(
                    description="Swagger UI for this document",
                    content={"text/html": _json(Schema(type="string"))},  # type: ignore[arg-type]
                ),
                **common,
            },
        )
    )


# --- the API explorer ------------------------------------------------------------------------------

EXPLORER_PATH = "/docs"
EXPLORER_ASSETS = f"{EXPLORER_PATH}/assets"
# the files of the Swagger UI distribution the page loads (served from the package's folder)
EXPLORER_FILES = ("swagger-ui.css", "swagger-ui-bundle.js", "swagger-ui-standalone-preset.js")


class ApiExplorer(SwaggerRenderPlugin):
    """Swagger UI at `/docs`, with this server's own copy of its files (no CDN), the console's icon,
    and no call to the online validator."""

    def __init__(self) -> None:
        css, bundle, preset = (f"{EXPLORER_ASSETS}/{name}" for name in EXPLORER_FILES)
        super().__init__(
            js_url=bundle,
            css_url=css,
            standalone_preset_js_url=preset,
            path=EXPLORER_PATH,
            favicon='<link rel="icon" href="/favicon.ico" type="image/svg+xml">',
        )

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        title = openapi_schema["info"]["title"]
        head = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}: API explorer</title>
{self.favicon}
<link rel="stylesheet" href="{self.css_url}">
<style>body {{ margin: 0; padding: 0 }}</style>
</head>
<body>
<div id="swagger-container"></div>
<script src="{self.js_url}"></script>
<script src="{self.standalone_preset_js_url}"></script>
<script>
const ui = SwaggerUIBundle({{
  spec: """
        tail = b""",
  dom_id: "#swagger-container",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
});
</script>
</body>
</html>
"""
        # inside <script>: a "</" in a description must not end it (JSON may escape the slash)
        document = self.render_json(request, openapi_schema).replace(b"</", b"<\\/")
        return head.encode() + document + tail


def explorer_assets() -> Router:
    """`/docs/assets/<file>`: the Swagger UI files, open without a token and never audited (under
    `/docs`, as the page itself), cached a day."""
    return create_static_files_router(
        path=EXPLORER_ASSETS,
        directories=[Path(str(swagger_ui_path))],
        include_in_schema=False,
        name="api-explorer-assets",
        cache_control=CacheControlHeader(public=True, max_age=86400),
    )
