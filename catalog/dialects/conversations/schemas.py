"""Wire types of the OpenAI-compatible conversations API (OpenAI's shapes and conventions: ids
`conv_...`, `created_at` in epoch seconds, lists `{object: "list", data, first_id, last_id,
has_more}`), plus the two fields that bind a conversation to a memory store and a scope."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from catalog.wire import Input
from catalog.wire.inputs import NO_NUL, Scope
from catalog.wire.names import StoreFullName

MAX_ITEMS_PER_REQUEST = 20  # as OpenAI: "You may add up to 20 items at a time"
MAX_ITEM_CHARS = 256 * 1024  # one item, as JSON text
MAX_METADATA_KEYS = 16  # OpenAI's metadata: 16 pairs, keys up to 64 characters, values up to 512
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512
MAX_PAGE = 100  # `limit`: 1-100, default 20, as OpenAI
DEFAULT_PAGE = 20
MAX_ID = 128  # an item id or conversation id as a client may send it
ID_PATTERN = r"^[A-Za-z0-9_-]+$"
SCOPE_KIND_PATTERN = r"^[a-z][a-z0-9_-]*$"

MetadataKey = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_METADATA_KEY, pattern=NO_NUL)]
MetadataValue = Annotated[str, msgspec.Meta(max_length=MAX_METADATA_VALUE, pattern=NO_NUL)]
Metadata = Annotated[
    dict[MetadataKey, MetadataValue],
    msgspec.Meta(
        max_length=MAX_METADATA_KEYS,
        description=f"up to {MAX_METADATA_KEYS} pairs: keys 1-{MAX_METADATA_KEY} characters, string "
        f"values up to {MAX_METADATA_VALUE}",
    ),
]
Items = Annotated[
    list[dict[str, Any]],
    msgspec.Meta(
        max_length=MAX_ITEMS_PER_REQUEST,
        description=f"OpenAI input items (messages, function calls and their outputs, ...), at most "
        f"{MAX_ITEMS_PER_REQUEST} per request, each at most {MAX_ITEM_CHARS} characters as JSON",
    ),
]


class ConversationStoreRef(Input):
    """The memory store a conversation belongs to."""

    name: StoreFullName


class ConversationScope(Input):
    """Whose conversation it is: `value` is a scope of the store (held to its scope binding like
    an entry scope); `kind` says what the scope names (`user`, `agent`, `team`, ...)."""

    kind: Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=SCOPE_KIND_PATTERN)]
    value: Scope


class ConversationCreate(Input):
    # absent: the server's default store (CATALOG_DEFAULT_CONVERSATION_STORE), when one is set
    memory_store: ConversationStoreRef | None = None
    # required with `memory_store`; without it, absent means the caller's own scope
    scope: ConversationScope | None = None
    items: Items | None = None
    metadata: Metadata | None = None


class ConversationUpdate(Input):
    metadata: Metadata | None  # required, as OpenAI; null clears it


class ConversationItemsCreate(Input):
    items: Annotated[
        list[dict[str, Any]],
        msgspec.Meta(
            min_length=1,
            max_length=MAX_ITEMS_PER_REQUEST,
            description=f"1-{MAX_ITEMS_PER_REQUEST} OpenAI input items, each at most {MAX_ITEM_CHARS} "
            "characters as JSON",
        ),
    ]


class ConversationStore(msgspec.Struct, kw_only=True):
    name: str


class ConversationScopeOut(msgspec.Struct, kw_only=True):
    kind: str
    value: str


class Conversation(msgspec.Struct, kw_only=True):
    id: str
    object: Literal["conversation"] = "conversation"
    created_at: int  # epoch seconds, as OpenAI
    metadata: dict[str, str]
    memory_store: ConversationStore
    scope: ConversationScopeOut


class ConversationDeleted(msgspec.Struct, kw_only=True):
    id: str
    object: Literal["conversation.deleted"] = "conversation.deleted"
    deleted: bool = True


class ConversationItemList(msgspec.Struct, kw_only=True):
    object: Literal["list"] = "list"
    data: list[dict[str, Any]]
    first_id: str | None  # null on an empty page
    last_id: str | None
    has_more: bool
