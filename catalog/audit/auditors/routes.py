"""Auditor routes, base `/api/2.1/unity-catalog/system`."""

from __future__ import annotations

from typing import Annotated, Literal

from litestar import get
from litestar.params import FromQuery, Parameter, QueryParameter

from catalog.audit.auditors import service
from catalog.lineage import service as lineage_service
from catalog.lineage.schemas import Direction, Lineage, OpenLineageEvents
from catalog.web import routing
from catalog.web.deps import Ctx, Req
from catalog.web.openapi import errors
from catalog.wire.entry_keys import MAX_PATH, PATH_PATTERN, SCOPE_SCHEMA, ScopeParam
from catalog.wire.entry_keys import SessionParam as SessionId
from catalog.wire.entry_keys import StoreFullNameParam as StoreFullName
from catalog.wire.inputs import NO_NUL, integer
from catalog.wire.pagination import PageSize, PageToken

ViaParam = Literal[
    "rest", "agents", "console", "mcp", "responses", "extraction", "pipeline", "maintenance", "import"
]
EpochMs = Annotated[
    int | None,
    integer(0, lineage_service.MAX_EPOCH_MS, "epoch milliseconds (start inclusive, end exclusive)"),
]


@get("/audit", operation_id="listAuditEvents", responses=errors())
async def list_audit(
    request: Req,
    ctx: Ctx,
    start_time: EpochMs = None,
    end_time: EpochMs = None,
    principal: Annotated[
        str | None, Parameter(pattern=NO_NUL, description="events of this principal")
    ] = None,
    action_name: Annotated[str | None, Parameter(pattern=NO_NUL, description="e.g. entries.write")] = None,
    securable_full_name: Annotated[
        str | None, Parameter(pattern=NO_NUL, description="events on this object")
    ] = None,
    decision: FromQuery[service.Decision | None] = None,
    status_code: Annotated[int | None, integer(100, 599, "the answer's status")] = None,
    order: Annotated[
        Literal["asc", "desc"] | None, Parameter(description="by seq; newest first by default")
    ] = None,
    page_size: PageSize = None,
    page_token: PageToken = None,
    event_scope: Annotated[
        str | None,
        QueryParameter(
            name="scope",
            description="events naming this scope (held as pseudonyms: found until its subject is erased)",
            schema_extra=SCOPE_SCHEMA,
        ),
    ] = None,
) -> service.AuditEvents:
    return await service.list_events(
        ctx,
        request.user,
        start_time=start_time,
        end_time=end_time,
        who=principal,
        action_name=action_name,
        securable_full_name=securable_full_name,
        decision=decision,
        status_code=status_code,
        order=order,
        size=page_size,
        page_token=page_token,
        scope=event_scope,
    )


@get("/audit:verify", operation_id="verifyAuditEvents", responses=errors())
async def verify_audit(request: Req, ctx: Ctx) -> service.VerifyResult:
    return await service.verify_events(ctx, request.user)


@get("/lineage", operation_id="getLineage", responses=errors(404))
async def get_lineage(
    request: Req,
    ctx: Ctx,
    securable_full_name: StoreFullName,
    direction: Annotated[
        Direction | None, Parameter(description="upstream (the default) or downstream")
    ] = None,
    entry_scope: ScopeParam = None,
    path: Annotated[
        str | None,
        Parameter(pattern=PATH_PATTERN, max_length=MAX_PATH, description="one entry's lineage (with scope)"),
    ] = None,
    session_id: SessionId = None,
    depth: Annotated[
        int | None,
        integer(1, lineage_service.MAX_DEPTH, "hops to follow (default 5)"),
    ] = None,
) -> Lineage:
    return await lineage_service.lineage(
        ctx, request.user, securable_full_name, direction, entry_scope, path, session_id, depth
    )


@get("/lineage/openlineage", operation_id="exportOpenLineage", responses=errors())
async def export_openlineage(
    request: Req,
    ctx: Ctx,
    start_time: EpochMs = None,
    end_time: EpochMs = None,
    page_size: PageSize = None,
) -> OpenLineageEvents:
    return await lineage_service.openlineage_events(ctx, request.user, start_time, end_time, page_size)


@get("/provenance", operation_id="listProvenance", responses=errors(404))
async def list_provenance(
    request: Req,
    ctx: Ctx,
    securable_full_name: StoreFullName,
    entry_scope: ScopeParam = None,
    path: Annotated[
        str | None,
        Parameter(pattern=PATH_PATTERN, max_length=MAX_PATH, description="one entry's versions (with scope)"),
    ] = None,
    session_id: SessionId = None,
    via: FromQuery[ViaParam | None] = None,
    source_class: Annotated[
        service.ProvenanceClass | None,
        QueryParameter(name="class", description="person, application, model or unknown"),
    ] = None,
    principal: Annotated[
        str | None, Parameter(pattern=NO_NUL, max_length=255, description="versions this principal wrote")
    ] = None,
    version_state: Annotated[
        service.VersionState | None,
        QueryParameter(name="state", description="versions in this state then (quarantined: held)"),
    ] = None,
    page_size: PageSize = None,
    page_token: PageToken = None,
) -> service.ProvenanceRecords:
    """Where each kept version of a store's entries came from (who, through what, from what, with
    which model, what the trust policy decided and a review's decision), newest first, without
    their text. READ_AUDIT on the metastore."""
    return await service.provenance(
        ctx,
        request.user,
        securable_full_name,
        scope=entry_scope,
        path=path,
        session_id=session_id,
        via=via,
        source_class=source_class,
        who=principal,
        state=version_state,
        size=page_size,
        page_token=page_token,
    )


router = routing.router(
    path="/api/2.1/unity-catalog/system",
    route_handlers=[list_audit, verify_audit, get_lineage, export_openlineage, list_provenance],
    tags=["audit"],
)
