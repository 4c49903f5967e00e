"""Principals: who the server knows (SCIM `Me` and `Users`), and the record of token subjects."""

from catalog.principals.service import SeenPrincipals

__all__ = ["SeenPrincipals"]
