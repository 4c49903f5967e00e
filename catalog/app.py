"""`create_app(settings)`: the whole HTTP application.

request → RequestMiddleware (request id, log line, audit event) → exception mapper → JWT authentication
→ route (parse) → service (authorize, validate) → repo (SQL) → PostgreSQL
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar, Response
from litestar.di import Provide
from litestar.middleware import DefineMiddleware
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme

from catalog import __version__
from catalog.audit.auditors.routes import router as audit_router
from catalog.auth import AUTH_EXEMPT_PATHS, AuthParts, JWTAuthMiddleware, install_auth
from catalog.backup.routes import router as backup_router
from catalog.console import CONSOLE_PATHS, console_error, favicon
from catalog.console import router as console_router
from catalog.context import Context
from catalog.db import DatabaseMonitor
from catalog.dialects.agents.routes import router as agents_router
from catalog.dialects.agents.routes import store_router as agents_store_router
from catalog.dialects.conversations.routes import routers as conversations_routers
from catalog.dialects.extraction.routes import router as extraction_router
from catalog.dialects.mcp import discovery as mcp_discovery
from catalog.dialects.mcp import routes as toolkit
from catalog.dialects.pipelines.routes import router as pipelines_router
from catalog.dialects.responses.routes import routers as responses_routers
from catalog.dialects.sessions.routes import router as sessions_router
from catalog.dialects.sessions.routes import store_router as sessions_store_router
from catalog.dialects.transcripts.routes import routers as transcripts_routers
from catalog.erasure.routes import entries_router, system_router  # entries' routes with their DELETE
from catalog.governance import namespace
from catalog.governance.groups.routes import router as groups_router
from catalog.governance.permissions.routes import router as permissions_router
from catalog.governance.principals.routes import router as principals_router
from catalog.metrics.routes import router as metrics_router
from catalog.runtime import Runtime, Worker
from catalog.search.embedder import Encoder
from catalog.settings import Settings
from catalog.web.deps import Req, ServerParts, install
from catalog.web.errors import handle_exception
from catalog.web.health import databricks_config, healthz
from catalog.web.middleware import RequestMiddleware
from catalog.web.openapi import ApiExplorer, explorer_assets, finish


def _runtime(app: Litestar) -> Runtime:
    """The running server, which the lifespan puts in the app's state (the tests read it there)."""
    runtime: Runtime = app.state.runtime
    return runtime


def _context(request: Req) -> Context:
    return _runtime(request.app).context


def _database(request: Req) -> DatabaseMonitor:
    return _runtime(request.app).db


_CONSOLE = re.compile(CONSOLE_PATHS)


def _handle_exception(request: Req, exc: Exception) -> Response[Any]:
    """The app's exception handler: JSON for the API; an error page under /console/ (an unknown
    console path, a method it does not take: errors raised before a console route is reached)."""
    if _CONSOLE.match(request.scope.get("path", "")):
        return console_error(request, exc)
    return handle_exception(request, exc)


def create_app(settings: Settings, encoder: Encoder | None = None, worker: Worker | None = None) -> Litestar:
    """The application; `encoder` replaces the ONNX model (tests use a fast stand-in); `worker`:
    this process is one of the workers of `catalog serve --workers N`."""

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncIterator[None]:
        runtime = await Runtime.start(settings, encoder, worker)
        app.state.runtime = runtime
        install_auth(app, AuthParts(runtime.verifier, runtime.limiter, runtime.principals))
        # what the HTTP shell reads where Litestar injects nothing (catalog.web.deps)
        install(app, ServerParts(context=runtime.context, database=runtime.db, audit=runtime.audit))
        if runtime.context.search is not None:
            # a short query is embedded on the event loop while its request is the only one
            # being worked on (a stream already answering does not count)
            runtime.context.search.embedder.busy = lambda: requests.working > 1
        try:
            yield
        finally:
            await runtime.close()

    app = Litestar(
        route_handlers=[
            healthz,
            databricks_config,
            namespace.router,
            namespace.store_router,
            entries_router,
            backup_router,
            permissions_router,
            groups_router,
            principals_router,
            agents_router,
            agents_store_router,
            *conversations_routers,
            sessions_router,
            sessions_store_router,
            *transcripts_routers,
            *responses_routers,
            extraction_router,
            pipelines_router,
            system_router,
            audit_router,
            metrics_router,
            toolkit.memory_mcp,
            mcp_discovery.server_metadata,
            mcp_discovery.mcp_server_metadata,
            console_router,
            favicon,
            explorer_assets(),
        ],
        lifespan=[lifespan, toolkit.lifespan],
        dependencies={
            "ctx": Provide(_context, sync_to_thread=False),
            "database": Provide(_database, sync_to_thread=False),
        },
        # OPTIONS too: no route is open without a token but those in AUTH_EXEMPT_PATHS; the web
        # console authenticates its session cookie's token the same way (catalog.console.session)
        middleware=[
            DefineMiddleware(
                JWTAuthMiddleware, exclude=[*AUTH_EXEMPT_PATHS, CONSOLE_PATHS], exclude_http_methods=[]
            )
        ],
        exception_handlers={Exception: _handle_exception},
        request_max_body_size=settings.max_body_bytes,
        openapi_config=OpenAPIConfig(
            title="Memory Catalog",
            version=__version__,
            path="/",
            render_plugins=[ApiExplorer()],  # /docs, with its files under /docs/assets
            components=Components(
                security_schemes={"bearer": SecurityScheme(type="http", scheme="bearer", bearer_format="JWT")}
            ),
            security=[{"bearer": []}],
        ),
        logging_config=None,
        debug=False,
    )
    finish(app)  # the OpenAPI document, completed once (see catalog/web/openapi.py)
    requests = RequestMiddleware(app.asgi_handler)
    app.asgi_handler = requests
    return app
