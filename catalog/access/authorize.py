"""The one authorization seam: `Authorizer.authorize(principal, action, securable) -> Decision`.

Rules (policies/model.conf states them for the engine; policies/README.md for people):
1. A privilege granted on a catalog or schema applies to everything below it; ALL_PRIVILEGES is
   every privilege applicable there or below except MANAGE. Grants reach a principal directly or
   through its groups (nested; `account users` holds every authenticated principal).
2. Inside a catalog or schema, USE_CATALOG / USE_SCHEMA on each parent is needed as well (and on
   the securable itself for actions inside it); the owner of the target and the admin are excepted.
   A missing parent is reported like a missing USE privilege (403), so existence never leaks; a
   missing target behind usable parents is allowed here and answered 404 by the service.
3. The owner of an object holds every privilege on it; the owner of a catalog or schema may manage
   what is below it but gets no data access (READ/WRITE_MEMORY_STORE) from that alone.
4. The metastore admin may do everything.
5. A READ_MEMORY_STORE or WRITE_MEMORY_STORE grant limited to scopes (patterns: a scope, or a
   prefix ending in `*`) is left out of the engine; when no grant for every scope allows a data
   action, such grants do, and the decision carries the union of their patterns (`scopes`): the
   request is held to it where its scopes are known (`Access.hold_scopes`). An action that reaches
   every scope at once (`Action.every_scope`: a memory pipeline's) is never allowed by them.
Every decision carries its reason: the grant path that allowed it, or what is missing.

Decisions are cached per (principal, action, full name, chain with owners); the cache is emptied
whenever the policy revision moves, and owners and the name are part of the key, so a cached
decision (and the reason it gives) is never stale.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import asyncpg

from catalog import telemetry
from catalog.access import limits, repo
from catalog.access.actions import EFFECTIVE, METASTORE_ADMIN, SCOPABLE, Action, Privilege
from catalog.access.engine import CasbinEngine
from catalog.access.policy import ACCOUNT_USERS, PolicyState
from catalog.access.scoping import first_outside
from catalog.access.securables import DEPTH, Node, Securable, SecurableType
from catalog.auth.principal import Principal
from catalog.errors import PermissionDenied
from catalog.recorder.writer import note_decision

_USE = {1: (SecurableType.CATALOG, Privilege.USE_CATALOG), 2: (SecurableType.SCHEMA, Privilege.USE_SCHEMA)}
ADMIN, OWNER = "ADMIN", "OWNER"
_CACHE_LIMIT = 200_000
_SYNC_BATCH = 5_000


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str
    privilege: str | None = None
    # allowed only in the scopes these patterns match (grants limited to scopes); None: every scope
    scopes: tuple[str, ...] | None = None
    # the scope patterns `reason` names (the audit log keeps them as pseudonyms: `note_decision`)
    named: tuple[str, ...] = ()


@dataclass(frozen=True)
class Holding:
    """One privilege a principal holds on a securable, and where it comes from."""

    privilege: str
    grantee: str  # the principal itself, or the group it comes through
    source: Node  # the securable the grant (or ownership) is on
    basis: str = ""  # what is held there: the privilege granted (ALL_PRIVILEGES too), OWNER or ADMIN
    scopes: tuple[str, ...] | None = None  # the grant's scope patterns; None: every scope


def _describe(node: Node) -> str:
    return f"{node.type.value.lower().replace('_', ' ')} {node.full_name}"


class Authorizer:
    def __init__(self, admin: str, metastore: Node, pool: asyncpg.Pool | None = None) -> None:
        self.admin = admin
        self.metastore = metastore
        self.pool = pool
        self.policy = PolicyState()
        self.engine = CasbinEngine()
        self._cache: dict[tuple[Any, ...], Decision] = {}
        self._sync_lock = asyncio.Lock()

    # --- keeping the policy current --------------------------------------------------------------

    async def load(self) -> None:
        """Load the whole policy (at start)."""
        assert self.pool is not None
        rows = await repo.load_policy(self.pool)
        policy = PolicyState(revision=rows.revision)
        for row in rows.groups:
            policy.apply("group", "add", row[0], row[1], "")
        for row in rows.members:
            policy.apply("member", "add", row[0], row[1], row[2])
        for row in rows.grants:
            policy.apply("grant", "add", row[0], row[1], row[2], row[3])
        self.policy = policy
        self._cache.clear()

    async def sync(self, revision: int | None = None) -> None:
        """Catch up with the policy log up to at least `revision` (the database's, if None)."""
        if revision is not None and revision <= self.policy.revision:
            return
        assert self.pool is not None
        async with self._sync_lock:
            if revision is not None and revision <= self.policy.revision:
                return
            while True:
                rows = await repo.policy_changes(self.pool, self.policy.revision, _SYNC_BATCH)
                for row in rows:
                    self.apply(row["kind"], row["op"], row["a"], row["b"], row["c"], row["d"])
                    self.policy.revision = row["seq"]
                if len(rows) < _SYNC_BATCH:
                    break

    def apply(self, kind: str, op: str, a: str, b: str, c: str, d: str = "") -> None:
        """Apply one policy change; every cached decision is dropped."""
        self.policy.apply(kind, op, a, b, c, d)
        self._cache.clear()

    # --- deciding --------------------------------------------------------------------------------

    def _load_slice(self, principal: str, chain: tuple[Node, ...]) -> frozenset[str]:
        membership = self.policy.membership(principal)
        subjects = membership.subjects
        lines: list[list[str]] = []
        if self.admin in subjects:
            lines.append([self.admin, self.metastore.id, ADMIN])
        # most specific first: the engine explains with the first line that matches, and the
        # owner-of-the-target exception depends on seeing that line rather than an ancestor's
        for node in reversed(chain):
            if node.type != SecurableType.METASTORE and node.owner in subjects:
                lines.append([node.owner, node.id, OWNER])
            limited = self.policy.grant_scopes
            for grantee, privileges in self.policy.grants.get(node.id, {}).items():
                if grantee in subjects:
                    lines.extend(
                        [grantee, node.id, privilege]
                        for privilege in privileges
                        if not limited or (node.id, grantee, privilege) not in limited
                    )
        parents = [(chain[i].id, chain[i - 1].id) for i in range(1, len(chain))]
        self.engine.load(lines, membership.edges, parents)
        return subjects

    def _reason(self, principal: str, line: list[str], chain: tuple[Node, ...]) -> str:
        grantee, obj, act = line
        via = "" if grantee == principal else f" via group {grantee}"
        if act == ADMIN:
            return f"metastore admin{via}"
        node = next((n for n in chain if n.id == obj), None)
        where = _describe(node) if node else obj
        if act == OWNER:
            return f"owner of {where}{via}"
        return f"{act} on {where}{via}"

    def authorize(self, principal: Principal, action: Action, securable: Securable) -> Decision:
        """Decide with the policy as it is now (call `sync` first; `check` does both)."""
        # the full name is in the key because the decision's reason names it (a missing object
        # is not in the chain, and a renamed one keeps its ids)
        key = (
            principal.name,
            action.name,
            securable.type,
            securable.full_name,
            tuple((n.id, n.owner) for n in securable.chain),
        )
        decision = self._cache.get(key)
        if decision is None:
            decision = self._decide(principal.name, action, securable)
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[key] = decision
        return decision

    def _decide(self, name: str, action: Action, securable: Securable) -> Decision:
        privileges = EFFECTIVE[securable.type] if action.any_privilege else action.privileges
        if not privileges and not action.any_privilege:
            return Decision(True, "open to every authenticated principal")
        chain = securable.chain
        self._load_slice(name, chain)

        held: tuple[str, list[str]] | None = None
        if securable.exists:
            for privilege in privileges:
                allowed, line = self.engine.enforce(name, securable.node.id, privilege)
                if allowed and line is not None:
                    held = (privilege, line)
                    break
            if held and (held[1][2] == ADMIN or (held[1][2] == OWNER and held[1][1] == securable.node.id)):
                return Decision(True, self._reason(name, held[1], chain), held[0])

        # USE on every catalog/schema above the target (and on the target itself for actions inside it)
        depth = DEPTH[securable.type]
        last = depth if action.inside else depth - 1
        for level in range(1, last + 1):
            parent_type, use = _USE[level]
            if len(chain) <= level:
                allowed, line = self.engine.enforce(name, self.metastore.id, METASTORE_ADMIN)
                if allowed and line is not None:  # the admin is told what does not exist (404)
                    return Decision(True, self._reason(name, line, chain), METASTORE_ADMIN)
                name_there = ".".join(securable.full_name.split(".")[:level])
                return Decision(
                    False, f"requires {use.value} on {parent_type.value.lower()} {name_there}", use
                )
            allowed, _ = self.engine.enforce(name, chain[level].id, use)
            if not allowed:
                return Decision(False, f"requires {use.value} on {_describe(chain[level])}", use)

        if not securable.exists:
            return Decision(True, f"{securable.kind} {securable.full_name} does not exist", privileges[0])
        if held is None:
            scoped = self._scoped(name, privileges, chain)
            if scoped is not None:
                privilege, patterns, reason = scoped
                if action.every_scope:  # it reaches every scope: a limit to some never allows it
                    return Decision(False, f"{reason}; this reaches every scope", privilege, named=patterns)
                return Decision(True, reason, privilege, patterns if action.data else None, patterns)
            wanted = " or ".join(privileges) if not action.any_privilege else "a privilege"
            return Decision(False, f"requires {wanted} on {_describe(securable.node)}", privileges[0])
        return Decision(True, self._reason(name, held[1], chain), held[0])

    def _limited(
        self, principal: str, privilege: str, chain: tuple[Node, ...]
    ) -> list[tuple[str, Node, tuple[str, ...]]]:
        """The grants limited to scopes that give `privilege` to `principal` (directly or through
        a group) on the securable or above it: (grantee, where, patterns), most specific first."""
        if not self.policy.grant_scopes:
            return []
        subjects = self.policy.membership(principal).subjects
        found = []
        for node in reversed(chain):
            for grantee, granted in self.policy.grants.get(node.id, {}).items():
                if grantee in subjects and privilege in granted:
                    patterns = self.policy.grant_scopes.get((node.id, grantee, privilege))
                    if patterns:
                        found.append((grantee, node, patterns))
        return found

    def _scoped(
        self, principal: str, privileges: tuple[str, ...], chain: tuple[Node, ...]
    ) -> tuple[str, tuple[str, ...], str] | None:
        """The first of `privileges` held only through grants limited to scopes: it, the union of
        their patterns, and the reason naming them."""
        for privilege in privileges:
            if privilege not in SCOPABLE:
                continue
            grants = self._limited(principal, privilege, chain)
            if not grants:
                continue
            patterns: list[str] = []
            for _, _, limited in grants:
                patterns += [p for p in limited if p not in patterns]
            where = "; ".join(
                f"{privilege} on {_describe(node)}{'' if grantee == principal else f' via group {grantee}'}"
                f" for scopes {', '.join(limited)}"
                for grantee, node, limited in grants
            )
            return privilege, tuple(patterns), where
        return None

    @telemetry.authorization
    async def check(self, principal: Principal, action: Action, securable: Securable) -> Decision:
        await self.sync(securable.revision)
        decision = self.authorize(principal, action, securable)
        # allowed only in some scopes: kept for the request's scopes to be held to it where they
        # are known (and refused where there is no request to keep it in)
        if decision.scopes is not None:
            decision = self._limit(action, securable, decision)
        patterns, scopes = limits.named()
        note_decision(action.name, securable, decision, patterns=patterns, scopes=scopes)  # its audit event
        return decision

    @staticmethod
    def _limit(action: Action, securable: Securable, decision: Decision) -> Decision:
        """A decision allowed only in some scopes, kept in the request (its scopes are held to it
        where they are known: `Access.hold_scopes`); the scopes the request already reached on
        the securable are held to it now."""
        assert decision.scopes is not None
        limit = limits.note(action.name, securable, decision)
        if limit is None:
            reason = f"{decision.reason}, and no scope can be checked here"
            return Decision(False, reason, decision.privilege, named=decision.named)
        reached = limits.reached(securable.node.id)
        outside = first_outside(decision.scopes, reached)
        if outside is not None:
            reason = f"{decision.reason}, not scope '{outside}'"
            return Decision(False, reason, decision.privilege, named=decision.named)
        limit.held = limit.held or bool(reached)
        return decision

    async def ensure(self, principal: Principal, action: Action, securable: Securable) -> Decision:
        decision = await self.check(principal, action, securable)
        if not decision.allowed:
            raise PermissionDenied(f"{principal.name} may not {action.description}: {decision.reason}")
        return decision

    # --- explaining ------------------------------------------------------------------------------

    def holdings(self, principal: str, securable: Securable) -> list[Holding]:
        """Every privilege `principal` effectively holds on `securable`, with its source."""
        chain = securable.chain
        self._load_slice(principal, chain)
        found = []
        for privilege in EFFECTIVE[securable.type]:
            allowed, line = self.engine.enforce(principal, securable.node.id, privilege)
            if allowed and line is not None:
                source = next((n for n in chain if n.id == line[1]), self.metastore)
                found.append(Holding(privilege, line[0], source, line[2]))
            elif privilege in SCOPABLE:  # held only in some scopes: each limited grant, with its patterns
                found += [
                    Holding(privilege, grantee, node, privilege, patterns)
                    for grantee, node, patterns in self._limited(principal, privilege, chain)
                ]
        return found

    def is_member(self, principal: str, group_name: str) -> bool:
        return group_name == ACCOUNT_USERS or group_name in self.policy.membership(principal).subjects
