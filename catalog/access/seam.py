"""The one access seam every service goes through: find the securable, check the action, answer
as the contract says.

Rules:
- `resolve()` locates the securable (with the policy revision read in the same statement),
  checks the action and records the decision for the request's audit event; a denial is 403
  whether or not the object exists when the caller lacks USE on a parent (no existence leak), and
  a missing object behind usable parents is 404 (`missing` chooses the error class);
- `ensure()` checks and records a further action on a securable already resolved, and raises 403
  on a denial, as `Authorizer.ensure` does (`Authorizer.check` only decides and records);
- `visible()` answers whether an action would be allowed, without recording anything: lists use it
  to hide rows, and services use it to decide how much of an answer to show (a write-only caller
  gets no contents); a hidden row is not a denied request;
- the metastore is addressed with no name parts (its full name is its id).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NoReturn

import asyncpg

from catalog.access import limits
from catalog.access.actions import action
from catalog.access.authorize import Authorizer, Decision
from catalog.access.locate import locate
from catalog.access.scoping import first_outside
from catalog.access.securables import Node, Securable, SecurableType
from catalog.auth.principal import Principal
from catalog.errors import NotFound, PermissionDenied
from catalog.recorder.writer import note_decision


@dataclass(frozen=True)
class Refusal:
    """Why an action would be refused, and the scope patterns that text names (an audit event
    keeps them as pseudonyms: `catalog.recorder.mark`)."""

    reason: str
    named: tuple[str, ...] = ()


@dataclass(frozen=True)
class Access:
    pool: asyncpg.Pool
    authorizer: Authorizer
    metastore: Node

    @property
    def metastore_id(self) -> str:
        return self.metastore.id

    async def locate(
        self,
        securable_type: SecurableType,
        parts: Sequence[str] = (),
        store_kind: str | None = "memory",
        *,
        fresh: Sequence[str] | None = None,
        whole: bool = False,
    ) -> Securable:
        """The securable named by `parts` (with `fresh`, the scopes a search reads, a store's
        search freshness too: `Securable.changes`, `Securable.unembedded`; with `whole`, its own
        row: `Securable.row`)."""
        return await locate(self.pool, self.metastore, securable_type, list(parts), store_kind, fresh, whole)

    async def resolve(
        self,
        principal: Principal,
        action_name: str,
        securable_type: SecurableType,
        parts: Sequence[str] = (),
        *,
        missing: type[NotFound] = NotFound,
        store_kind: str | None = "memory",
        fresh: Sequence[str] | None = None,
        whole: bool = False,
    ) -> Securable:
        """The securable, once `action_name` is allowed on it and it exists (else 403 / 404).
        A memory store is found only when of `store_kind` (`memory`, `session`; None: either);
        `fresh`: for a search, `whole`: with its row (`locate`)."""
        securable = await self.locate(securable_type, parts, store_kind, fresh=fresh, whole=whole)
        await self.authorizer.ensure(principal, action(action_name), securable)
        if not securable.exists:
            kind = "session store" if store_kind == "session" else securable.kind
            raise missing(f"{kind} {securable.full_name} does not exist")
        return securable

    async def ensure(self, principal: Principal, action_name: str, securable: Securable) -> Decision:
        """Check (and record) a further action on a securable already resolved; raises 403."""
        return await self.authorizer.ensure(principal, action(action_name), securable)

    def refuse(self, principal: Principal, action_name: str, securable: Securable, reason: str) -> NoReturn:
        """Deny `action_name` for a reason the privilege model does not state (e.g. "members only"),
        recorded like any denial."""
        patterns, scopes = limits.named()
        note_decision(action_name, securable, Decision(False, reason), patterns=patterns, scopes=scopes)
        raise PermissionDenied(f"{principal.name} may not {action(action_name).description}: {reason}")

    def visible(
        self,
        principal: Principal,
        action_name: str,
        securable: Securable,
        scopes: Sequence[str] | None = None,
    ) -> bool:
        """Whether `action_name` would be allowed, recording nothing (list filters, answer shaping).
        An action allowed only in some scopes is visible only for `scopes` they all match."""
        decision = self.authorizer.authorize(principal, action(action_name), securable)
        if not decision.allowed or decision.scopes is None:
            return decision.allowed
        return scopes is not None and first_outside(decision.scopes, scopes) is None

    def scope_filter(self, securable: Securable) -> Callable[[str], bool]:
        """For an answer that gathers rows of every scope (a list of a store's sessions): whether a
        row's scope may be shown under the request's scope limits on the securable, which are then
        held (the rows outside are left out)."""
        held = limits.on(securable.node.id)
        for limit in held:
            limit.held = True
        patterns = [limit.patterns for limit in held]
        return lambda scope: all(first_outside(p, [scope]) is None for p in patterns)

    async def refusal(self, principal: Principal, action_name: str, securable: Securable) -> Refusal | None:
        """Why `action_name` would be refused now (the policy brought up to date first), or None
        when it would be allowed; records nothing: the check of work done on someone's behalf
        outside a request (a pipeline's run answers to its creator and to whoever started it)."""
        await self.authorizer.sync(securable.revision)
        act = action(action_name)
        decision = self.authorizer.authorize(principal, act, securable)
        if decision.allowed:
            return None
        return Refusal(f"{principal.name} may not {act.description}: {decision.reason}", decision.named)

    def visible_somewhere(self, principal: Principal, action_name: str, securable: Securable) -> bool:
        """Whether `action_name` would be allowed in some scope at least (a grant limited to
        scopes counts): whether to offer what each request then holds to its own scopes."""
        return self.authorizer.authorize(principal, action(action_name), securable).allowed

    def hold_scopes(self, principal: Principal, securable: Securable, scopes: Sequence[str]) -> None:
        """Hold the scopes a request reaches on a store to every action of the request allowed
        there only in some scopes (grants limited to scopes); 403, recorded, for a scope outside.
        Actions checked later are held to these scopes as well (`Authorizer.check`)."""
        limits.reached(securable.node.id).update(scopes)
        for limit in limits.on(securable.node.id):
            outside = first_outside(limit.patterns, scopes)
            if outside is not None:
                limit.held = True  # held, and refused: nothing of the scope is answered
                reason = f"{limit.reason}, not scope '{outside}'"
                patterns, reached = limits.named()
                denial = Decision(False, reason, named=limit.patterns)
                note_decision(limit.action_name, securable, denial, patterns=patterns, scopes=reached)
                raise PermissionDenied(
                    f"{principal.name} may not {action(limit.action_name).description} in scope "
                    f"'{outside}': {reason}"
                )
            limit.held = True

    @staticmethod
    def child(
        parent: Securable, securable_type: SecurableType, name: str, node_id: str, owner: str
    ) -> Securable:
        """A listed row as a securable below `parent` (for `visible`), without another query."""
        full_name = name if parent.type == SecurableType.METASTORE else f"{parent.full_name}.{name}"
        return Securable(
            securable_type, full_name, (*parent.chain, Node(securable_type, full_name, node_id, owner))
        )
