"""Wire types of the grants API (Unity Catalog dialect)."""

from __future__ import annotations

from typing import Annotated

import msgspec

from catalog.access.actions import Privilege
from catalog.access.scoping import MAX_PATTERNS
from catalog.wire import Input
from catalog.wire.inputs import MAX_SCOPE, NO_CONTROL, PrincipalName

MAX_CHANGES = 1000


def _any_case(word: str) -> str:
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in word)


# A privilege as written in a request: any case, words joined by '_' or ' ' (`READ_MEMORY_STORE`,
# `read memory store`). Checked by the service (governance.service), which answers "unknown
# privilege" for anything else.
PRIVILEGE_PATTERN = (
    "^(" + "|".join("[_ ]".join(_any_case(w) for w in p.value.split("_")) for p in Privilege) + ")$"
)
PrivilegeName = Annotated[
    str,
    msgspec.Meta(
        extra_json_schema={
            "pattern": PRIVILEGE_PATTERN,
            "description": "a privilege: "
            + ", ".join(p.value for p in Privilege)
            + " (any case, '_' or ' ')",
        }
    ),
]


ScopePattern = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=MAX_SCOPE,
        pattern=NO_CONTROL,
        description="a scope (`team-a`) or a prefix ending in `*` "
        "(`team-a:*`: every scope starting `team-a:`)",
    ),
]


class PermissionsChange(Input, kw_only=True):
    principal: PrincipalName
    add: list[PrivilegeName] = []
    remove: list[PrivilegeName] = []
    # READ_MEMORY_STORE / WRITE_MEMORY_STORE limited to these scopes (added to a grant's patterns,
    # or removed from them); none: every scope
    scopes: Annotated[list[ScopePattern], msgspec.Meta(min_length=1, max_length=MAX_PATTERNS)] | None = None


class UpdatePermissions(Input, kw_only=True):
    changes: Annotated[list[PermissionsChange], msgspec.Meta(max_length=MAX_CHANGES)] = []
    omit_permissions_in_response: bool = False


class PrivilegeAssignment(msgspec.Struct, omit_defaults=True, kw_only=True):
    principal: str
    privileges: list[str]
    # the privileges granted only in some scopes, with their patterns (the others: every scope)
    scopes: dict[str, list[str]] = {}


class PermissionsList(msgspec.Struct, omit_defaults=True, kw_only=True):
    privilege_assignments: list[PrivilegeAssignment]
    next_page_token: str | None = None


class EffectivePrivilege(msgspec.Struct, omit_defaults=True, kw_only=True):
    privilege: str
    inherited_from_type: str | None = None
    inherited_from_name: str | None = None
    scopes: list[str] | None = None  # held only in the scopes these patterns match (a limited grant)


class EffectivePrivilegeAssignment(msgspec.Struct, kw_only=True):
    principal: str  # the principal asked about, or the group the privileges come through
    privileges: list[EffectivePrivilege]


class EffectivePermissionsList(msgspec.Struct, omit_defaults=True, kw_only=True):
    privilege_assignments: list[EffectivePrivilegeAssignment]
    next_page_token: str | None = None
