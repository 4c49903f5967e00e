"""The three-level namespace: catalogs, schemas and memory stores."""

from catalog.governance.namespace.repo import bootstrap, get_metastore
from catalog.governance.namespace.routes import router, store_router

__all__ = ["bootstrap", "get_metastore", "router", "store_router"]
