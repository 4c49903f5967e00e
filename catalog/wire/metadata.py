"""Metadata on entries, and filters on it.

An entry's `metadata` is an object of at most `MAX_KEYS` keys (1-`MAX_KEY` characters, no control
characters) whose values are strings (at most `MAX_VALUE` characters), numbers or booleans. A
`filter` has the same shape and keeps the entries whose metadata holds every one of its pairs.

Equality is JSON's, as PostgreSQL's `jsonb` compares (`metadata @> filter`): `1` and `1.0` are
equal, `1`, `"1"` and `true` are not. The full-text index holds each pair as one term
(`terms()`), written so that exactly the pairs `jsonb` finds equal share a term; a filtered
search then restricts the Tantivy query and the pgvector scan alike, so `top_k` stays full.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Any

import msgspec

from catalog.errors import InvalidParameter

MAX_KEYS = 32
MAX_KEY = 64
MAX_VALUE = 1024  # characters of a string value

_CONTROL = r"^[^\x00-\x1f\x7f-\x9f]+$"
Key = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_KEY, pattern=_CONTROL)]
Value = Annotated[str, msgspec.Meta(max_length=MAX_VALUE, pattern=r"^[^\x00]*$")] | int | float | bool
# the wire type of `metadata` and `filter` (the service checks again: other dialects build ops too)
Metadata = Annotated[dict[Key, Value], msgspec.Meta(max_length=MAX_KEYS)]

_SEPARATOR = "\x1f"  # between a key and its value in a term: keys hold no control character


def validate(value: Mapping[str, Any] | None, field: str = "metadata") -> dict[str, Any] | None:
    """The metadata (or filter) as given, checked: 400 naming the field (and key) otherwise."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidParameter(f"{field} must be an object", field)
    if len(value) > MAX_KEYS:
        raise InvalidParameter(f"{field} holds at most {MAX_KEYS} keys", field)
    for key, item in value.items():
        if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY or any(_control(c) for c in key):
            raise InvalidParameter(
                f"{field} keys must be 1-{MAX_KEY} characters without control characters", field
            )
        where = f"{field}.{key}"
        if isinstance(item, str):
            if len(item) > MAX_VALUE or "\x00" in item:
                raise InvalidParameter(f"{where} must be at most {MAX_VALUE} characters, no NUL", where)
        elif isinstance(item, bool | int):
            pass
        elif isinstance(item, float):
            if item != item or item in (float("inf"), float("-inf")):
                raise InvalidParameter(f"{where} must be a finite number", where)
        else:
            raise InvalidParameter(f"{where} must be a string, a number or a boolean", where)
    return dict(value)


def _control(char: str) -> bool:
    code = ord(char)
    return code < 0x20 or 0x7F <= code <= 0x9F


def canonical(value: Any) -> str:
    """A value as one string, equal for exactly the values `jsonb` finds equal."""
    if isinstance(value, bool):
        return "b" + ("true" if value else "false")
    if isinstance(value, int | float):
        # numbers compare by value: 1, 1.0 and 1e0 alike (a float is read as the decimal it prints)
        number = Decimal(value) if isinstance(value, int) else Decimal(repr(value))
        text = format(number.normalize(), "f")
        return "n" + ("0" if text in ("-0", "0") else text)
    return "s" + str(value)


def terms(metadata: Mapping[str, Any] | None) -> list[str]:
    """The full-text index's terms of an entry's metadata (or of a filter): one per pair."""
    return [f"{key}{_SEPARATOR}{canonical(value)}" for key, value in (metadata or {}).items()]
