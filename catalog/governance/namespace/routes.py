"""Unity Catalog dialect routes for catalogs, schemas and memory stores: parse, call one service
function, shape the reply. Success is always 200 with a JSON body; a delete answers `{}`."""

from __future__ import annotations

from typing import Annotated

from litestar import delete, get, patch, post, put
from litestar.params import JSONBody, Parameter

from catalog.access.trust import TrustPolicy
from catalog.governance.namespace import service
from catalog.governance.namespace.schemas import (
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
    TrustPolicyInfo,
    TrustTest,
    TrustVerdict,
)
from catalog.web import routing
from catalog.web.deps import Ctx, Req
from catalog.web.openapi import Empty, errors
from catalog.wire.names import (
    MAX_FULL_NAME,
    NAME_PATTERN,
    SCHEMA_FULL_NAME_PATTERN,
    STORE_FULL_NAME_PATTERN,
)
from catalog.wire.pagination import MaxResults, PageToken

NameParam = Annotated[
    str, Parameter(pattern=NAME_PATTERN, max_length=255, description="letters, digits, '_', '-'")
]
SchemaFullName = Annotated[
    str, Parameter(pattern=SCHEMA_FULL_NAME_PATTERN, max_length=MAX_FULL_NAME, description="catalog.schema")
]
StoreFullName = Annotated[
    str,
    Parameter(pattern=STORE_FULL_NAME_PATTERN, max_length=MAX_FULL_NAME, description="catalog.schema.store"),
]
Force = Annotated[bool, Parameter(description="delete even when it is not empty (with everything in it)")]


@get("/metastore_summary", operation_id="getMetastoreSummary", responses=errors())
async def metastore_summary(request: Req, ctx: Ctx) -> MetastoreSummary:
    return await service.metastore_summary(ctx, request.user)


@post("/catalogs", status_code=200, operation_id="createCatalog", responses=errors(409, 413))
async def create_catalog(request: Req, ctx: Ctx, data: JSONBody[CatalogCreate]) -> CatalogInfo:
    return await service.create_catalog(ctx, request.user, data)


@get("/catalogs", operation_id="listCatalogs", responses=errors())
async def list_catalogs(
    request: Req, ctx: Ctx, max_results: MaxResults = None, page_token: PageToken = None
) -> ListCatalogsResponse:
    return await service.list_catalogs(ctx, request.user, max_results, page_token)


@get("/catalogs/{name:str}", operation_id="getCatalog", responses=errors(404))
async def get_catalog(request: Req, ctx: Ctx, name: NameParam) -> CatalogInfo:
    return await service.get_catalog(ctx, request.user, name)


@patch("/catalogs/{name:str}", operation_id="updateCatalog", responses=errors(404, 409, 413))
async def update_catalog(
    request: Req, ctx: Ctx, name: NameParam, data: JSONBody[CatalogUpdate]
) -> CatalogInfo:
    return await service.update_catalog(ctx, request.user, name, data)


@delete("/catalogs/{name:str}", status_code=200, operation_id="deleteCatalog", responses=errors(404, 409))
async def delete_catalog(request: Req, ctx: Ctx, name: NameParam, force: Force = False) -> Empty:
    await service.delete_catalog(ctx, request.user, name, force)
    return Empty()


@post("/schemas", status_code=200, operation_id="createSchema", responses=errors(404, 409, 413))
async def create_schema(request: Req, ctx: Ctx, data: JSONBody[SchemaCreate]) -> SchemaInfo:
    return await service.create_schema(ctx, request.user, data)


@get("/schemas", operation_id="listSchemas", responses=errors(404))
async def list_schemas(
    request: Req,
    ctx: Ctx,
    catalog_name: NameParam,
    max_results: MaxResults = None,
    page_token: PageToken = None,
) -> ListSchemasResponse:
    return await service.list_schemas(ctx, request.user, catalog_name, max_results, page_token)


@get("/schemas/{full_name:str}", operation_id="getSchema", responses=errors(404))
async def get_schema(request: Req, ctx: Ctx, full_name: SchemaFullName) -> SchemaInfo:
    return await service.get_schema(ctx, request.user, full_name)


@patch("/schemas/{full_name:str}", operation_id="updateSchema", responses=errors(404, 409, 413))
async def update_schema(
    request: Req, ctx: Ctx, full_name: SchemaFullName, data: JSONBody[SchemaUpdate]
) -> SchemaInfo:
    return await service.update_schema(ctx, request.user, full_name, data)


