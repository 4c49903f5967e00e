"""Governance: the action registry, the authorizer (Casbin) and the one access seam."""

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
