"""Page sizes and opaque page tokens, shared by every list.

Page size: absent or 0 = the server default, above the cap = the cap, negative = 400.
A token is the base64url JSON of the last key returned; lists are ordered by that key, so pages are
stable under concurrent inserts (a row is never returned twice).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from catalog.errors import InvalidParameter

T = TypeVar("T")


def page_size(value: int | None, *, default: int, cap: int, field: str = "max_results") -> int:
    if value is None or value == 0:
        return default
    if value < 0:
        raise InvalidParameter(f"{field} must not be negative", field)
    return min(value, cap)


def encode_token(key: Any) -> str:
    raw = json.dumps({"k": key}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str | None, field: str = "page_token") -> Any:
    if not token:
        return None
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        value = json.loads(raw)
        return value["k"]
    except (binascii.Error, ValueError, KeyError, TypeError) as exc:
        raise InvalidParameter(f"{field} is not a valid page token", field) from exc


async def collect_page(
    fetch: Callable[[Any, int], Awaitable[Sequence[T]]],
    key: Callable[[T], Any],
    visible: Callable[[T], bool],
    *,
    after: Any,
    size: int,
) -> tuple[list[T], str | None]:
    """Fill one page with the visible rows after `after`, fetching in batches; the token points
    past the last row returned when more visible rows follow."""
    rows: list[T] = []
    cursor = after
    batch = max(size + 1, 50)
    while len(rows) <= size:
        fetched = await fetch(cursor, batch)
        rows.extend(row for row in fetched if visible(row))
        if len(fetched) < batch:
            break
        cursor = key(fetched[-1])
    if len(rows) > size:
        return rows[:size], encode_token(key(rows[size - 1]))
    return rows, None
