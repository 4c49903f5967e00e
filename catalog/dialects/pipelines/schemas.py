"""Wire types of `/api/2.0/agents/memory-pipelines`, as the AgentKit transport
(`databricks_agentkit._api_client`: `create_memory_pipeline`, `update_memory_pipeline`, ...) and
the `agentbricks memory pipeline` commands send and read them. Times are RFC 3339 strings."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from catalog.dialects.agents.schemas import STORE_ID_PATTERN, field_list_pattern
from catalog.dialects.extraction.schemas import MAX_INSTRUCTIONS
from catalog.dialects.sessions.schemas import STORE_NAME_PATTERN
from catalog.governance.namespace.schemas import MAX_PROPERTY_VALUE
from catalog.wire import Input, Output
from catalog.wire.inputs import NO_CONTROL, NO_NUL

MAX_MODEL = 256
# the trigger values: TRIGGER_UNSPECIFIED is kept as MANUAL_ONLY
Trigger = Literal["MANUAL_ONLY", "SCHEDULED", "TRIGGER_UNSPECIFIED"]
RunState = Literal["PENDING", "RUNNING", "SUCCEEDED", "FAILED"]
UPDATE_FIELDS = (
    "display_name",
    "dreamer_policy",
    "dreamer_policy.model",
    "dreamer_policy.instructions",
    "dreamer_policy.trigger",
    "dreamer_policy.maintain",
)
UPDATE_MASK_PATTERN = field_list_pattern([name.replace(".", "[.]") for name in UPDATE_FIELDS])
PIPELINE_ID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
RUN_ID_PATTERN = r"^[0-9]{1,18}$"

SessionStoreRef = Annotated[
    str,
    msgspec.Meta(
        pattern=STORE_NAME_PATTERN.replace("^", "^(session-stores/)?", 1),
        description="the session store: `session-stores/{name}` or `{name}`",
    ),
]
MemoryStoreRef = Annotated[
    str,
    msgspec.Meta(
        pattern=STORE_ID_PATTERN.replace("^", "^(memory-stores/)?", 1),
        description="the memory store: `memory-stores/{id}` or `{id}`",
    ),
]
DisplayName = Annotated[str, msgspec.Meta(max_length=MAX_PROPERTY_VALUE, pattern=NO_NUL)]
Model = Annotated[
    str,
    msgspec.Meta(
        max_length=MAX_MODEL,
        pattern=NO_CONTROL,
        description="the model the upstream server is asked for (empty: the server's default); "
        "CATALOG_LLM_MODEL, when set, takes precedence",
    ),
]
Instructions = Annotated[str, msgspec.Meta(max_length=MAX_INSTRUCTIONS, pattern=NO_NUL)]


class DreamerPolicyInput(Input, kw_only=True):
    model: Model | None = None
    instructions: Instructions | None = None
    trigger: Trigger | None = None
    # after the sessions, the model reviews the memories of their scopes: merges, splits, supersedes
    maintain: bool | None = None


class PipelineCreate(Input, kw_only=True):
    display_name: DisplayName | None = None
    session_store: SessionStoreRef
    memory_store: MemoryStoreRef
    dreamer_policy: DreamerPolicyInput | None = None


class PipelineUpdate(Input, kw_only=True):
    name: Annotated[str, msgspec.Meta(max_length=128, pattern=NO_NUL)] | None = None  # the SDK repeats it
    display_name: DisplayName | None = None
    dreamer_policy: DreamerPolicyInput | None = None
    etag: Annotated[str, msgspec.Meta(max_length=32, pattern=NO_NUL)] | None = None  # stale: 409 ABORTED


class RunRequest(Input, kw_only=True):
    """`POST .../run` takes an empty object (what the SDK sends), or asks for the maintenance step
    (`maintain`, else as the pipeline says) and for it to only report what it would do
    (`dry_run`)."""

    maintain: bool | None = None
    dry_run: bool = False


class DreamerPolicy(Output, kw_only=True):
    model: str | None = None
    instructions: str | None = None
    trigger: Literal["MANUAL_ONLY", "SCHEDULED"]
    enabled: bool  # scheduled runs are on: the trigger is SCHEDULED
    maintain: bool = False  # each run ends with the maintenance step (absent: it does not)


class MemoryPipeline(Output, kw_only=True):
    name: str  # memory-pipelines/{id}
    display_name: str | None = None
    session_store: str  # session-stores/{name}
    memory_store: str  # memory-stores/{id}
    dreamer_policy: DreamerPolicy
    etag: str
    creator: str  # the owner: runs act as this principal
    # who last changed what it does (model, instructions, trigger, maintenance): its runs never do
    # what this principal could not; absent while only the creator has
    configured_by: str | None = None
    create_time: str
    update_time: str


class MemoryPipelineList(Output, kw_only=True):
    memory_pipelines: list[MemoryPipeline]
    next_page_token: str | None = None


class PipelineRun(Output, kw_only=True):
    name: str  # memory-pipelines/{id}/runs/{n}
    state: RunState
    trigger: Literal["MANUAL", "SCHEDULED"]  # asked for, or started by the schedule
    requested_by: str | None = None  # who asked for it (absent: the schedule started it)
    error: str | None = None  # why the run failed (FAILED only)
    create_time: str
    start_time: str | None = None
    end_time: str | None = None
    sessions_total: int
    sessions_extracted: int
    sessions_skipped: int  # unchanged since their last extraction into the memory store
    sessions_failed: int
    entries_written: int
    maintain: bool = False  # the run ends with the maintenance step
    maintenance: Maintenance | None = None  # what the step did (or would do), once done


class MaintenanceAction(Output, kw_only=True):
    """One change of the maintenance step: `merged` (sources into `into`), `split` (`sources[0]`
    into `written`), `superseded` (`sources[0]` by `into`)."""

    action: Literal["merged", "split", "superseded"]
    scope: str
    sources: list[str]  # paths
    into: str | None = None  # the entry replacing them (merged, superseded)
    written: list[str] = []  # the paths written (merged: `into`; split: the parts)


class Maintenance(Output, kw_only=True):
    dry_run: bool  # nothing was written: the actions are what it would do
    held: bool = False  # the memory store is under legal hold: left alone
    scopes_reviewed: int
    merged: int  # entries merged into another
    split: int  # entries split into parts
    superseded: int  # entries superseded by another
    actions: list[MaintenanceAction]
    failed_scopes: int = 0  # scopes whose review failed (the upstream model, a refusal)
    error: str | None = None  # the first failure
    # held to the reader's scopes (READ limited to some): the actions in other scopes are left out,
    # the counts are those of the actions shown, and no failure is named
    partial: bool = False


class PipelineRunList(Output, kw_only=True):
    pipeline_runs: list[PipelineRun]
    next_page_token: str | None = None
