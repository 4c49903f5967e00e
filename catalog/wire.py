"""The two bases of wire types: what a request body is (unknown fields refused, so nobody can
set `owner`, ids or times by sending them) and what a reply is (fields left at their default,
usually None, are left out)."""

from __future__ import annotations

import msgspec


class Input(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A request body."""


class Output(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A reply body."""
