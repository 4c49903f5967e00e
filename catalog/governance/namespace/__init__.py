"""The three-level namespace: catalogs, schemas and memory stores; `archive`: a store's
definition as its archive holds it (`catalog.backup`)."""

from catalog.governance.namespace import archive_repo as archive
from catalog.governance.namespace.repo import bootstrap, get_metastore
from catalog.governance.namespace.routes import router, store_router

__all__ = ["archive", "bootstrap", "get_metastore", "router", "store_router"]
