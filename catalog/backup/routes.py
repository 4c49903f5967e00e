"""`GET .../memory-stores/{name}/export` (the store's archive, streamed as JSON lines) and
`POST .../memory-stores/{name}/import` (an archive as the body, restored into the store).

The import's body is an archive, not a JSON body: it is read here, up to
`CATALOG_IMPORT_MAX_BYTES` (Litestar's own body limit, `max_body_bytes`, does not apply to this
route), and handed to the service whole."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from litestar import get, post
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import OpenAPIMediaType, Operation, RequestBody, Schema
from litestar.params import QueryParameter
from litestar.response import Stream

from catalog.backup import service
from catalog.backup.schemas import FORMAT, MEDIA_TYPE, VERSION, ImportResult
from catalog.errors import PayloadTooLarge
from catalog.web import routing
from catalog.web.deps import Ctx, Req
from catalog.web.openapi import errors
from catalog.wire.entry_keys import SCOPE_SCHEMA, StoreFullNameParam

ScopeFilter = Annotated[
    str | None,
    QueryParameter(
        name="scope",
        description="export only this scope's entries, history, conversations, sessions and lineage "
        "(the store's definition and grants come whole)",
        schema_extra=SCOPE_SCHEMA,
    ),
]
_ARCHIVE = Schema(  # type: ignore[call-arg]
    type="string",  # type: ignore[arg-type]
    description=f"an archive of version {VERSION} of {FORMAT}: JSON lines, a header first and a "
    "manifest last (docs/operations/backup.md)",
)


@dataclass
class _ImportOperation(Operation):
    """The import's operation in the OpenAPI document: its body is an archive (read by the route
    itself, so Litestar cannot describe it)."""

    def __post_init__(self) -> None:
        self.request_body = RequestBody(
            content={MEDIA_TYPE: OpenAPIMediaType(schema=_ARCHIVE)},
            required=True,
            description="the archive, as `catalog export` (or the export route) wrote it",
        )


@get(
    "/{full_name:str}/export",
    operation_id="exportMemoryStore",
    media_type=MEDIA_TYPE,
    responses={
        200: ResponseSpec(
            data_container=str,
            description="the archive (JSON lines), streamed; it ends with its manifest line",
            media_type=MEDIA_TYPE,
            generate_examples=False,
        ),
        **errors(404),
    },
)
async def export_store(
    request: Req, ctx: Ctx, full_name: StoreFullNameParam, only_scope: ScopeFilter = None
) -> Stream:
    """The store's archive: its definition, grants, entries with history and vectors,
    conversations, sessions and lineage, as of one instant."""
    chunks = await service.export(ctx, request.user, full_name, only_scope)
    name = full_name.replace('"', "")
    return Stream(
        chunks,
        media_type=MEDIA_TYPE,
        headers={"Content-Disposition": f'attachment; filename="{name}.jsonl"'},
    )


@post(
    "/{full_name:str}/import",
    status_code=200,
    operation_id="importMemoryStore",
    request_max_body_size=None,  # the archive's own limit applies (CATALOG_IMPORT_MAX_BYTES)
    operation_class=_ImportOperation,
    responses=errors(404, 409, 413),
)
async def import_store(request: Req, ctx: Ctx, full_name: StoreFullNameParam) -> ImportResult:
    """Restore an archive into this store: an existing store that holds nothing, or a new one."""
    into = await service.import_target(ctx, request.user, full_name)  # before the body is read
    limit = ctx.settings.import_max_body_bytes
    declared = request.headers.get("content-length", "")
    if limit and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(
            f"an archive may be at most {limit} bytes (CATALOG_IMPORT_MAX_BYTES)", "archive"
        )
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if limit and len(body) > limit:
            raise PayloadTooLarge(
                f"an archive may be at most {limit} bytes (CATALOG_IMPORT_MAX_BYTES)", "archive"
            )
    return await service.import_archive(ctx, request.user, into, bytes(body))


router = routing.router(
    path="/api/2.1/unity-catalog/memory-stores",
    route_handlers=[export_store, import_store],
    tags=["namespace"],
    memory_store=True,
)
