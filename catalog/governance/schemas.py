"""Wire types of the grants API (Unity Catalog dialect)."""

from __future__ import annotations

import msgspec


class PermissionsChange(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    principal: str
    add: list[str] = []
    remove: list[str] = []


class UpdatePermissions(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    changes: list[PermissionsChange] = []
    omit_permissions_in_response: bool = False


class PrivilegeAssignment(msgspec.Struct, kw_only=True):
    principal: str
    privileges: list[str]


class PermissionsList(msgspec.Struct, omit_defaults=True, kw_only=True):
    privilege_assignments: list[PrivilegeAssignment]
    next_page_token: str | None = None


class EffectivePrivilege(msgspec.Struct, omit_defaults=True, kw_only=True):
    privilege: str
    inherited_from_type: str | None = None
    inherited_from_name: str | None = None


class EffectivePrivilegeAssignment(msgspec.Struct, kw_only=True):
    principal: str  # the principal asked about, or the group the privileges come through
    privileges: list[EffectivePrivilege]


class EffectivePermissionsList(msgspec.Struct, omit_defaults=True, kw_only=True):
    privilege_assignments: list[EffectivePrivilegeAssignment]
    next_page_token: str | None = None
