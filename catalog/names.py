"""Names of catalogs, schemas and stores: letters, digits, `_` and `-`, 1-255 characters,
case-insensitive (stored lowercase). Full names join them with dots."""

from __future__ import annotations

import re

from catalog.errors import InvalidParameter

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,255}$")


def validate_name(value: str, field: str = "name") -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise InvalidParameter(
            f"{field} must be 1-255 letters, digits, '_' or '-' (got {value[:80]!r})", field
        )
    return value.lower()


def split_full_name(value: str, parts: int, field: str = "full_name") -> list[str]:
    pieces = value.split(".")
    if len(pieces) != parts:
        shape = ".".join(["catalog", "schema", "store"][:parts])
        raise InvalidParameter(f"{field} must have the form {shape} (got {value[:200]!r})", field)
    return [validate_name(piece, field) for piece in pieces]
