"""Memory pipeline routes of the agent dialect, base `/api/2.0/agents/memory-pipelines`: what the
AgentKit transport's `*_memory_pipeline*` calls (and `agentbricks memory pipeline`) send."""

from __future__ import annotations

from typing import Annotated

from litestar import delete, get, patch, post
from litestar.params import JSONBody, Parameter

from catalog.dialects.pipelines import service
from catalog.dialects.pipelines.schemas import (
    UPDATE_FIELDS,
    UPDATE_MASK_PATTERN,
    MemoryPipeline,
    MemoryPipelineList,
    PipelineCreate,
    PipelineRun,
    PipelineRunList,
    PipelineUpdate,
    RunRequest,
)
from catalog.web import routing
from catalog.web.deps import Ctx, Req
from catalog.web.openapi import Empty, errors
from catalog.wire.inputs import integer
from catalog.wire.pagination import PageToken

# a malformed id names no pipeline (or run): 404, like a missing one
PipelineId = Annotated[str, Parameter(schema_extra={"format": "uuid"}, description="the pipeline's id")]
RunId = Annotated[str, Parameter(description="the run's number within its pipeline (1, 2, ...)")]
PageSize = Annotated[int | None, integer(0, service.MAX_PAGE, f"page size (0 or absent: {service.MAX_PAGE})")]


@post("/", status_code=200, operation_id="agentsCreateMemoryPipeline", responses=errors(404, 409))
async def create_pipeline(request: Req, ctx: Ctx, data: JSONBody[PipelineCreate]) -> MemoryPipeline:
    return await service.create(ctx, request.user, data)


@get("/", operation_id="agentsListMemoryPipelines", responses=errors())
async def list_pipelines(
    request: Req, ctx: Ctx, page_size: PageSize = None, page_token: PageToken = None
) -> MemoryPipelineList:
    return await service.list_pipelines(ctx, request.user, page_size, page_token)


@get("/{pipeline_id:str}", operation_id="agentsGetMemoryPipeline", responses=errors(404))
async def get_pipeline(request: Req, ctx: Ctx, pipeline_id: PipelineId) -> MemoryPipeline:
    return await service.get(ctx, request.user, pipeline_id)


@patch("/{pipeline_id:str}", operation_id="agentsUpdateMemoryPipeline", responses=errors(404, 409))
async def update_pipeline(
    request: Req,
    ctx: Ctx,
    pipeline_id: PipelineId,
    data: JSONBody[PipelineUpdate],
    update_mask: Annotated[
        str | None,
        Parameter(
            pattern=UPDATE_MASK_PATTERN,
            description=f"comma-separated, of {', '.join(UPDATE_FIELDS)} (absent: the fields the body sets)",
        ),
    ] = None,
) -> MemoryPipeline:
    return await service.update(ctx, request.user, pipeline_id, update_mask, data)


@delete(
    "/{pipeline_id:str}", status_code=200, operation_id="agentsDeleteMemoryPipeline", responses=errors(404)
)
async def delete_pipeline(request: Req, ctx: Ctx, pipeline_id: PipelineId) -> Empty:
    await service.delete(ctx, request.user, pipeline_id)
    return Empty()


@post(
    "/{pipeline_id:str}/run",
    status_code=200,
    operation_id="agentsRunMemoryPipeline",
    responses=errors(404, 409, 501),
    description="Start a run (answered PENDING; a worker does it). 409 ABORTED naming the active run "
    "while one is PENDING or RUNNING",
)
async def run_pipeline(
    request: Req, ctx: Ctx, pipeline_id: PipelineId, data: JSONBody[RunRequest]
) -> PipelineRun:
    return await service.run(ctx, request.user, pipeline_id, data)


@get("/{pipeline_id:str}/runs", operation_id="agentsListMemoryPipelineRuns", responses=errors(404))
async def list_runs(
    request: Req, ctx: Ctx, pipeline_id: PipelineId, page_size: PageSize = None, page_token: PageToken = None
) -> PipelineRunList:
    return await service.list_runs(ctx, request.user, pipeline_id, page_size, page_token)


@get("/{pipeline_id:str}/runs/{run_id:str}", operation_id="agentsGetMemoryPipelineRun", responses=errors(404))
async def get_run(request: Req, ctx: Ctx, pipeline_id: PipelineId, run_id: RunId) -> PipelineRun:
    return await service.get_run(ctx, request.user, pipeline_id, run_id)


# a missing pipeline, run or store is NOT_FOUND here, as on the memory-store routes of this dialect
router = routing.router(
    path="/api/2.0/agents/memory-pipelines",
    route_handlers=[
        create_pipeline,
        list_pipelines,
        get_pipeline,
        update_pipeline,
        delete_pipeline,
        run_pipeline,
        list_runs,
        get_run,
    ],
    tags=["agents"],
    memory_store=True,
)
