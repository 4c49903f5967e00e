"""Grants and effective permissions: validate, authorize through the access seam, one repository
call. Erasing a data subject (`erase_subject`, called by `catalog.erasure` in its transaction)
takes the subject's scope patterns out of the grants limited to scopes: a grant keeps its other
patterns, and one left with none is revoked, never widened to every scope."""

from __future__ import annotations

import re
from dataclasses import dataclass

import asyncpg

from catalog.access.actions import GRANTABLE, SCOPABLE, Privilege
from catalog.access.scoping import MAX_PATTERNS, subject_of_pattern, validate_pattern
from catalog.access.securables import DEPTH, Securable, SecurableType
from catalog.auth import Principal
from catalog.context import Context
from catalog.errors import InvalidParameter, NotFound
from catalog.governance.permissions import repo
from catalog.governance.permissions.schemas import (
    MAX_CHANGES,
    PRIVILEGE_PATTERN,
    EffectivePermissionsList,
    EffectivePrivilege,
    EffectivePrivilegeAssignment,
    PermissionsChange,
    PermissionsList,
    PrivilegeAssignment,
    UpdatePermissions,
)
from catalog.recorder.writer import audited
from catalog.wire.inputs import MAX_PRINCIPAL, blank
from catalog.wire.names import split_full_name
from catalog.wire.pagination import Pages, page_size

# metastore, catalog, schema or memory_store, in any case, '-' for '_'
SECURABLE_TYPE_PATTERN = (
    "^([Mm][Ee][Tt][Aa][Ss][Tt][Oo][Rr][Ee]|[Cc][Aa][Tt][Aa][Ll][Oo][Gg]|[Ss][Cc][Hh][Ee][Mm][Aa]"
    "|[Mm][Ee][Mm][Oo][Rr][Yy][_-][Ss][Tt][Oo][Rr][Ee])$"
)
_SECURABLE_TYPE = re.compile(SECURABLE_TYPE_PATTERN)
_PRIVILEGE = re.compile(PRIVILEGE_PATTERN)


def parse_securable_type(value: str) -> SecurableType:
    if not _SECURABLE_TYPE.fullmatch(value):
        raise InvalidParameter(
            "securable_type must be one of metastore, catalog, schema, memory_store", "securable_type"
        )
    return SecurableType.parse(value)


async def resolve(
    ctx: Context,
    principal: Principal,
    action_name: str,
    securable_type: str,
    full_name: str,
    store_kind: str | None = None,
) -> Securable:
    """Locate any securable by type and full name (the metastore's full name is its id),
    authorize `action_name` on it, and insist that it exists. The permissions routes see memory
    and session stores alike (both are MEMORY_STORE securables; `store_kind` narrows that)."""
    kind = parse_securable_type(securable_type)
    if kind == SecurableType.METASTORE:
        if full_name.lower() != ctx.metastore_id:
            raise NotFound(f"metastore {full_name} does not exist")
        parts: list[str] = []
    else:
        parts = split_full_name(full_name, DEPTH[kind])
    return await ctx.access.resolve(principal, action_name, kind, parts, store_kind=store_kind)


def _principal_name(value: str, field: str) -> str:
    if not isinstance(value, str) or blank(value) or len(value) > MAX_PRINCIPAL:
        raise InvalidParameter(
            f"{field} must be a principal or group name of 1-{MAX_PRINCIPAL} characters", field
        )
    return value


def _privilege(value: str, securable_type: SecurableType, field: str) -> str:
    if not _PRIVILEGE.fullmatch(value):
        raise InvalidParameter(f"unknown privilege {value[:60]!r}", field)
    privilege = Privilege.parse(value)
    if privilege not in GRANTABLE[securable_type]:
        allowed = ", ".join(GRANTABLE[securable_type])
        raise InvalidParameter(
            f"{privilege.value} cannot be granted on a {securable_type.value.lower()} (allowed: {allowed})",
            field,
        )
    return privilege.value


async def get_permissions(
    ctx: Context,
    principal: Principal,
    securable_type: str,
    full_name: str,
    about: str | None,
    max_results: int | None,
    page_token: str | None,
) -> PermissionsList:
    size = page_size(max_results, default=ctx.settings.page_default, cap=ctx.settings.page_cap)
    if about is not None:
        about = _principal_name(about, "principal")
    securable = await resolve(ctx, principal, "permissions.get", securable_type, full_name)
    pages = Pages(ctx.pool, "permissions", securable=securable.node.id, principal=about)
    after = await pages.after(page_token, str)
    grants = await repo.list_grants(ctx.pool, securable.node.id, about)
    names = [name for name in grants if after is None or name > after]
    page = names[:size]
    token = await pages.token(page[-1]) if len(names) > size else None
    return PermissionsList(
        privilege_assignments=[_assignment(name, grants[name]) for name in page],
        next_page_token=token,
    )


