"""What the server answers, as typed values (msgspec Structs).

They mirror the server's JSON (docs/reference/api/): times are epoch milliseconds, names are as the
server stores them (lowercase). Fields the server leaves out (it omits empty and default values)
take the defaults here, and fields this client does not know yet are ignored, so a newer server
does not break an older client.
"""

from __future__ import annotations

from typing import Any

import msgspec


class _Answer(msgspec.Struct, kw_only=True):
    pass


class MetastoreSummary(_Answer, kw_only=True):
    metastore_id: str
    name: str = ""
    owner: str = ""
    created_at: int = 0
    global_metastore_id: str = ""


class Catalog(_Answer, kw_only=True):
    name: str
    full_name: str
    owner: str = ""
    comment: str | None = None
    properties: dict[str, str] = {}
    id: str = ""
    metastore_id: str = ""
    created_at: int = 0
    created_by: str = ""
    updated_at: int = 0
    updated_by: str = ""


class Schema(_Answer, kw_only=True):
    name: str
    full_name: str
    catalog_name: str
    owner: str = ""
    comment: str | None = None
    properties: dict[str, str] = {}
    schema_id: str = ""
    metastore_id: str = ""
    created_at: int = 0
    created_by: str = ""
    updated_at: int = 0
    updated_by: str = ""


class MemoryStore(_Answer, kw_only=True):
    name: str
    full_name: str
    catalog_name: str
    schema_name: str
    owner: str = ""
    description: str | None = None
    properties: dict[str, str] = {}
    scope_binding: str = "caller"  # or "end_user"
    shared_scopes: list[str] = []
    legal_hold: bool = False
    default_ttl_seconds: int | None = None
    memory_store_id: str = ""
    metastore_id: str = ""
    created_at: int = 0
    created_by: str = ""
    updated_at: int = 0
    updated_by: str = ""


class PrivilegeAssignment(_Answer, kw_only=True):
    """The privileges granted to one principal (a token subject or a group) on one object.
    `scopes` holds the patterns of the privileges granted only in some scopes
    (`{"READ_MEMORY_STORE": ["team-a", "team-a:*"]}`); a privilege not in it holds in every scope."""

    principal: str
    privileges: list[str] = []
    scopes: dict[str, list[str]] = {}


class EffectivePrivilege(_Answer, kw_only=True):
    privilege: str
    # where it comes from: the object itself (None) or a parent (CATALOG / SCHEMA / METASTORE)
    inherited_from_type: str | None = None
    inherited_from_name: str | None = None
    # held only in the scopes these patterns match (a grant limited to scopes); None: every scope
    scopes: list[str] | None = None


class EffectivePrivilegeAssignment(_Answer, kw_only=True):
    principal: str  # the principal asked about, or the group the privileges come through
    privileges: list[EffectivePrivilege] = []


class GroupMember(_Answer, kw_only=True):
    value: str  # a principal's name, or a group's id
    display: str | None = None
    type: str | None = None  # User or Group


class Group(_Answer, kw_only=True, rename={"display_name": "displayName"}):
    """A group (SCIM): grant privileges to it by its name, `display_name`."""

    id: str
    display_name: str
    members: list[GroupMember] = []


class Entry(_Answer, kw_only=True):
    """One memory entry. `contents` and `description` are absent for a caller that may write
    but not read the store; `etag` is the version to send back as a precondition."""

    scope: str
    path: str
    etag: str
    session_id: str | None = None
    contents: str | None = None
    description: str | None = None
    source_type: str | None = None
    creation_reason: str | None = None
    creation_source: str | None = None
    metadata: dict[str, Any] | None = None
    expires_at: int | None = None  # epoch ms; None: never
    created_at: int = 0
    created_by: str = ""
    updated_at: int = 0
    updated_by: str = ""
    imported_by: str | None = None  # who imported it from an archive (its authors are the archive's)
    state: str = "active"  # superseded, merged, or quarantined (held for review)
    # where its text came from: principal, on_behalf_of, via, model, class, source, trust, review
    provenance: dict[str, Any] | None = None


