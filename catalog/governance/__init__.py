"""Governance: who may do what to which securable.

The engine, re-exported here: the action registry (`actions`), the authorizer deciding with Casbin
(`authorize`, `engine`, `policy`; the model is `policies/model.conf`), its SQL (`repo`: the policy
and the securables' chains, which `locate` builds) and the one access seam every service goes
through (`access`); a memory store's trust policy and its screen (`trust`). The slices governed
by it, each with its routes: `namespace` (catalogs, schemas, memory stores), `permissions`
(grants), `groups` and `principals` (SCIM)."""

from catalog.governance.access import Access
from catalog.governance.actions import ACTIONS, Action, Privilege, action
from catalog.governance.authorize import Authorizer, Decision
from catalog.governance.securables import Node, Securable, SecurableType

__all__ = [
    "ACTIONS",
    "Access",
    "Action",
    "Authorizer",
    "Decision",
    "Node",
    "Privilege",
    "Securable",
    "SecurableType",
    "action",
]