async def grant_store_permission(
    ctx: Context, principal: Principal, full_name: str, grantee: str, permission: str, *, store_kind: str
) -> None:
    """The agent dialect's store grant (memory and session stores alike): WRITE grants READ and
    WRITE, READ grants READ."""
    privileges = (
        ["READ_MEMORY_STORE"] if permission == "READ" else ["READ_MEMORY_STORE", "WRITE_MEMORY_STORE"]
    )
    change = PermissionsChange(principal=grantee, add=privileges)
    await update_permissions(
        ctx,
        principal,
        "memory_store",
        full_name,
        UpdatePermissions(changes=[change], omit_permissions_in_response=True),
        store_kind=store_kind,
    )


async def update_permissions(
    ctx: Context,
    principal: Principal,
    securable_type: str,
    full_name: str,
    body: UpdatePermissions,
    *,
    store_kind: str | None = None,
) -> PermissionsList:
    """`store_kind` (`memory`, `session`): a store of another kind is not found (the dialects'
    grant routes); None: either kind (the permissions routes)."""
    kind = parse_securable_type(securable_type)
    if len(body.changes) > MAX_CHANGES:
        raise InvalidParameter(f"at most {MAX_CHANGES} changes per request", "changes")
    add: list[tuple[str, str, list[str] | None, int]] = []
    remove: list[tuple[str, str, list[str] | None, int]] = []
    for i, change in enumerate(body.changes):
        who = _principal_name(change.principal, f"changes[{i}].principal")
        patterns = _patterns(change, i)
        add += [(who, _privilege(p, kind, f"changes[{i}].add"), patterns, i) for p in change.add]
        remove += [(who, _privilege(p, kind, f"changes[{i}].remove"), patterns, i) for p in change.remove]
    if both := {(w, p) for w, p, _, _ in add} & {(w, p) for w, p, _, _ in remove}:
        who, privilege = sorted(both)[0]
        raise InvalidParameter(f"{privilege} for {who} is both added and removed", "changes")
    securable = await resolve(ctx, principal, "permissions.update", securable_type, full_name, store_kind)
    async with audited(ctx.pool) as conn:
        principals = sorted({w for w, _, _, _ in add} | {w for w, _, _, _ in remove})
        before = await repo.grants_for_update(conn, securable.node.id, principals)
        after = _changed(before, add, remove)
        put = [(*key, scopes) for key, scopes in after.items() if key not in before or before[key] != scopes]
        delete = [key for key in before if key not in after]
        await repo.change_grants(conn, securable, put=put, delete=delete, granted_by=principal.name)
    if body.omit_permissions_in_response:
        return PermissionsList(privilege_assignments=[])
    grants = await repo.list_grants(ctx.pool, securable.node.id, None)
    return PermissionsList(privilege_assignments=[_assignment(n, g) for n, g in grants.items()])


def _patterns(change: PermissionsChange, i: int) -> list[str] | None:
    """The change's scope patterns (without repeats), which only READ and WRITE may carry."""
    if change.scopes is None:
        return None
    field = f"changes[{i}].scopes"
    if not 1 <= len(change.scopes) <= MAX_PATTERNS:
        raise InvalidParameter(f"{field} holds 1-{MAX_PATTERNS} scope patterns", field)
    for privilege in [*change.add, *change.remove]:
        named = Privilege.parse(privilege).value if _PRIVILEGE.fullmatch(privilege) else None
        if named is not None and named not in SCOPABLE:
            raise InvalidParameter(
                f"only {' and '.join(SCOPABLE)} may be limited to scopes, not {named}", field
            )
    patterns: list[str] = []
    for j, pattern in enumerate(change.scopes):
        validate_pattern(pattern, f"{field}[{j}]")
        if pattern not in patterns:
            patterns.append(pattern)
    return patterns


_ABSENT: list[str] = []  # a marker: no grant (None is a grant for every scope)


def _changed(
    before: dict[tuple[str, str], list[str] | None],
    add: list[tuple[str, str, list[str] | None, int]],
    remove: list[tuple[str, str, list[str] | None, int]],
) -> dict[tuple[str, str], list[str] | None]:
    """The grants after the changes. A removal with scopes takes those patterns from a grant
    limited to scopes (the grant goes with its last pattern); an addition with scopes adds them
    to a limited grant (a grant for every scope stays so) and one without makes it every scope."""
    after = dict(before)
    for who, privilege, patterns, i in remove:
        key = (who, privilege)
        if patterns is None or key not in after:
            after.pop(key, None)
            continue
        held = after[key]
        if held is None:
            raise InvalidParameter(
                f"{privilege} for {who} is granted in every scope: remove it without scopes, then add it "
                "with the scopes it keeps",
                f"changes[{i}].scopes",
            )
        left = [p for p in held if p not in patterns]
        if left:
            after[key] = left
        else:
            after.pop(key)
    for who, privilege, patterns, i in add:
        key = (who, privilege)
        held = after.get(key, _ABSENT)
        if patterns is None or held is None:
            after[key] = None
        elif held is _ABSENT:
            after[key] = patterns
        else:
            merged = [*held, *(p for p in patterns if p not in held)]
            if len(merged) > MAX_PATTERNS:
                raise InvalidParameter(
                    f"{privilege} for {who} would be limited to more than {MAX_PATTERNS} scope patterns",
                    f"changes[{i}].scopes",
                )
            after[key] = merged
    return after


