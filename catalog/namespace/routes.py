"""Unity Catalog dialect routes for catalogs, schemas and memory stores: parse, call one service
function, shape the reply. Success is always 200 with a JSON body; a delete answers `{}`."""

from __future__ import annotations

from typing import Any

from litestar import Request, Router, delete, get, patch, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, JSONBody

from catalog.context import Context
from catalog.errors import InvalidParameter
from catalog.namespace import service
from catalog.namespace.schemas import (
    CatalogCreate,
    CatalogInfo,
    CatalogUpdate,
    ListCatalogsResponse,
    ListMemoryStoresResponse,
    ListSchemasResponse,
    MemoryStoreCreate,
    MemoryStoreInfo,
    MemoryStoreUpdate,
    MetastoreSummary,
    SchemaCreate,
    SchemaInfo,
    SchemaUpdate,
)

Req = Request[Any, Any, Any]


def parse_bool(value: str | None, field: str) -> bool:
    if value is None or value == "":
        return False
    lowered = value.lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise InvalidParameter(f"{field} must be true or false", field)


@get("/metastore_summary", operation_id="getMetastoreSummary")
async def metastore_summary(request: Req, ctx: NamedDependency[Context]) -> MetastoreSummary:
    return await service.metastore_summary(ctx, request.user)


@post("/catalogs", status_code=200, operation_id="createCatalog")
async def create_catalog(
    request: Req, ctx: NamedDependency[Context], data: JSONBody[CatalogCreate]
) -> CatalogInfo:
    return await service.create_catalog(ctx, request.user, data)


@get("/catalogs", operation_id="listCatalogs")
async def list_catalogs(
    request: Req,
    ctx: NamedDependency[Context],
    max_results: FromQuery[int | None] = None,
    page_token: FromQuery[str | None] = None,
) -> ListCatalogsResponse:
    return await service.list_catalogs(ctx, request.user, max_results, page_token)


@get("/catalogs/{name:str}", operation_id="getCatalog")
async def get_catalog(request: Req, ctx: NamedDependency[Context], name: FromPath[str]) -> CatalogInfo:
    return await service.get_catalog(ctx, request.user, name)


@patch("/catalogs/{name:str}", operation_id="updateCatalog")
async def update_catalog(
    request: Req, ctx: NamedDependency[Context], name: FromPath[str], data: JSONBody[CatalogUpdate]
) -> CatalogInfo:
    return await service.update_catalog(ctx, request.user, name, data)


@delete("/catalogs/{name:str}", status_code=200, operation_id="deleteCatalog")
async def delete_catalog(
    request: Req, ctx: NamedDependency[Context], name: FromPath[str], force: FromQuery[str | None] = None
) -> dict[str, Any]:
    await service.delete_catalog(ctx, request.user, name, parse_bool(force, "force"))
    return {}


@post("/schemas", status_code=200, operation_id="createSchema")
async def create_schema(
    request: Req, ctx: NamedDependency[Context], data: JSONBody[SchemaCreate]
) -> SchemaInfo:
    return await service.create_schema(ctx, request.user, data)


@get("/schemas", operation_id="listSchemas")
async def list_schemas(
    request: Req,
    ctx: NamedDependency[Context],
    catalog_name: FromQuery[str | None] = None,
    max_results: FromQuery[int | None] = None,
    page_token: FromQuery[str | None] = None,
) -> ListSchemasResponse:
    return await service.list_schemas(ctx, request.user, catalog_name, max_results, page_token)


@get("/schemas/{full_name:str}", operation_id="getSchema")
async def get_schema(request: Req, ctx: NamedDependency[Context], full_name: FromPath[str]) -> SchemaInfo:
    return await service.get_schema(ctx, request.user, full_name)


@patch("/schemas/{full_name:str}", operation_id="updateSchema")
async def update_schema(
    request: Req, ctx: NamedDependency[Context], full_name: FromPath[str], data: JSONBody[SchemaUpdate]
) -> SchemaInfo:
    return await service.update_schema(ctx, request.user, full_name, data)


@delete("/schemas/{full_name:str}", status_code=200, operation_id="deleteSchema")
async def delete_schema(
    request: Req, ctx: NamedDependency[Context], full_name: FromPath[str], force: FromQuery[str | None] = None
) -> dict[str, Any]:
    await service.delete_schema(ctx, request.user, full_name, parse_bool(force, "force"))
    return {}


@post("/memory-stores", status_code=200, operation_id="createMemoryStore")
async def create_store(
    request: Req, ctx: NamedDependency[Context], data: JSONBody[MemoryStoreCreate]
) -> MemoryStoreInfo:
    return await service.create_store(ctx, request.user, data)


@get("/memory-stores", operation_id="listMemoryStores")
async def list_stores(
    request: Req,
    ctx: NamedDependency[Context],
    catalog_name: FromQuery[str | None] = None,
    schema_name: FromQuery[str | None] = None,
    max_results: FromQuery[int | None] = None,
    page_token: FromQuery[str | None] = None,
) -> ListMemoryStoresResponse:
    return await service.list_stores(ctx, request.user, catalog_name, schema_name, max_results, page_token)


@get("/memory-stores/{full_name:str}", operation_id="getMemoryStore")
async def get_store(request: Req, ctx: NamedDependency[Context], full_name: FromPath[str]) -> MemoryStoreInfo:
    return await service.get_store(ctx, request.user, full_name)


@patch("/memory-stores/{full_name:str}", operation_id="updateMemoryStore")
async def update_store(
    request: Req, ctx: NamedDependency[Context], full_name: FromPath[str], data: JSONBody[MemoryStoreUpdate]
) -> MemoryStoreInfo:
    return await service.update_store(ctx, request.user, full_name, data)


@delete("/memory-stores/{full_name:str}", status_code=200, operation_id="deleteMemoryStore")
async def delete_store(
    request: Req, ctx: NamedDependency[Context], full_name: FromPath[str]
) -> dict[str, Any]:
    await service.delete_store(ctx, request.user, full_name)
    return {}


router = Router(
    path="/api/2.1/unity-catalog",
    route_handlers=[
        metastore_summary,
        create_catalog,
        list_catalogs,
        get_catalog,
        update_catalog,
        delete_catalog,
        create_schema,
        list_schemas,
        get_schema,
        update_schema,
        delete_schema,
        create_store,
        list_stores,
        get_store,
        update_store,
        delete_store,
    ],
    tags=["namespace"],
)
