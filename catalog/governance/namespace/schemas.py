"""Wire types of the namespace API (Unity Catalog dialect). Inputs forbid unknown fields, so
`owner`, ids and timestamps can never be mass-assigned."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from catalog.access.trust import TrustPolicy
from catalog.wire import Input, Output
from catalog.wire.inputs import NO_NUL, PrincipalName, Scope
from catalog.wire.names import NAME_PATTERN, Name

MAX_COMMENT = 4096
MAX_PROPERTIES = 100
MAX_PROPERTY_KEY = 255
MAX_PROPERTY_VALUE = 4096
MAX_SHARED_SCOPES = 100

# Text longer than its limit is 413 (PAYLOAD_TOO_LARGE), answered by the service: the length is
# documented here.
Comment = Annotated[str, msgspec.Meta(pattern=NO_NUL, extra_json_schema={"maxLength": MAX_COMMENT})]
Properties = Annotated[
    dict[
        Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_PROPERTY_KEY, pattern=NO_NUL)],
        Annotated[str, msgspec.Meta(pattern=NO_NUL, extra_json_schema={"maxLength": MAX_PROPERTY_VALUE})],
    ],
    msgspec.Meta(max_length=MAX_PROPERTIES),
]
SharedScopes = Annotated[list[Scope], msgspec.Meta(max_length=MAX_SHARED_SCOPES)]
# A rename: what is below keeps its ids, grants and entries; full names change with it.
NewName = Annotated[
    str,
    msgspec.Meta(
        pattern=NAME_PATTERN,
        max_length=255,
        description="rename to this (letters, digits, '_' or '-'); what is below keeps its ids, grants "
        "and entries",
    ),
]


class CatalogCreate(Input, kw_only=True):
    name: Name
    comment: Comment | None = None
    properties: Properties | None = None


class CatalogUpdate(Input, kw_only=True):
    new_name: NewName | None = None
    comment: Comment | None = None
    properties: Properties | None = None
    owner: PrincipalName | None = None


class SchemaCreate(Input, kw_only=True):
    name: Name
    catalog_name: Name
    comment: Comment | None = None
    properties: Properties | None = None


class SchemaUpdate(Input, kw_only=True):
    new_name: NewName | None = None
    comment: Comment | None = None
    properties: Properties | None = None
    owner: PrincipalName | None = None


ScopeBinding = Literal["caller", "end_user"]


class MemoryStoreCreate(Input, kw_only=True):
    name: Name
    catalog_name: Name
    schema_name: Name
    description: Comment | None = None
    properties: Properties | None = None
    scope_binding: ScopeBinding = "caller"
    shared_scopes: SharedScopes | None = None


class MemoryStoreUpdate(Input, kw_only=True):
    new_name: NewName | None = None
    description: Comment | None = None
    properties: Properties | None = None
    owner: PrincipalName | None = None
    scope_binding: ScopeBinding | None = None
    shared_scopes: SharedScopes | None = None
    # while true, the store's entries may not be deleted or lose text (409 RESOURCE_CONFLICT)
    legal_hold: bool | None = None
    # entries written without ttl_seconds expire this long after the write; 0 clears it
    default_ttl_seconds: Annotated[int, msgspec.Meta(ge=0, le=10 * 366 * 24 * 3600)] | None = None


class CatalogInfo(Output, kw_only=True):
    name: str
    full_name: str
    id: str
    metastore_id: str
    owner: str
    properties: dict[str, str] = {}
    comment: str | None = None
    created_at: int
    created_by: str
    updated_at: int
    updated_by: str
    securable_type: str = "CATALOG"


class SchemaInfo(Output, kw_only=True):
    name: str
    full_name: str
    catalog_name: str
    schema_id: str
    metastore_id: str
    owner: str
    properties: dict[str, str] = {}
    comment: str | None = None
    created_at: int
    created_by: str
    updated_at: int
    updated_by: str
    securable_type: str = "SCHEMA"


class MemoryStoreInfo(Output, kw_only=True):
    name: str
    full_name: str
    catalog_name: str
    schema_name: str
    memory_store_id: str
    metastore_id: str
    owner: str
    properties: dict[str, str] = {}
    description: str | None = None
    scope_binding: str = "caller"
    shared_scopes: list[str] = []
    legal_hold: bool = False
    default_ttl_seconds: int | None = None
    created_at: int
    created_by: str
    updated_at: int
    updated_by: str
    securable_type: str = "MEMORY_STORE"


class ListCatalogsResponse(Output, kw_only=True):
    catalogs: list[CatalogInfo]
    next_page_token: str | None = None


class ListSchemasResponse(Output, kw_only=True):
    schemas: list[SchemaInfo]
    next_page_token: str | None = None


class ListMemoryStoresResponse(Output, kw_only=True):
    memory_stores: list[MemoryStoreInfo]
    next_page_token: str | None = None


class MetastoreSummary(Output, kw_only=True):
    metastore_id: str
    name: str
    owner: str
    created_at: int
    global_metastore_id: str


# --- a store's trust policy (catalog.access.trust) -----------------------------------------------

TestVia = Literal["rest", "agents", "console", "mcp", "responses", "extraction", "pipeline", "maintenance"]
MAX_TEST_TEXT = 64 * 1024


class TrustRuleInfo(Output, kw_only=True):
    name: str
    phrases: list[str]
    description: str | None = None
    builtin: bool = False  # one of the catalog's own rules


class TrustPolicyInfo(Output, kw_only=True):
    """A store's trust policy: what it decides per source, and the screen's rules in effect."""

    memory_store: str
    # None: the store has no policy, and nothing written to it is held
    policy: TrustPolicy | None = None
    rules: list[TrustRuleInfo] = []  # the rules the screen applies, in order (none without a policy)
    # the policy asks the upstream model too, and one is configured (CATALOG_LLM_BASE_URL and _MODEL)
    classifier_active: bool = False


class TrustTest(Input, kw_only=True):
    """Text to judge as a write from one source would be judged (nothing is written)."""

    text: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TEST_TEXT, pattern=NO_NUL)]
    via: TestVia = "mcp"  # the channel the write would come through
    on_behalf_of: bool = False  # the token acts for an end user (an application, outside a model's channels)
    policy: TrustPolicy | None = (
        None  # judge by this policy instead of the store's (try one before setting it)
    )


class TrustVerdict(Output, kw_only=True):
    source_class: str  # person | application | model
    via: str
    decision: str  # trust | screen | review (what the policy says for the source)
    held: bool  # the write would be kept quarantined until reviewed
    rules: list[str] = []  # the screen's rules that matched
    classifier: str | None = None  # instruction | data | unavailable, when the upstream model judged it
    policy: bool = True  # false: judged without a policy (the store has none), so nothing is held
