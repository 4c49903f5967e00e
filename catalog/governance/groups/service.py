"""Groups (SCIM 2.0 subset). Only the metastore admin changes groups; other principals see the
groups they belong to.

Rules: a member is a principal name or the id of another group (groups nest); a membership that
would make a cycle is refused; so is nesting deeper than the engine follows (pycasbin's role
manager stops after a fixed number of hops and would otherwise deny silently).
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict

from catalog.access import Securable, SecurableType
from catalog.access.policy import ACCOUNT_USERS, PolicyState
from catalog.auth import Principal
from catalog.context import Context
from catalog.errors import InvalidParameter, NotFound
from catalog.governance.groups import repo
from catalog.governance.groups.schemas import (
    MAX_MEMBERS_PER_REQUEST,
    Group,
    GroupCreate,
    GroupList,
    GroupPatch,
    Member,
    MemberRef,
)
from catalog.recorder.writer import audited
from catalog.wire.inputs import blank
from catalog.wire.pagination import scim_window

_REMOVE_PATH = re.compile(r'members\[value eq "([^"]+)"\]')
# the one filter supported (SCIM's attribute and operator, with spaces around them)
FILTER_PATTERN = r'^ *displayName +eq +"([^"\x00]*)" *$'
_FILTER = re.compile(FILTER_PATTERN[1:-1])


def _group_id(value: str) -> str:
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise NotFound(f"group {value[:80]} does not exist") from None


async def _authorize(ctx: Context, principal: Principal, action_name: str) -> tuple[bool, Securable]:
    """(whether the caller manages groups, the metastore) once `action_name` is allowed."""
    metastore = await ctx.access.resolve(principal, action_name, SecurableType.METASTORE)
    manages = action_name == "groups.manage" or ctx.access.visible(principal, "groups.manage", metastore)
    return manages, metastore


def _display_name(value: str) -> str:
    if blank(value) or len(value) > 255:
        raise InvalidParameter("displayName must be 1-255 characters", "displayName")
    if value == ACCOUNT_USERS:
        raise InvalidParameter(f"'{ACCOUNT_USERS}' is built in and holds every principal", "displayName")
    return value


def _members(ctx: Context, refs: list[MemberRef], field: str) -> list[tuple[str, str]]:
    """(member_type, member): a value naming an existing group id is that group, else a principal."""
    if len(refs) > MAX_MEMBERS_PER_REQUEST:
        raise InvalidParameter(f"at most {MAX_MEMBERS_PER_REQUEST} members per request", field)
    members = []
    for ref in refs:
        value = ref.value
        if blank(value) or len(value) > 255:
            raise InvalidParameter("a member value must be 1-255 characters", field)
        try:
            as_id = str(uuid.UUID(value))
        except ValueError:
            as_id = None
        if as_id is not None and as_id in ctx.authorizer.policy.group_names:
            members.append(("group", as_id))
        else:
            members.append(("principal", value))
    return members


def _check_nesting(
    ctx: Context, policy: PolicyState, group_id: str | None, members: list[tuple[str, str]], field: str
) -> None:
    limit = ctx.authorizer.engine.max_group_depth - 1  # hops from a principal to its outermost group
    above = policy.depth_above(group_id) if group_id else 1
    for kind, member in members:
        if kind != "group":
            continue
        if group_id is not None and policy.contains(member, group_id):
            name = policy.group_names.get(member, member)
            raise InvalidParameter(f"adding group {name} would make a membership cycle", field)
        if policy.depth_below(member) + above > limit:
            raise InvalidParameter(
                f"groups may nest at most {limit} deep; adding group {policy.group_names.get(member)} "
                "would go deeper",
                field,
            )


async def _group(ctx: Context, group_id: str) -> Group:
    row = await repo.get_group(ctx.pool, group_id)
    if row is None:
        raise NotFound(f"group {group_id} does not exist")
    return (await _with_members(ctx, [row]))[0]


async def _with_members(ctx: Context, rows: list) -> list[Group]:  # type: ignore[type-arg]
    members: dict[str, list[Member]] = {row["id"]: [] for row in rows}
    for m in await repo.members_of(ctx.pool, list(members)):
        if m["member_type"] == "group":
            members[m["group_id"]].append(Member(value=m["member"], display=m["member_group"], type="Group"))
        else:
            members[m["group_id"]].append(Member(value=m["member"], display=m["member"], type="User"))
    return [Group(id=row["id"], display_name=row["display_name"], members=members[row["id"]]) for row in rows]


async def create_group(ctx: Context, principal: Principal, body: GroupCreate) -> Group:
    name = _display_name(body.display_name)
    await ctx.access.resolve(principal, "groups.manage", SecurableType.METASTORE)
    async with audited(ctx.pool) as conn:
        await repo.lock_policy(conn)
        await ctx.authorizer.sync()
        members = _members(ctx, body.members, "members")
        _check_nesting(ctx, ctx.authorizer.policy, None, members, "members")
        group_id = await repo.insert_group(conn, name, principal.name)
        await repo.add_members(conn, group_id, members)
    return await _group(ctx, group_id)


async def get_group(ctx: Context, principal: Principal, group_id: str) -> Group:
    group_id = _group_id(group_id)
    admin, metastore = await _authorize(ctx, principal, "groups.list")
    group = await _group(ctx, group_id)
    if not admin and not ctx.authorizer.is_member(principal.name, group.display_name):
        ctx.access.refuse(principal, "groups.list", metastore, "a member reads only the groups it belongs to")
    return group


async def list_groups(
    ctx: Context, principal: Principal, filter_: str | None, start_index: int | None, count: int | None
) -> GroupList:
    display_name = None
    if filter_:
        match = _FILTER.fullmatch(filter_)
        if not match:
            raise InvalidParameter('filter supports only displayName eq "name"', "filter")
        display_name = match[1]
    start, size = scim_window(start_index, count, cap=ctx.settings.page_cap)
    admin, _ = await _authorize(ctx, principal, "groups.list")
    rows = await repo.list_groups(ctx.pool, display_name)
    if not admin:
        rows = [row for row in rows if ctx.authorizer.is_member(principal.name, row["display_name"])]
    page = rows[start - 1 : start - 1 + size]
    return GroupList(
        resources=await _with_members(ctx, page),
        total_results=len(rows),
        start_index=start,
        items_per_page=len(page),
    )


async def patch_group(ctx: Context, principal: Principal, group_id: str, body: GroupPatch) -> Group:
    group_id = _group_id(group_id)
    await ctx.access.resolve(principal, "groups.manage", SecurableType.METASTORE)
    if not body.operations:
        raise InvalidParameter("Operations must not be empty", "Operations")
    async with audited(ctx.pool) as conn:
        await repo.lock_policy(conn)
        await ctx.authorizer.sync()
        if group_id not in ctx.authorizer.policy.group_names:
            raise NotFound(f"group {group_id} does not exist")
        # a scratch copy of the nesting, so that each operation is checked after the ones before it
        scratch = PolicyState(
            group_names=ctx.authorizer.policy.group_names,
            group_parents=defaultdict(
                set, {g: set(p) for g, p in ctx.authorizer.policy.group_parents.items()}
            ),
        )
        for i, op in enumerate(body.operations):
            field = f"Operations[{i}]"
            verb = op.op.lower()
            path = (op.path or "").strip()
            removal = _REMOVE_PATH.fullmatch(path)
            if verb == "remove" and removal:
                refs = [MemberRef(value=removal[1])]
            elif path.lower() == "members" and verb in ("add", "remove"):
                refs = _refs(op.value, field)
            else:
                raise InvalidParameter(f"{field}: only add/remove of members is supported", field)
            members = _members(ctx, refs, field)
            if verb == "add":
                _check_nesting(ctx, scratch, group_id, members, field)
                await repo.add_members(conn, group_id, members)
            else:
                await repo.remove_members(conn, group_id, members)
            for kind, member in members:
                if kind == "group":
                    scratch.apply("member", verb, group_id, kind, member)
    return await _group(ctx, group_id)


def _refs(value: list[MemberRef] | MemberRef | None, field: str) -> list[MemberRef]:
    if value is None:
        raise InvalidParameter(f"{field}: value must be a list of {{'value': ...}}", field)
    return value if isinstance(value, list) else [value]


async def delete_group(ctx: Context, principal: Principal, group_id: str) -> None:
    group_id = _group_id(group_id)
    await ctx.access.resolve(principal, "groups.manage", SecurableType.METASTORE)
    async with audited(ctx.pool) as conn:
        if await repo.delete_group(conn, group_id) is None:
            raise NotFound(f"group {group_id} does not exist")