class EntrySummary(_Answer, kw_only=True):
    """An entry as lists show it: no contents, only whether it has any."""

    path: str
    description: str | None = None
    has_contents: bool = False
    session_id: str | None = None
    updated_at: int = 0
    scope: str | None = None  # set when a list reads several scopes
    metadata: dict[str, Any] | None = None
    state: str = "active"
    provenance: dict[str, Any] | None = None


class SearchHit(_Answer, kw_only=True):
    entry: Entry = msgspec.field(name="memory_entry")
    score: float


class SearchHits(list[SearchHit]):
    """A search's hits, best first. `degraded` names the search legs that may have missed rows
    (`keyword`: the full-text index is failing or behind; `semantic`: some rows have no vector
    yet); None when the answer is complete."""

    degraded: list[str] | None = None

    @classmethod
    def of(cls, hits: list[SearchHit], degraded: list[str] | None) -> SearchHits:
        answer = cls(hits)
        answer.degraded = degraded
        return answer


class DeletedEntry(_Answer, kw_only=True):
    """An entry a delete by query deleted (or, in a dry run, would delete)."""

    scope: str
    path: str
    session_id: str | None = None


class DeletedMatching(_Answer, kw_only=True):
    """What `Store.delete_matching` answers: the entries, best match first, and whether more
    matched than one call deletes (`truncated`: call it again)."""

    deleted: list[DeletedEntry] = []
    truncated: bool = False


class EntryVersion(_Answer, kw_only=True):
    etag: str  # what `restore` takes
    operation: str  # create | update | restore | delete
    contents: str | None = None
    description: str | None = None
    metadata: dict[str, Any] | None = None
    updated_at: int = 0
    updated_by: str = ""
    imported_by: str | None = None  # who imported this version from an archive
    state: str = "active"  # its state then
    provenance: dict[str, Any] | None = None  # where its text (or the deletion) came from
    withheld: bool = False  # held for review: its text is answered only to managers and its author


class AuditEvent(_Answer, kw_only=True):
    seq: int
    event_id: str = ""
    event_time: int = 0  # epoch ms
    request_id: str = ""
    principal: str | None = None
    on_behalf_of: str | None = None
    source_ip: str | None = None
    user_agent: str | None = None
    service_name: str = ""
    action_name: str = ""
    securable_type: str | None = None
    securable_full_name: str | None = None
    securable_id: str | None = None
    privilege: str | None = None
    decision: str = ""  # allow | deny | unauthenticated
    reason: str | None = None
    status_code: int | None = None
    error_code: str | None = None
    request_params: dict[str, Any] = {}
    result_count: int | None = None
    policy_revision: int | None = None
    prev_hash: str = ""
    hash: str = ""


class AuditVerification(_Answer, kw_only=True):
    ok: bool
    checked: int
    first_broken_seq: int | None = None


class LineageEnd(_Answer, kw_only=True):
    memory_store: str | None
    scope: str
    path: str
    session_id: str | None = None
    deleted: bool = False


class LineageEdge(_Answer, kw_only=True):
    source: LineageEnd
    target: LineageEnd
    depth: int


class TranscriptEnd(_Answer, kw_only=True):
    kind: str  # conversation | session
    memory_store: str | None
    scope: str
    conversation_id: str | None = None
    session_id: str | None = None
    item_ids: list[str] = []
    deleted: bool = False


class OriginEdge(_Answer, kw_only=True):
    source: TranscriptEnd
    target: LineageEnd
    depth: int


class Lineage(_Answer, kw_only=True):
    securable_full_name: str
    direction: str
    edges: list[LineageEdge] = []  # entry to entry
    origins: list[OriginEdge] = []  # conversation or session to entry
