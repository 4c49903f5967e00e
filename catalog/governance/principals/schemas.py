"""SCIM 2.0 wire types for users (the subset `current_user.me()` and `users.list/get` read)."""

from __future__ import annotations

import msgspec

USER_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:User"
LIST_SCHEMA = "urn:ietf:params:scim:api:messages:2.0:ListResponse"


class UserGroup(msgspec.Struct, kw_only=True, rename={"ref": "$ref"}):
    """A group the user is in: `direct`ly, or `indirect`ly through a nested group."""

    value: str  # the group's id (`/Groups/{id}`)
    display: str  # its displayName
    type: str  # direct | indirect
    ref: str  # Groups/<id>


class User(msgspec.Struct, kw_only=True, rename={"user_name": "userName", "display_name": "displayName"}):
    """A principal as SCIM names a user: its name is its id, userName and displayName."""

    id: str
    user_name: str
    display_name: str
    active: bool = True
    groups: list[UserGroup]
    schemas: list[str] = msgspec.field(default_factory=lambda: [USER_SCHEMA])


class UserList(
    msgspec.Struct,
    kw_only=True,
    rename={
        "resources": "Resources",
        "total_results": "totalResults",
        "start_index": "startIndex",
        "items_per_page": "itemsPerPage",
    },
):
    resources: list[User]
    total_results: int
    start_index: int
    items_per_page: int
    schemas: list[str] = msgspec.field(default_factory=lambda: [LIST_SCHEMA])
