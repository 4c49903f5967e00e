"""Governance: the action registry and the one authorization seam."""

from catalog.governance.actions import ACTIONS, Action, Privilege, action
from catalog.governance.authorize import Authorizer, Decision
from catalog.governance.securables import Node, Securable, SecurableType

__all__ = [
    "ACTIONS",
    "Action",
    "Authorizer",
    "Decision",
    "Node",
    "Privilege",
    "Securable",
    "SecurableType",
    "action",
]
