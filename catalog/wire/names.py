"""Names of catalogs, schemas and stores: letters, digits, `_` and `-`, 1-255 characters,
case-insensitive (stored lowercase). Full names join them with dots.

The patterns below are what the OpenAPI document states and what the wire types enforce; the
functions check the same rules with `fullmatch` (a pattern's `$` would let a trailing newline
through in Python, while ECMA-262, which the document speaks, does not).
"""

from __future__ import annotations

import re
from typing import Annotated

import msgspec

from catalog.errors import InvalidParameter

_PART = r"[A-Za-z0-9_-]{1,255}"
NAME_PATTERN = rf"^{_PART}$"
SCHEMA_FULL_NAME_PATTERN = rf"^{_PART}\.{_PART}$"
STORE_FULL_NAME_PATTERN = rf"^{_PART}\.{_PART}\.{_PART}$"
# any securable's full name: the metastore id (a UUID), a catalog, a schema or a store
FULL_NAME_PATTERN = rf"^{_PART}(\.{_PART}){{0,2}}$"
MAX_FULL_NAME = 3 * 255 + 2

_NAME = re.compile(_PART)

Name = Annotated[
    str, msgspec.Meta(pattern=NAME_PATTERN, max_length=255, description="letters, digits, '_' or '-'")
]
StoreFullName = Annotated[
    str,
    msgspec.Meta(
        pattern=STORE_FULL_NAME_PATTERN,
        max_length=MAX_FULL_NAME,
        description="a memory store's full name, catalog.schema.store",
    ),
]


def validate_name(value: str, field: str = "name") -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
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
