"""Wire types of the agent-memory dialect (`/api/2.0/agents/memory-stores`), as the public
`databricks-agentbricks` SDK sends and reads them. Times are RFC 3339 strings."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from catalog.entries.schemas import (
    DELETE_MATCHING_FLOOR,
    MAX_QUERY,
    MAX_TOP_K,
    Contents,
    Description,
    EntryPath,
    MinScoreFloor,
    PathPrefix,
    ScoreDetails,
    SearchExplain,
    SessionId,
    SourceType,
)
from catalog.governance.namespace.schemas import MAX_PROPERTY_VALUE, Comment
from catalog.wire import Degraded, Input, Output
from catalog.wire.inputs import NO_NUL, NOT_BLANK, PrincipalName, Scope

# A store id: 3-56 lowercase letters, digits or hyphens, starting with a letter, not ending with '-'.
STORE_ID_PATTERN = r"^[a-z][a-z0-9-]{1,54}[a-z0-9]$"
ENTRY_FIELDS = (
    "actor_id",
    "path",
    "session_id",
    "content",
    "description",
    "source_type",
    "create_time",
    "update_time",
)


def field_list_pattern(names: tuple[str, ...] | list[str]) -> str:
    """A comma-separated list of `names` (spaces around them allowed), or nothing."""
    name = "(" + "|".join(sorted(names)) + ")"
    return rf"^( *{name} *(, *{name} *)*)?$"


READ_MASK_PATTERN = field_list_pattern([*ENTRY_FIELDS, "name"])
STORE_UPDATE_MASK_PATTERN = field_list_pattern(["display_name", "description"])
ENTRY_UPDATE_MASK_PATTERN = field_list_pattern(["content", "description"])

DisplayName = Annotated[str, msgspec.Meta(max_length=MAX_PROPERTY_VALUE, pattern=NO_NUL)]
Limit = Annotated[int, msgspec.Meta(ge=0, le=MAX_TOP_K, description="results (0: the default, 10)")]


class StoreCreate(Input, kw_only=True):
    # also the store id when the request names none (then it must have a store id's form)
    display_name: DisplayName | None = None
    description: Comment | None = None


class StoreUpdate(Input, kw_only=True):
    display_name: DisplayName | None = None
    description: Comment | None = None


class PrincipalRef(Input, kw_only=True):
    type: Annotated[str, msgspec.Meta(pattern=NO_NUL)] | None = None
    name: PrincipalName


class GrantRequest(Input, kw_only=True):
    principal: PrincipalRef
    permission: Literal["READ", "WRITE"] = "WRITE"


class AgentEntryCreate(Input, kw_only=True):
    actor_id: Scope
    path: EntryPath
    content: Contents | None = None
    description: Description | None = None
    session_id: SessionId | None = None
    source_type: SourceType | None = None


class EntryUpdate(Input, kw_only=True):
    content: Contents | None = None
    description: Description | None = None


class SearchBody(Input, kw_only=True):
    actor_id: Scope
    query: Annotated[str, msgspec.Meta(max_length=MAX_QUERY, pattern=NOT_BLANK)]
    limit: Limit | None = None
    page_size: Limit | None = None
    path_prefix: PathPrefix | None = None
    session_id: SessionId | None = None
    read_mask: Annotated[str, msgspec.Meta(pattern=READ_MASK_PATTERN)] | None = None
    explain: bool = False  # each hit's score_details and the request's legs (AgentSearchResult.explain)


class DeleteMatchingBody(Input, kw_only=True):
    """Forget by query: the actor's entries a search for `query` answers at or above `min_score`."""

    actor_id: Scope
    query: Annotated[str, msgspec.Meta(max_length=MAX_QUERY, pattern=NOT_BLANK)]
    min_score: MinScoreFloor = DELETE_MATCHING_FLOOR
    path_prefix: PathPrefix | None = None
    dry_run: bool = False  # name the entries that would be deleted, and delete nothing


class AgentStore(Output, kw_only=True):
    name: str
    display_name: str
    description: str | None = None
    owner_user_id: str | None = None
    create_time: str
    update_time: str


class AgentStoreList(Output, kw_only=True):
    managed_memory_stores: list[AgentStore]
    next_page_token: str | None = None


class AgentEntry(Output, kw_only=True):
    name: str
    actor_id: str
    path: str
    session_id: str | None = None
    content: str | None = None
    description: str | None = None
    source_type: str | None = None
    create_time: str | None = None
    update_time: str | None = None


class AgentEntryList(Output, kw_only=True):
    managed_memory_entries: list[AgentEntry]
    next_page_token: str | None = None


class AgentSearchHit(msgspec.Struct, omit_defaults=True, kw_only=True):
    managed_memory_entry: AgentEntry
    score: float
    score_details: ScoreDetails | None = None  # an explained search only


class AgentSearchResult(Output):
    results: list[AgentSearchHit]
    degraded: Degraded = None
    explain: SearchExplain | None = None  # an explained search only


class AgentDeleteMatchingResult(msgspec.Struct, kw_only=True):
    deleted: list[str]  # the entries' names, best match first (a dry run: that would be deleted)
    truncated: bool  # more entries matched than one request deletes: send it again
