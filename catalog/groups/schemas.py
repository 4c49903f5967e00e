"""SCIM 2.0 wire types (the subset the Databricks SDK uses for groups)."""

from __future__ import annotations

from typing import Any

import msgspec

GROUP_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:Group"
LIST_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:ListResponse"
PATCH_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:PatchOp"


class MemberRef(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    value: str
    display: str | None = None
    type: str | None = None
    primary: bool | None = None
    ref: str | None = msgspec.field(default=None, name="$ref")


class GroupCreate(
    msgspec.Struct, forbid_unknown_fields=True, kw_only=True, rename={"display_name": "displayName"}
):
    display_name: str
    members: list[MemberRef] = []
    schemas: list[str] = []


class PatchOperation(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    op: str
    path: str | None = None
    value: Any = None


class GroupPatch(
    msgspec.Struct, forbid_unknown_fields=True, kw_only=True, rename={"operations": "Operations"}
):
    operations: list[PatchOperation]
    schemas: list[str] = []


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