@delete("/schemas/{full_name:str}", status_code=200, operation_id="deleteSchema", responses=errors(404, 409))
async def delete_schema(request: Req, ctx: Ctx, full_name: SchemaFullName, force: Force = False) -> Empty:
    await service.delete_schema(ctx, request.user, full_name, force)
    return Empty()


@post("/memory-stores", status_code=200, operation_id="createMemoryStore", responses=errors(404, 409, 413))
async def create_store(request: Req, ctx: Ctx, data: JSONBody[MemoryStoreCreate]) -> MemoryStoreInfo:
    return await service.create_store(ctx, request.user, data)


@get("/memory-stores", operation_id="listMemoryStores", responses=errors(404))
async def list_stores(
    request: Req,
    ctx: Ctx,
    catalog_name: NameParam,
    schema_name: NameParam,
    max_results: MaxResults = None,
    page_token: PageToken = None,
) -> ListMemoryStoresResponse:
    return await service.list_stores(ctx, request.user, catalog_name, schema_name, max_results, page_token)


@get("/{full_name:str}", operation_id="getMemoryStore", responses=errors(404))
async def get_store(request: Req, ctx: Ctx, full_name: StoreFullName) -> MemoryStoreInfo:
    return await service.get_store(ctx, request.user, full_name)


@patch("/{full_name:str}", operation_id="updateMemoryStore", responses=errors(404, 409, 413))
async def update_store(
    request: Req, ctx: Ctx, full_name: StoreFullName, data: JSONBody[MemoryStoreUpdate]
) -> MemoryStoreInfo:
    return await service.update_store(ctx, request.user, full_name, data)


@delete(
    "/{full_name:str}",
    status_code=200,
    operation_id="deleteMemoryStore",
    responses=errors(404, 409),
)
async def delete_store(request: Req, ctx: Ctx, full_name: StoreFullName) -> Empty:
    await service.delete_store(ctx, request.user, full_name)
    return Empty()


@get("/{full_name:str}/trust-policy", operation_id="getTrustPolicy", responses=errors(404))
async def get_trust_policy(request: Req, ctx: Ctx, full_name: StoreFullName) -> TrustPolicyInfo:
    """The store's trust policy and the screen's rules in effect (any privilege on the store)."""
    return await service.get_trust_policy(ctx, request.user, full_name)


@put("/{full_name:str}/trust-policy", operation_id="setTrustPolicy", responses=errors(404))
async def set_trust_policy(
    request: Req, ctx: Ctx, full_name: StoreFullName, data: JSONBody[TrustPolicy]
) -> TrustPolicyInfo:
    """Set the store's trust policy (MANAGE): which sources' writes are trusted, screened or always
    held for review, and the screen's own rules."""
    return await service.set_trust_policy(ctx, request.user, full_name, data)


@delete(
    "/{full_name:str}/trust-policy",
    status_code=200,
    operation_id="deleteTrustPolicy",
    responses=errors(404),
)
async def delete_trust_policy(request: Req, ctx: Ctx, full_name: StoreFullName) -> TrustPolicyInfo:
    """Remove the store's trust policy (MANAGE): nothing more is held; what is held stays held
    until reviewed."""
    return await service.set_trust_policy(ctx, request.user, full_name, None)


@post(
    "/{full_name:str}/trust-policy:test",
    status_code=200,
    operation_id="testTrustPolicy",
    responses=errors(404, 413),
)
async def try_trust_policy(
    request: Req, ctx: Ctx, full_name: StoreFullName, data: JSONBody[TrustTest]
) -> TrustVerdict:
    """How a write of the text from a source would be judged (nothing is written)."""
    return await service.try_trust_policy(ctx, request.user, full_name, data)


router = routing.router(
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
    ],
    tags=["namespace"],
)
# the routes of one memory store: a missing one is NOT_FOUND there (catalog.errors.NotFound)
store_router = routing.router(
    path="/api/2.1/unity-catalog/memory-stores",
    route_handlers=[
        get_store,
        update_store,
        delete_store,
        get_trust_policy,
        set_trust_policy,
        delete_trust_policy,
        try_trust_policy,
    ],
    tags=["namespace"],
    memory_store=True,
)
