"""What the composition root (`catalog.app`) hands the HTTP layer, named once.

- A route handler takes `request: Req` and `ctx: Ctx`, the services' `Context`, which the app
  provides as the dependency `ctx` (`/healthz` also takes the database monitor, as `database`).
- What Litestar injects nothing into (the outermost middleware, the exception handler, an ASGI
  mount, a lifespan) finds the running server's parts in the app's state, where the composition
  root puts them at start-up (`install`), and reads them through `server_parts`: no module below
  the composition root reads the app's state for them otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from litestar import Litestar, Request
from litestar.di import NamedDependency

from catalog.context import Context
from catalog.db import DatabaseMonitor
from catalog.recorder import AuditWriter
from catalog.settings import Settings

Req = Request[Any, Any, Any]
Ctx = NamedDependency[Context]


@dataclass(frozen=True)
class ServerParts:
    """The parts of the running server the HTTP shell uses besides the routes' context."""

    context: Context
    database: DatabaseMonitor  # whether a request may reach the database (catalog.db.health)
    audit: AuditWriter  # where each request's event is written (catalog.recorder)

    @property
    def settings(self) -> Settings:
        return self.context.settings


_STATE_KEY = "server_parts"


def install(app: Litestar, parts: ServerParts) -> None:
    """Called by the composition root once the server has started, before any request."""
    app.state[_STATE_KEY] = parts


def server_parts(app: Litestar) -> ServerParts | None:
    """The running server's parts; None for an app that has not been started."""
    parts: ServerParts | None = app.state.get(_STATE_KEY)
    return parts
