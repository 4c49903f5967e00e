"""The in-memory copy of the policy held in PostgreSQL: grants, groups and memberships.

It is derived state. It is loaded whole at start and then kept current by applying the
`policy_log` rows (written by triggers on every change, serialised so that `seq` follows commit
order) past the revision it has; any process on the same database does the same, so a change
takes effect on the very next request everywhere.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field

ACCOUNT_USERS = "account users"  # every authenticated principal is implicitly a member


@dataclass(frozen=True)
class Membership:
    """A principal's groups as the engine needs them: the names of every group it belongs to,
    directly or through nesting (with `account users`), and the membership edges among them."""

    subjects: frozenset[str]
    edges: tuple[tuple[str, str], ...]


@dataclass
class PolicyState:
    revision: int = 0
    grants: dict[str, dict[str, set[str]]] = field(
        default_factory=dict
    )  # securable id → grantee → privileges
    # (securable id, grantee, privilege) → the scope patterns a limited grant applies to (a grant
    # not here applies to every scope)
    grant_scopes: dict[tuple[str, str, str], tuple[str, ...]] = field(default_factory=dict)
    group_names: dict[str, str] = field(default_factory=dict)  # group id → display name
    group_ids: dict[str, str] = field(default_factory=dict)  # display name → group id
    principal_groups: dict[str, set[str]] = field(
        default_factory=lambda: defaultdict(set)
    )  # name → group ids
    group_parents: dict[str, set[str]] = field(
        default_factory=lambda: defaultdict(set)
    )  # group id → group ids
    _memberships: dict[str, Membership] = field(default_factory=dict)

    # --- changes ---------------------------------------------------------------------------------

    def apply(self, kind: str, op: str, a: str, b: str, c: str, d: str = "") -> None:
        """Apply one policy_log row (idempotent: applying it twice changes nothing more). A grant's
        `d` is its scope patterns as a JSON array ('' for every scope); an `add` of a grant that is
        there replaces its patterns."""
        if kind == "grant":
            holders = self.grants.setdefault(a, {})
            if op == "add":
                holders.setdefault(b, set()).add(c)
                if d:
                    self.grant_scopes[(a, b, c)] = tuple(json.loads(d))
                else:
                    self.grant_scopes.pop((a, b, c), None)
            else:
                self.grant_scopes.pop((a, b, c), None)
                holders.get(b, set()).discard(c)
                if not holders.get(b):
                    holders.pop(b, None)
                if not holders:
                    self.grants.pop(a, None)
            return
        self._memberships.clear()
        if kind == "group":
            if op == "add":
                self.group_names[a], self.group_ids[b] = b, a
            else:
                self.group_names.pop(a, None)
                if self.group_ids.get(b) == a:
                    self.group_ids.pop(b, None)
        elif kind == "member":
            index = self.principal_groups if b == "principal" else self.group_parents
            if op == "add":
                index[c].add(a)
            else:
                index[c].discard(a)

    # --- questions -------------------------------------------------------------------------------

    def membership(self, principal: str) -> Membership:
        cached = self._memberships.get(principal)
        if cached is not None:
            return cached
        edges: list[tuple[str, str]] = [(principal, ACCOUNT_USERS)]
        subjects = {principal, ACCOUNT_USERS}
        frontier = [(principal, gid) for gid in self.principal_groups.get(principal, ())]
        seen: set[str] = set()
        while frontier:
            child, gid = frontier.pop()
            name = self.group_names.get(gid)
            if name is None:
                continue
            edges.append((child, name))
            subjects.add(name)
            if gid in seen:
                continue
            seen.add(gid)
            frontier.extend((name, parent) for parent in self.group_parents.get(gid, ()))
        membership = Membership(frozenset(subjects), tuple(edges))
        if len(self._memberships) > 100_000:
            self._memberships.clear()
        self._memberships[principal] = membership
        return membership

    def depth_below(self, group_id: str) -> int:
        """Levels of groups nested inside `group_id`, itself included (a group of people = 1)."""
        children = [g for g, parents in self.group_parents.items() if group_id in parents]
        return 1 + max((self.depth_below(child) for child in children), default=0)

    def depth_above(self, group_id: str) -> int:
        """Levels of groups containing `group_id`, itself included."""
        return 1 + max((self.depth_above(p) for p in self.group_parents.get(group_id, ())), default=0)

    def contains(self, outer_id: str, inner_id: str) -> bool:
        """Whether group `inner_id` is `outer_id` or nested (at any depth) inside it."""
        if outer_id == inner_id:
            return True
        return any(self.contains(outer_id, parent) for parent in self.group_parents.get(inner_id, ()))
