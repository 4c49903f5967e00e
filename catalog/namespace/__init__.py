"""The three-level namespace: catalogs, schemas and memory stores."""

from catalog.namespace.repo import bootstrap, get_metastore
from catalog.namespace.routes import router, store_router

__all__ = ["bootstrap", "get_metastore", "router", "store_router"]
