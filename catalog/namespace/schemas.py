"""Wire types of the namespace API (Unity Catalog dialect). Inputs forbid unknown fields, so
`owner`, ids and timestamps can never be mass-assigned."""

from __future__ import annotations

from typing import Literal

import msgspec

MAX_COMMENT = 4096
MAX_PROPERTIES = 100
MAX_PROPERTY_KEY = 255
MAX_PROPERTY_VALUE = 4096


class _Input(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pass


class _Output(msgspec.Struct, omit_defaults=True, kw_only=True):
    pass


class CatalogCreate(_Input, kw_only=True):
    name: str
    comment: str | None = None
    properties: dict[str, str] | None = None


class CatalogUpdate(_Input, kw_only=True):
    comment: str | None = None
    properties: dict[str, str] | None = None
    owner: str | None = None


class SchemaCreate(_Input, kw_only=True):
    name: str
    catalog_name: str
    comment: str | None = None
    properties: dict[str, str] | None = None


class SchemaUpdate(_Input, kw_only=True):
    comment: str | None = None
    properties: dict[str, str] | None = None
    owner: str | None = None


ScopeBinding = Literal["caller", "end_user"]


class MemoryStoreCreate(_Input, kw_only=True):
    name: str
    catalog_name: str
    schema_name: str
    description: str | None = None
    properties: dict[str, str] | None = None
    scope_binding: ScopeBinding = "caller"
    shared_scopes: list[str] | None = None


class MemoryStoreUpdate(_Input, kw_only=True):
    description: str | None = None
    properties: dict[str, str] | None = None
    owner: str | None = None
    scope_binding: ScopeBinding | None = None
    shared_scopes: list[str] | None = None


class CatalogInfo(_Output, kw_only=True):
    name: str
    full_name: str
    id: str
    metastore_id: str
    owner: str
    properties: dict[str, str] = {}
    comment: str | None = None
    created_at: int
    created_by: str
    updated_at: int
    updated_by: str
    securable_type: str = "CATALOG"


class SchemaInfo(_Output, kw_only=True):
    name: str
    full_name: str
    catalog_name: str
    schema_id: str
    metastore_id: str
    owner: str
    properties: dict[str, str] = {}
    comment: str | None = None
    created_at: int
    created_by: str
    updated_at: int
    updated_by: str
    securable_type: str = "SCHEMA"


class MemoryStoreInfo(_Output, kw_only=True):
    name: str
    full_name: str
    catalog_name: str
    schema_name: str
    memory_store_id: str
    metastore_id: str
    owner: str
    properties: dict[str, str] = {}
    description: str | None = None
    scope_binding: str = "caller"
    shared_scopes: list[str] = []
    created_at: int
    created_by: str
    updated_at: int
    updated_by: str
    securable_type: str = "MEMORY_STORE"


class ListCatalogsResponse(_Output, kw_only=True):
    catalogs: list[CatalogInfo]
    next_page_token: str | None = None


class ListSchemasResponse(_Output, kw_only=True):
    schemas: list[SchemaInfo]
    next_page_token: str | None = None


class ListMemoryStoresResponse(_Output, kw_only=True):
    memory_stores: list[MemoryStoreInfo]
    next_page_token: str | None = None


class MetastoreSummary(_Output, kw_only=True):
    metastore_id: str
    name: str
    owner: str
    created_at: int
    global_metastore_id: str
