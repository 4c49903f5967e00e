"""Principals as SCIM users: `Me` (any authenticated principal: the user it acts for, else itself)
and `Users` (the metastore admin).

Who the server knows ("users"): a principal is any string (docs/governance/groups.md), so there is
no account directory to ask. The known principals are those the server has seen:
- every token subject that authenticated (recorded once, at its first request: `SeenPrincipals`);
- every grantee that is not a group (a grant may name a principal before it ever signs in);
- every principal member of a group.
An end user named only in tokens' `on_behalf_of` is no principal (it holds no grants of its own)
and is not listed, but `Me` answers it to an app acting for it. A user's SCIM `id`, `userName` and
`displayName` are all its name; its `groups` are the groups it belongs to, directly or through
nesting (`account users`, which holds every principal, is implicit and not listed).
"""

from __future__ import annotations

import logging
import re

import asyncpg

from catalog.access import SecurableType
from catalog.access.policy import PolicyState
from catalog.auth import Principal
from catalog.context import Context
from catalog.errors import InvalidParameter, NotFound
from catalog.governance.principals import repo
from catalog.governance.principals.schemas import User, UserGroup, UserList
from catalog.wire.pagination import scim_window

log = logging.getLogger("catalog.principals")

# the filters supported: equality on the user's name (SCIM attribute and operator, with spaces)
FILTER_PATTERN = r'^ *(userName|id|displayName) +eq +"([^"\x00]*)" *$'
_FILTER = re.compile(FILTER_PATTERN[1:-1])
MAX_REMEMBERED = 100_000


class SeenPrincipals:
    """Records each token subject in `principals` at its first authenticated request. Each
    process remembers whom it recorded, so a request writes nothing after its subject's first;
    past `MAX_REMEMBERED` names it forgets them all (recording one again changes nothing)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool
        self._recorded: set[str] = set()

    async def saw(self, name: str) -> None:
        """Best effort: a failure is logged and retried at the subject's next request; it never
        fails the request (the record only feeds the SCIM Users list)."""
        if name in self._recorded:
            return
        try:
            await repo.record(self.pool, name)
        except Exception as exc:
            log.warning("could not record principal", extra={"error": f"{type(exc).__name__}: {exc}"})
            return
        if len(self._recorded) >= MAX_REMEMBERED:
            self._recorded.clear()
        self._recorded.add(name)


def _groups(policy: PolicyState, name: str) -> list[UserGroup]:
    direct = policy.principal_groups.get(name, set())
    found = []
    for group_name in sorted(policy.membership(name).subjects):
        group_id = policy.group_ids.get(group_name)
        if group_id is None:  # the principal itself, or `account users`
            continue
        kind = "direct" if group_id in direct else "indirect"
        found.append(UserGroup(value=group_id, display=group_name, type=kind, ref=f"Groups/{group_id}"))
    return found


def _user(ctx: Context, name: str) -> User:
    groups = _groups(ctx.authorizer.policy, name)
    return User(id=name, user_name=name, display_name=name, groups=groups)


async def me(ctx: Context, principal: Principal) -> User:
    """The user the request is for: the token's `on_behalf_of` (an app acting for an end user
    answers the end user and the end user's groups), else its subject. Per-user state is keyed by
    `me().id` (Databricks' managed memory scopes by it), so an app's token must not collapse its
    users into the app. The app stays the request's principal: it is authorized, and its audit
    event names it (with the end user in `on_behalf_of`)."""
    await ctx.access.resolve(principal, "principals.me", SecurableType.METASTORE)
    return _user(ctx, principal.on_behalf_of or principal.name)


async def get_user(ctx: Context, principal: Principal, user_id: str) -> User:
    await ctx.access.resolve(principal, "principals.read", SecurableType.METASTORE)
    if await repo.count_known(ctx.pool, user_id) == 0:
        raise NotFound(f"user {user_id[:255]} is not known here")
    return _user(ctx, user_id)


async def list_users(
    ctx: Context, principal: Principal, filter_: str | None, start_index: int | None, count: int | None
) -> UserList:
    name = None
    if filter_:
        match = _FILTER.fullmatch(filter_)
        if not match:
            raise InvalidParameter('filter supports only userName eq "name" (or id, displayName)', "filter")
        name = match[2]
    start, size = scim_window(start_index, count, cap=ctx.settings.page_cap)
    await ctx.access.resolve(principal, "principals.read", SecurableType.METASTORE)
    total = await repo.count_known(ctx.pool, name)
    names = await repo.list_known(ctx.pool, name, start - 1, size)
    return UserList(
        resources=[_user(ctx, n) for n in names],
        total_results=total,
        start_index=start,
        items_per_page=len(names),
    )
