"""The web console: server-rendered pages at /console/ over the services of the REST API."""

from catalog.console.render import console_error
from catalog.console.routes import CONSOLE_PATHS, favicon, router

__all__ = ["CONSOLE_PATHS", "console_error", "favicon", "router"]