def _assignment(name: str, grants: list[repo.Grant]) -> PrivilegeAssignment:
    return PrivilegeAssignment(
        principal=name,
        privileges=[privilege for privilege, _ in grants],
        scopes={privilege: scopes for privilege, scopes in grants if scopes is not None},
    )


@dataclass(frozen=True)
class Held:
    """One privilege a principal effectively holds on a securable, and where it comes from."""

    privilege: str
    grantee: str  # the principal asked about, or the group it comes through
    source_type: str  # where the grant or ownership is: METASTORE, CATALOG, SCHEMA or MEMORY_STORE
    source_name: str
    inherited: bool  # held on a parent of the securable, not on the securable itself
    basis: str  # what is held there: the privilege granted (ALL_PRIVILEGES too), OWNER or ADMIN
    scopes: tuple[str, ...] | None = None  # held only in the scopes these patterns match


@dataclass(frozen=True)
class Effective:
    about: str  # whose privileges
    securable: Securable
    held: list[Held]


async def effective_holdings(
    ctx: Context, principal: Principal, securable_type: str, full_name: str, about: str | None
) -> Effective:
    """Every privilege `about` (the caller by default) holds on the securable, with its source.
    About oneself anyone may ask; about others the owner, MANAGE or the admin."""
    about = _principal_name(about, "principal") if about is not None else principal.name
    action_name = "effective_permissions.self" if about == principal.name else "effective_permissions.other"
    securable = await resolve(ctx, principal, action_name, securable_type, full_name)
    held = [
        Held(
            privilege=holding.privilege,
            grantee=holding.grantee,
            source_type=holding.source.type.value,
            source_name=holding.source.full_name,
            inherited=holding.source.id != securable.node.id,
            basis=holding.basis,
            scopes=holding.scopes,
        )
        for holding in ctx.authorizer.holdings(about, securable)
    ]
    return Effective(about, securable, held)


async def get_effective_permissions(
    ctx: Context,
    principal: Principal,
    securable_type: str,
    full_name: str,
    about: str | None,
    max_results: int | None = None,
    page_token: str | None = None,
) -> EffectivePermissionsList:
    """Paged by grantee (the principal asked about, then the groups privileges come through)."""
    size = page_size(max_results, default=ctx.settings.page_default, cap=ctx.settings.page_cap)
    effective = await effective_holdings(ctx, principal, securable_type, full_name, about)
    pages = Pages(
        ctx.pool, "effective_permissions", securable=effective.securable.node.id, principal=effective.about
    )
    after = await pages.after(page_token, str)
    by_grantee: dict[str, list[EffectivePrivilege]] = {}
    for held in effective.held:
        by_grantee.setdefault(held.grantee, []).append(
            EffectivePrivilege(
                privilege=held.privilege,
                inherited_from_type=held.source_type if held.inherited else None,
                inherited_from_name=held.source_name if held.inherited else None,
                scopes=list(held.scopes) if held.scopes is not None else None,
            )
        )
    grantees = [g for g in sorted(by_grantee) if after is None or g > after]
    page = grantees[:size]
    return EffectivePermissionsList(
        privilege_assignments=[
            EffectivePrivilegeAssignment(principal=grantee, privileges=by_grantee[grantee])
            for grantee in page
        ],
        next_page_token=await pages.token(page[-1]) if len(grantees) > size else None,
    )


@dataclass(frozen=True)
class ErasedPatterns:
    narrowed: int  # grants that kept other patterns
    revoked: int  # grants left with none, deleted
    logged: int  # rows of the policy log's history rewritten


async def erase_subject(conn: asyncpg.Connection, subject: str) -> ErasedPatterns:
    """Take a data subject's scope patterns (those that match its scopes only:
    `subject_of_pattern`) out of every grant limited to scopes, on any securable, in the caller's
    transaction: a grant keeps its other patterns, one left with none is revoked. The triggers log
    each change, so every process applies it at its next request; then the history of the policy
    log forgets the patterns too (`repo.forget_logged_patterns`, which keeps its replay correct)."""
    narrowed: list[tuple[str, str, str, list[str]]] = []
    revoked: list[tuple[str, str, str]] = []
    limited = await repo.grants_of_subject_for_update(conn, subject)
    for securable_id, principal, privilege, patterns in limited:
        kept = [p for p in patterns if subject_of_pattern(p) != subject]
        if kept:
            narrowed.append((securable_id, principal, privilege, kept))
        else:
            revoked.append((securable_id, principal, privilege))
    await repo.limit_grants(conn, narrowed, revoked)
    logged = await repo.forget_logged_patterns(conn, subject)
    return ErasedPatterns(len(narrowed), len(revoked), logged)
