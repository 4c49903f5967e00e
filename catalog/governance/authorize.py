"""The one authorization seam: `Authorizer.authorize(principal, action, securable) -> Decision`.

Rules (this version, before grants exist):
1. The metastore admin may do everything.
2. An action with no privilege (metastore summary, lists) is open to every authenticated principal;
   lists then show only the objects the caller may see.
3. Inside a catalog or schema, the caller needs USE_CATALOG / USE_SCHEMA on each parent; the owner
   of the target is excepted. A parent that does not exist is reported like a missing USE
   privilege (403), so that existence never leaks; a missing target behind usable parents is
   allowed here and answered 404 by the service.
4. The owner of an object holds every privilege on it. The owner of a catalog or schema may
   manage what is below it (and read its metadata) but gets no data access from that alone.
Every decision carries its reason: the path that allowed it, or what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass

from catalog.auth.principal import Principal
from catalog.errors import PermissionDenied
from catalog.governance.actions import Action, Privilege
from catalog.governance.securables import DEPTH, Node, Securable, SecurableType

_USE = {SecurableType.CATALOG: Privilege.USE_CATALOG, SecurableType.SCHEMA: Privilege.USE_SCHEMA}


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str
    privilege: str | None = None


def _describe(node: Node) -> str:
    return f"{node.type.value.lower().replace('_', ' ')} {node.full_name}"


class Authorizer:
    def __init__(self, admin: str) -> None:
        self.admin = admin

    def is_admin(self, principal: Principal) -> bool:
        return principal.name == self.admin

    def _holds(
        self, principal: Principal, privilege: Privilege, chain: tuple[Node, ...], data: bool
    ) -> str | None:
        """The reason `principal` holds `privilege` on `chain[-1]`, or None."""
        target = chain[-1]
        if target.owner == principal.name:
            return f"owner of {_describe(target)}"
        if not data:
            for ancestor in chain[1:-1]:
                if ancestor.owner == principal.name:
                    return f"owner of {_describe(ancestor)}, which contains it"
        return None

    def authorize(self, principal: Principal, action: Action, securable: Securable) -> Decision:
        privilege = action.privilege.value if action.privilege else None
        if self.is_admin(principal):
            return Decision(True, "metastore admin", privilege)
        if action.privilege is None:
            return Decision(True, "open to every authenticated principal", None)

        chain = securable.chain
        owns_target = securable.exists and securable.node.owner == principal.name
        if not owns_target:
            # USE on each parent: the catalog (depth 1) and schema (depth 2) strictly above the target.
            for depth in range(1, DEPTH[securable.type]):
                parent_type = SecurableType.CATALOG if depth == 1 else SecurableType.SCHEMA
                use = _USE[parent_type]
                if len(chain) <= depth:
                    name = ".".join(securable.full_name.split(".")[:depth])
                    return Decision(False, f"requires {use.value} on {parent_type.value.lower()} {name}", use)
                if self._holds(principal, use, chain[: depth + 1], data=False) is None:
                    return Decision(False, f"requires {use.value} on {_describe(chain[depth])}", use)

        if not securable.exists:
            return Decision(True, f"{securable.kind} {securable.full_name} does not exist", privilege)
        why = self._holds(principal, action.privilege, chain, action.data)
        if why is None:
            return Decision(False, f"requires {privilege} on {_describe(securable.node)}", privilege)
        return Decision(True, why, privilege)

    def ensure(self, principal: Principal, action: Action, securable: Securable) -> Decision:
        decision = self.authorize(principal, action, securable)
        if not decision.allowed:
            raise PermissionDenied(f"{principal.name} may not {action.description}: {decision.reason}")
        return decision
