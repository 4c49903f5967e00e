"""Principals: who the server knows (SCIM `Me` and `Users`), and the record of token subjects."""

from catalog.governance.principals.service import SeenPrincipals

__all__ = ["SeenPrincipals"]
