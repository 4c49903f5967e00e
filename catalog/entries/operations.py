"""What can be done to entries, as typed values: each dialect (the Unity Catalog routes, the
agent-memory routes, and later tools) builds these and hands them to `catalog.entries.service`,
which validates, authorizes and runs them. Nothing here knows about HTTP.

An entry is named by its key within a store (`ByKey`: scope, session or none, path) or, in the
agent-memory dialect, by its id (`ById`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import msgspec

WriteMode = Literal["EXCLUSIVE", "OVERWRITE", "APPEND"]
SearchMode = Literal["hybrid", "keyword", "semantic"]
Via = Literal["rest", "agents", "console", "mcp", "responses", "extraction", "pipeline", "maintenance"]


class Channel(msgspec.Struct, frozen=True, kw_only=True):
    """Where a change entered the server (its provenance's `via`) and the model that wrote it, if
    any. Set by the code the change enters through (a route, the MCP server, a tool-calling loop),
    never taken from a request: a change that names none came through the REST API."""

    via: Via = "rest"
    model: str | None = None


REST = Channel()


class ByKey(msgspec.Struct, frozen=True, kw_only=True):
    scope: str
    path: str
    session_id: str | None = None  # None: no session


class ById(msgspec.Struct, frozen=True, kw_only=True):
    entry_id: str


Target = ByKey | ById


class Source(msgspec.Struct, frozen=True, kw_only=True):
    """An entry a write was derived from (lineage)."""

    store: str  # catalog.schema.store
    key: ByKey


class TranscriptSource(msgspec.Struct, frozen=True, kw_only=True):
    """Conversation or session items a change was derived from (lineage).

    Built by the server's own code that holds the thread (a response written into a conversation,
    an extraction from a session's transcript) after authorizing it, never taken from a request
    body: the entries service checks its shape and that the store id names a store of the kind,
    not the caller's access to the thread."""

    kind: Literal["conversation", "session"]
    store: str  # full name catalog.schema.store of the conversation's memory store / of the session store
    store_id: str  # its id (uuid text)
    scope: str  # the conversation's scope / the session's actor
    thread_id: str  # the conversation id / the session id
    item_ids: tuple[str, ...] = ()  # the items it was derived from (empty: the whole thread)


class Write(msgspec.Struct, frozen=True, kw_only=True):
    store: str
    key: ByKey
    contents: str | None = None
    description: str | None = None
    source_type: str | None = None
    # how the entry came to be, as the writer says (free strings: Databricks' managed-memory tools
    # send CREATION_REASON_AGENT_INFERRED / CREATION_SOURCE_ONLINE_AGENT); an overwrite or append
    # without them keeps the entry's (see catalog/entries/repo/writes.py)
    creation_reason: str | None = None
    creation_source: str | None = None
    mode: WriteMode = "EXCLUSIVE"
    derived_from: tuple[Source, ...] = ()
    ttl_seconds: int | None = None  # the entry expires this long after the write (else the store's default)
    origin: TranscriptSource | None = None
    # None: none given (an overwrite or append keeps the entry's metadata; `{}` clears it)
    metadata: Mapping[str, Any] | None = None
    channel: Channel = REST


class Get(msgspec.Struct, frozen=True, kw_only=True):
    store: str
    target: Target
    as_of: int | None = None  # epoch ms: the entry as it was then (from the history)
    # an entry held for review too (to a MANAGE holder, and to its author); else it is not found
    include_quarantined: bool = False


class List(msgspec.Struct, frozen=True, kw_only=True):
    store: str
    scopes: tuple[str, ...]
    path_prefix: str | None = None
    exact_path: str | None = None
    session_id: str | None = None  # None: every session and none
    page_size: int | None = None
    page_token: str | None = None
    max_page: int | None = None  # a dialect's own cap on page_size (else the server's)
    listing: str = "uc"  # which dialect's listing: its page tokens are good only there
    where: Mapping[str, Any] | None = None  # only entries whose metadata holds each pair (`filter`)
    as_of: int | None = None  # epoch ms: the entries as they were then (from the history)
    include_superseded: bool = False  # superseded and merged entries too
    include_quarantined: bool = False  # held entries too (all to a MANAGE holder, its own to an author)


# --- edits: one change to the contents, or none (description only) ---------------------------------


class StrReplace(msgspec.Struct, frozen=True, kw_only=True):
    old: str
    new: str


class Insert(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    line: int | None = None  # the line to insert before (0: at the start); None: after the last line


class ReplaceAll(msgspec.Struct, frozen=True, kw_only=True):
    contents: str | None


class Append(msgspec.Struct, frozen=True, kw_only=True):
    text: str


Change = StrReplace | Insert | ReplaceAll | Append


class Edit(msgspec.Struct, frozen=True, kw_only=True):
    store: str
    target: Target
    change: Change | None = None
    description: str | None = None
    set_description: bool = False  # set it even to None (the agent dialect's update mask)
    if_match: int | None = None
    origin: TranscriptSource | None = None
    metadata: Mapping[str, Any] | None = None  # replaces the entry's (`{}` clears it); None keeps it
    ttl_seconds: int | None = None  # the entry expires this long from now (None: its expiry stays)
    channel: Channel = REST


class Delete(msgspec.Struct, frozen=True, kw_only=True):
    store: str
    target: Target
    if_match: int | None = None
    channel: Channel = REST


class Batch(msgspec.Struct, frozen=True, kw_only=True):
    """Writes of several entries of one store and scope, each with a result of its own."""

    store: str
    scope: str
    writes: tuple[Write, ...]
    channel: Channel = REST


class History(msgspec.Struct, frozen=True, kw_only=True):
    store: str
    key: ByKey


class Restore(msgspec.Struct, frozen=True, kw_only=True):
    store: str
    key: ByKey
    version: int  # the etag of the version to write again
    channel: Channel = REST


EntryState = Literal["active", "superseded", "merged"]


class SetState(msgspec.Struct, frozen=True, kw_only=True):
    store: str
    key: ByKey
    state: EntryState
    superseded_by: ByKey | None = None  # the entry (of the same store) replacing it; None for active
    channel: Channel = REST


ReviewDecision = Literal["approve", "reject"]


class Review(msgspec.Struct, frozen=True, kw_only=True):
    """A MANAGE holder's decision on an entry held for review: `approve` makes the held text
    active; `reject` puts back the entry as it was before the held writes (or deletes it when it
    had no earlier text)."""

    store: str
    key: ByKey
    decision: ReviewDecision
    if_match: int | None = None  # the held version decided on (409 when it moved on)
    reason: str | None = None
    channel: Channel = REST


class Quarantined(msgspec.Struct, frozen=True, kw_only=True):
    """A page of a store's review queue (its held entries, by scope, session and path)."""

    store: str
    scope: str | None = None  # only this scope's
    page_size: int | None = None
    page_token: str | None = None


class Redact(msgspec.Struct, frozen=True, kw_only=True):
    store: str
    key: ByKey
    version: int  # the etag of the version to redact
    reason: str


class Search(msgspec.Struct, frozen=True, kw_only=True):
    store: str
    scopes: tuple[str, ...]
    query: str
    top_k: int = 10
    path_prefix: str | None = None
    session_id: str | None = None
    min_score: float | None = None
    mode: SearchMode = "hybrid"
    where: Mapping[str, Any] | None = None  # only entries whose metadata holds each pair (`filter`)
    explain: bool = False  # how each hit's score was made, and what each leg did
    as_of: int | None = None  # epoch ms: search the entries as they were then (from the history)
    include_superseded: bool = False  # superseded and merged entries too
    include_quarantined: bool = False  # held entries too (all to a MANAGE holder, its own to an author)


class DeleteMatching(msgspec.Struct, frozen=True, kw_only=True):
    """Forget by query: delete the entries of the scopes a search for `query` answers at or above
    `min_score` (None: the recommended floor), at most a hundred; `dry_run` names them only."""

    store: str
    scopes: tuple[str, ...]
    query: str
    mode: SearchMode = "hybrid"
    min_score: float | None = None
    path_prefix: str | None = None
    session_id: str | None = None
    dry_run: bool = False
    channel: Channel = REST
