"""Page sizes and page tokens, shared by every list.

Page size: absent or 0 = the server default, above the cap = the cap, negative = 400.

A page token is `<payload>.<mac>`, both base64url: the payload is the JSON of the last key a page
returned, the MAC is HMAC-SHA256 over the list's name, its filters and the payload, keyed with the
database's page-token key (read by `catalog.db.keys` from table `page_token_key`, created once by
migration 0010, so every process on the database signs and checks with the same key). A token
therefore works only on the list and with the filters that issued it: one from another list, with
other filters, altered, or not a token at all is 400 naming `page_token`. Lists are ordered by their
key, so pages are stable under concurrent inserts (a row is never returned twice).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Annotated, Any, TypeVar

import asyncpg
import msgspec
from litestar.params import Parameter

from catalog.db.keys import page_token_key
from catalog.errors import InvalidParameter
from catalog.wire.inputs import integer

T = TypeVar("T")

# A token holds one key: at most a path, a scope and a session id (see entries), JSON-escaped.
MAX_TOKEN = 16384
TOKEN_PATTERN = r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$"  # noqa: S105 (payload . 32-byte MAC)


def page_size(value: int | None, *, default: int, cap: int, field: str = "max_results") -> int:
    if value is None or value == 0:
        return default
    if value < 0:
        raise InvalidParameter(f"{field} must not be negative", field)
    return min(value, cap)


def scim_window(start_index: int | None, count: int | None, *, cap: int) -> tuple[int, int]:
    """A SCIM list's window: (1-based first index, page size). `startIndex` absent means 1;
    `count` absent or 0 means the cap, above the cap the cap, negative 400."""
    start = start_index or 1
    if start < 1:
        raise InvalidParameter("startIndex starts at 1", "startIndex")
    return start, page_size(count, default=cap, cap=cap, field="count")


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Pages:
    """The tokens of one list with its filters: `pages = Pages(pool, "schemas", catalog_name=name)`,
    then `await pages.after(page_token, str)` and `await pages.token(last_key)`."""

    def __init__(self, pool: asyncpg.Pool, list_name: str, **filters: Any) -> None:
        canonical = json.dumps(filters, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        self._context = f"{list_name}\n{canonical}\n".encode()
        self._pool = pool
        self._key: bytes | None = None

    async def _mac(self, payload: str) -> str:
        if self._key is None:  # only a request that reads or issues a token asks for the key
            self._key = await page_token_key(self._pool)
        return _b64(hmac.new(self._key, self._context + payload.encode(), hashlib.sha256).digest())

    async def token(self, last: Any) -> str:
        payload = _b64(json.dumps(last, separators=(",", ":"), ensure_ascii=False).encode())
        return f"{payload}.{await self._mac(payload)}"

    async def after(self, token: str | None, shape: Any, field: str = "page_token") -> Any:
        """The key a token points past, or None without a token; 400 unless this list issued it
        with these filters and its key has the expected shape."""
        if not token:
            return None
        payload, _, mac = token.partition(".")
        # compared as text: base64 decoding would ignore stray characters and unused bits
        if payload and hmac.compare_digest(mac.encode(), (await self._mac(payload)).encode()):
            try:
                return msgspec.convert(json.loads(_unb64(payload)), shape, strict=True)
            except (binascii.Error, ValueError, msgspec.ValidationError):
                pass  # signed by this server, so only a key from an older layout gets here
        raise InvalidParameter(
            f"{field} is not a page token of this list with these filters; "
            "pass the next_page_token of the previous page unchanged",
            field,
        )


async def collect_page(
    fetch: Callable[[Any, int], Awaitable[Sequence[T]]],
    key: Callable[[T], Any],
    visible: Callable[[T], bool],
    *,
    pages: Pages,
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
        return rows[:size], await pages.token(key(rows[size - 1]))
    return rows, None


# --- the parameters every list takes ---------------------------------------------------------------------

# Page sizes above the server's cap mean the cap; the bound keeps them within a 32-bit integer.
MAX_PAGE_PARAMETER = 2**31 - 1

MaxResults = Annotated[
    int | None,
    integer(
        0, MAX_PAGE_PARAMETER, "page size: absent or 0 = the server default, above the server cap = the cap"
    ),
]
PageSize = MaxResults
PageToken = Annotated[
    str | None,
    Parameter(
        pattern=TOKEN_PATTERN,
        max_length=MAX_TOKEN,
        description="the `next_page_token` of the previous page, unchanged (it is signed and "
        "good only for this list with the same filters)",
    ),
]
