"""`router(...)`: every API router is built here, so that each one has the request gate
(`catalog.wire.inputs.check_request`) and answers OPTIONS with every method of a path.

Litestar 2 adds a default OPTIONS handler to a path when its first handler is registered and
keeps it when more handlers join the path, so `Allow` would name the first method only
(litestar-org/litestar#4169, fixed in Litestar 3). Rebuilding each route once all its handlers
are in makes Litestar create the OPTIONS handler over the complete set.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from litestar import Response, Router
from litestar.enums import HttpMethod
from litestar.handlers import HTTPRouteHandler
from litestar.routes import HTTPRoute
from litestar.types import Scope

from catalog.errors import MEMORY_STORE_ROUTE
from catalog.wire.inputs import check_request


def _default_options(handler: HTTPRouteHandler) -> bool:
    return handler.http_methods == {"OPTIONS"} and not handler.include_in_schema


class _Route(HTTPRoute):
    """A path whose OPTIONS answer is 200 `{}` with `Allow` (success is always 200 with a JSON
    body here; Litestar's own answer is 204 without one)."""

    def create_options_handler(self, path: str) -> HTTPRouteHandler:
        def options_handler(scope: Scope) -> Response[dict[str, Any]]:
            return Response(content={}, status_code=200, headers={"Allow": ", ".join(sorted(self.methods))})

        return HTTPRouteHandler(
            path=path, http_method=[HttpMethod.OPTIONS], include_in_schema=False, sync_to_thread=False
        )(options_handler)


def router(
    path: str, route_handlers: Sequence[Any], tags: list[str], *, memory_store: bool = False
) -> Router:
    """`memory_store=True` for the routes of one memory store (`/memory-stores/{name}` and below, in
    either dialect): a missing store or entry there is answered `NOT_FOUND` (`catalog.errors.NotFound`)."""
    built = Router(
        path=path,
        route_handlers=list(route_handlers),
        tags=tags,
        before_request=check_request,
        opt={MEMORY_STORE_ROUTE: True} if memory_store else None,
    )
    for i, route in enumerate(built.routes):
        if isinstance(route, HTTPRoute):
            handlers = [h for h in route.route_handlers if not _default_options(h)]
            built.routes[i] = _Route(path=route.path, route_handlers=handlers)
    return built
