"""The access seam: who may do what to which securable, decided for every route of every slice.

The action registry (`actions`), the authorizer deciding with Casbin (`authorize`, `engine`,
`policy`; the model is `policies/model.conf`), its SQL (`repo`: the policy and the securables'
chains, which `locate` builds), the scope rules of a request (`scoping`), the one seam every
service goes through (`seam`, held by the request's `Context`), and a memory store's trust policy
and its screen (`trust`). It sits low: the slices that change the policy (`governance`: catalogs,
schemas and stores, grants, groups, principals) and every other slice are above it."""

from catalog.access.actions import ACTIONS, Action, Privilege, action
from catalog.access.authorize import Authorizer, Decision
from catalog.access.seam import Access
from catalog.access.securables import Node, Securable, SecurableType

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
