"""SCIM 2.0 wire types (the subset the Databricks SDK uses for groups)."""

from __future__ import annotations

from typing import Annotated

import msgspec

from catalog.wire import Input
from catalog.wire.inputs import NO_NUL, PrincipalName

GROUP_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:Group"
LIST_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:ListResponse"
MAX_MEMBERS_PER_REQUEST = 1000

Text = Annotated[str, msgspec.Meta(pattern=NO_NUL)]
# SCIM operation names are case-insensitive; only add and remove (of members) are supported
OP_PATTERN = "^([Aa][Dd][Dd]|[Rr][Ee][Mm][Oo][Vv][Ee])$"


class MemberRef(Input, kw_only=True):
    value: PrincipalName  # a principal name, or the id of a group
    display: Text | None = None
    type: Text | None = None
    primary: bool | None = None
    ref: Text | None = msgspec.field(default=None, name="$ref")


class GroupCreate(Input, kw_only=True, rename={"display_name": "displayName"}):
    display_name: PrincipalName
    members: Annotated[list[MemberRef], msgspec.Meta(max_length=MAX_MEMBERS_PER_REQUEST)] = []
    schemas: list[Text] = []


class PatchOperation(Input, kw_only=True):
    op: Annotated[str, msgspec.Meta(pattern=OP_PATTERN, description="add or remove (any case)")]
    path: (
        Annotated[
            str,
            msgspec.Meta(
                pattern=NO_NUL, description='`members`, or `members[value eq "<member>"]` to remove one'
            ),
        ]
        | None
    ) = None
    # with path `members`: the members to add or remove ([{"value": "<member>"}, ...] or one of them)
    value: list[MemberRef] | MemberRef | None = None


class GroupPatch(Input, kw_only=True, rename={"operations": "Operations"}):
    operations: Annotated[list[PatchOperation], msgspec.Meta(min_length=1)]
    schemas: list[Text] = []


class Member(msgspec.Struct, omit_defaults=True, kw_only=True):
    value: str
    display: str | None = None
    type: str | None = None


class Group(msgspec.Struct, kw_only=True, rename={"display_name": "displayName"}):
    id: str
    display_name: str
    members: list[Member]
    schemas: list[str] = msgspec.field(default_factory=lambda: [GROUP_SCHEMA])


class GroupList(
    msgspec.Struct,
    kw_only=True,
    rename={
        "resources": "Resources",
        "total_results": "totalResults",
        "start_index": "startIndex",
        "items_per_page": "itemsPerPage",
    },
):
    resources: list[Group]
    total_results: int
    start_index: int
    items_per_page: int
    schemas: list[str] = msgspec.field(default_factory=lambda: [LIST_SCHEMA])
