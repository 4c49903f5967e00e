"""Wire types of the entries API (Unity Catalog dialect). Inputs forbid unknown fields."""

from __future__ import annotations

from typing import Literal

import msgspec

MAX_PATH = 1024
MAX_SCOPE = 256
MAX_SESSION = 256
MAX_CONTENTS = 512 * 1024  # characters
MAX_DESCRIPTION = 4096
MAX_SOURCE_TYPE = 64
MAX_QUERY = 4096
MAX_SCOPES = 20
MAX_TOP_K = 100

WriteMode = Literal["EXCLUSIVE", "OVERWRITE", "APPEND"]
SearchMode = Literal["hybrid", "keyword", "semantic"]


class _Input(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pass


class SourceRef(_Input, kw_only=True):
    """An entry this one was derived from."""

    memory_store: str
    scope: str
    path: str
    session_id: str | None = None


class EntryFields(_Input, kw_only=True):
    path: str
    contents: str | None = None
    description: str | None = None
    session_id: str | None = None
    source_type: str | None = None
    write_mode: WriteMode | None = None
    derived_from: list[SourceRef] | None = None


class EntryCreate(EntryFields, kw_only=True):
    """`{path, contents?, ...}` with `?scope=`, or `{scope, memory_entry: {...}}`."""

    scope: str | None = None
    memory_entry: EntryFields | None = None
    path: str | None = None  # type: ignore[assignment]


class StrReplace(_Input, kw_only=True):
    old_str: str
    new_str: str


class Insert(_Input, kw_only=True):
    insert_text: str
    insert_line: int


class ReplaceAll(_Input, kw_only=True):
    contents: str


class Append(_Input, kw_only=True):
    text: str


class EntryEdit(_Input, kw_only=True):
    scope: str
    path: str
    session_id: str | None = None
    description: str | None = None
    str_replace: StrReplace | None = None
    insert: Insert | None = None
    replace_all: ReplaceAll | None = None
    append: Append | None = None


class SearchRequest(_Input, kw_only=True):
    query: str
    scope: str | None = None
    scopes: list[str] | None = None
    top_k: int = 10
    path_prefix: str | None = None
    session_id: str | None = None
    min_score: float | None = None
    mode: SearchMode = "hybrid"


class Entry(msgspec.Struct, omit_defaults=True, kw_only=True):
    scope: str
    path: str
    session_id: str | None = None
    contents: str | None = None
    description: str | None = None
    source_type: str | None = None
    created_at: int
    created_by: str
    updated_at: int
    updated_by: str
    etag: str


class EntrySummary(msgspec.Struct, omit_defaults=True, kw_only=True):
    path: str
    description: str | None = None
    has_contents: bool
    session_id: str | None = None
    updated_at: int
    scope: str | None = None


class ListEntriesResponse(msgspec.Struct, omit_defaults=True, kw_only=True):
    entries: list[EntrySummary]
    next_page_token: str | None = None


class SearchResult(msgspec.Struct, kw_only=True):
    memory_entry: Entry
    score: float


class SearchResponse(msgspec.Struct, kw_only=True):
    results: list[SearchResult]


class EraseRequest(_Input, kw_only=True):
    scope: str


class ErasedStore(msgspec.Struct, kw_only=True):
    memory_store: str
    deleted: int


class EraseResult(msgspec.Struct, kw_only=True):
    scope: str
    deleted: int
    stores: list[ErasedStore]
