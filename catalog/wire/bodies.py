"""The two bases of wire types: what a request body is (unknown fields refused, so nobody can
set `owner`, ids or times by sending them) and what a reply is (fields left at their default,
usually None, are left out)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

import msgspec


class Input(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A request body."""


class Output(msgspec.Struct, omit_defaults=True, kw_only=True):
    """A reply body."""


# The legs of a search; in an answer, those that may have missed rows (absent when complete).
SearchLeg = Literal["keyword", "semantic"]
Degraded = Annotated[
    list[SearchLeg] | None,
    msgspec.Meta(
        description="present only when the answer may be incomplete: the search legs that may have "
        "missed rows (`keyword`: the full-text index is failing or behind, e.g. on a full disk; "
        "`semantic`: some rows have no vector yet); `/healthz` and `/metrics` say why"
    ),
]


def rfc3339(epoch_ms: int) -> str:
    """Epoch milliseconds as the agent dialect writes times: `2026-12-01T02:48:14.123Z`."""
    return (
        datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )
