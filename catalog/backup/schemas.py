"""The archive of one store (JSON lines) and the wire type of an import's answer.

An archive is one JSON object per line, each with its `kind`, in this order (docs/operations/
backup.md describes every field):

    header            format, version, server version, embedding model, store, scope filter
    store             the store's definition
    grant*            its grants
    entry*            its entries (with metadata, expiry, and the vector with its model's id)
    entry_version*    their history, oldest first
    conversation*     its conversations ...
    conversation_item*  ... and their items
    session*          its sessions (a session store) ...
    session_item*     ... and their items
    transcript*       the vectors of conversation and session items (their text is rebuilt)
    lineage*          entry-to-entry edges into its entries
    origin*           transcript-to-entry edges into its entries
    manifest          counts per kind and the sha256 of every line before it

The lines are inputs like any request body: every kind forbids unknown fields.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

from catalog.access.trust import TrustPolicy
from catalog.wire import Output

FORMAT = "memory-catalog-store-archive"
VERSION = 1
MEDIA_TYPE = "application/x-ndjson"

# the kinds in the order an archive holds them (header first, manifest last)
ORDER = (
    "header",
    "store",
    "grant",
    "entry",
    "entry_version",
    "conversation",
    "conversation_item",
    "session",
    "session_item",
    "transcript",
    "lineage",
    "origin",
    "manifest",
)


class Line(msgspec.Struct, tag_field="kind", forbid_unknown_fields=True, kw_only=True):
    """One line of an archive."""


class Header(Line, tag="header"):
    format: str
    version: int
    server_version: str
    embedding_model: str  # the model of the exporting server (each vector names its own)
    memory_store: str  # the store's full name when it was exported
    scope: str | None  # the scope the export was limited to, if any
    exported_at: datetime


class Store(Line, tag="store"):
    name: str
    store_kind: Literal["memory", "session"]
    description: str | None
    properties: dict[str, str]
    owner: str
    scope_binding: Literal["caller", "end_user"]
    shared_scopes: list[str]
    legal_hold: bool
    default_ttl_seconds: int | None
    created_at: datetime
    created_by: str
    updated_at: datetime
    updated_by: str
    # what it holds for review, from which sources (absent in archives made before: none)
    trust_policy: TrustPolicy | None = None


class Grant(Line, tag="grant"):
    principal: str
    privilege: str
    granted_by: str
    granted_at: datetime
    scopes: list[str] | None = None  # limited to the scopes these patterns match; none: every scope


class Entry(Line, tag="entry"):
    id: str  # the entry's id in the exporting server (an import gives it a new one)
    scope: str
    session_id: str | None
    path: str
    contents: str | None
    description: str | None
    source_type: str | None
    creation_reason: str | None
    creation_source: str | None
    metadata: dict[str, Any] | None
    version: int
    created_at: datetime
    created_by: str
    updated_at: datetime
    updated_by: str
    expires_at: datetime | None
    # the vector of this version (base64 of 384 little-endian float32) and its model; null when
    # the entry has none yet
    embedding: str | None
    embedding_model: str | None
    # consolidation: superseded or merged into the entry of that id, or held for review by the
    # store's trust policy (absent in archives made before: active)
    state: Literal["active", "superseded", "merged", "quarantined"] = "active"
    superseded_by: str | None = None
    # who imported it into the exporting store from an archive (null: written there; absent in
    # archives made before); an import records its own importer instead
    imported_by: str | None = None
    # where its text came from, as the exporting server kept it (absent in archives made before,
    # or for what it wrote before keeping it: the import records `via` `import`)
    provenance: dict[str, Any] | None = None


class EntryVersion(Line, tag="entry_version"):
    entry_id: str  # an `entry` line's id, or an entry deleted before the export
    scope: str
    session_id: str | None
    path: str
    version: int
    contents: str | None
    description: str | None
    metadata: dict[str, Any] | None
    operation: Literal["create", "update", "restore", "delete", "approve", "reject"]
    changed_at: datetime
    changed_by: str
    # a redacted version (entries:redact): who, when and why; absent in archives made before
    redacted_at: datetime | None = None
    redacted_by: str | None = None
    redaction_reason: str | None = None
    # its consolidation state then, and the key of the entry replacing it ({scope, session_id,
    # path}); absent in archives made before: active
    state: Literal["active", "superseded", "merged", "quarantined"] = "active"
    superseded_by: dict[str, str] | None = None
    # who imported this version into the exporting store (null: written there; absent in
    # archives made before); an import records its own importer instead
    imported_by: str | None = None
    # where its text (or its deletion) came from (as `entry`'s)
    provenance: dict[str, Any] | None = None


class Conversation(Line, tag="conversation"):
    id: str
    scope: str
    scope_kind: str
    metadata: dict[str, str]
    last_position: int
    created_at: datetime
    created_by: str
    updated_at: datetime


class ConversationItem(Line, tag="conversation_item"):
    conversation_id: str
    position: int
    id: str
    type: str
    item: dict[str, Any]  # as stored
    text: str | None
    created_at: datetime
    created_by: str


class Session(Line, tag="session"):
    session_id: str
    actor_id: str
    parent_session_id: str | None
    root_session_id: str
    metadata: dict[str, str]
    next_position: int
    created_at: datetime
    updated_at: datetime
    last_activity_at: datetime


class SessionItem(Line, tag="session_item"):
    session_id: str
    position: int
    item_id: str
    data: Any  # the item's JSON, as stored
    created_at: datetime


class Transcript(Line, tag="transcript"):
    """The vector of one conversation or session item's text (the text itself is rebuilt from
    the item when it is imported)."""

    source: Literal["conversation", "session"]
    thread_id: str
    item_id: str
    embedding: str
    embedding_model: str | None


class Lineage(Line, tag="lineage"):
    target_entry_id: str
    target_scope: str
    target_session_id: str | None
    target_path: str
    source_entry_id: str
    source_store_id: str | None  # null: this store (the source is an `entry` of the archive)
    source_store: str | None  # the other store's full name when it was exported
    source_scope: str
    source_session_id: str | None
    source_path: str
    created_at: datetime
    created_by: str


class Origin(Line, tag="origin"):
    target_entry_id: str
    target_scope: str
    target_session_id: str | None
    target_path: str
    source_kind: Literal["conversation", "session"]
    source_store_id: str | None  # null: this store
    source_store: str | None
    source_scope: str
    source_thread_id: str
    source_item_ids: list[str]
    created_at: datetime
    created_by: str
    updated_at: datetime
    updated_by: str


class Manifest(Line, tag="manifest"):
    counts: dict[str, int]  # lines of each kind between the header and the manifest
    lines: int  # every line before this one
    sha256: str  # hex digest of every line before this one, each with its newline


AnyLine = (
    Header
    | Store
    | Grant
    | Entry
    | EntryVersion
    | Conversation
    | ConversationItem
    | Session
    | SessionItem
    | Transcript
    | Lineage
    | Origin
    | Manifest
)


class ImportResult(Output, kw_only=True):
    memory_store: str  # the store the archive went into
    created: bool  # whether the import created it
    source: str  # the store the archive was exported from
    counts: dict[str, int]  # lines imported, by kind (the manifest's counts)
    reembedded: int  # rows whose archived vector another model made (or had none): embedded anew
    conversations_renamed: int  # conversations given a new id (theirs is taken on this server)
