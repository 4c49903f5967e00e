"""The audit hash chain.

Rules:
- events are numbered 1, 2, 3, ... with no gap (`seq`), assigned under one advisory lock by the
  writer that appends them, so several processes extend one chain;
- `hash = sha256(prev_hash || canonical(event))`, where canonical(event) is the JSON of every
  column but the two hashes, keys sorted, times as UTC ISO-8601 with microseconds; the first
  event's prev_hash is GENESIS;
- verification recomputes the chain from the stored rows and names the first sequence number
  that does not fit: an edited row (its hash), a deleted row (a gap), an inserted or reordered
  row (its prev_hash or hash).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

GENESIS = "0" * 64
HASHED_COLUMNS = (
    "seq",
    "event_id",
    "event_time",
    "request_id",
    "principal",
    "on_behalf_of",
    "source_ip",
    "user_agent",
    "service_name",
    "action_name",
    "securable_type",
    "securable_full_name",
    "securable_id",
    "privilege",
    "decision",
    "reason",
    "status_code",
    "error_code",
    "request_params",
    "result_count",
    "policy_revision",
)


_AS_IS = (str, int, float, bool, dict, list)  # JSON values already (a tuple: built once)


def plain(value: Any) -> Any:
    if value is None or isinstance(value, _AS_IS):
        return value
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return str(value)


_BEFORE_SEQ = tuple(column for column in sorted(HASHED_COLUMNS) if column < "seq")
_AFTER_SEQ = tuple(column for column in sorted(HASHED_COLUMNS) if column > "seq")
_BODY_COLUMNS = tuple(column for column in HASHED_COLUMNS if column != "seq")
# one encoder for every event (`json.dumps` with options builds a new one at each call)
_encode = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode


def plain_body(event: Mapping[str, Any]) -> dict[str, Any]:
    """Every hashed column but `seq`, as JSON values."""
    return {column: plain(event.get(column)) for column in _BODY_COLUMNS}


def canonical_parts(body: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """The canonical encoding of a `plain_body` cut around the value of `seq`: head + str(seq) +
    tail. (The database numbers the events: `audit_append()` puts the seq in between and hashes.)"""
    head = _encode({column: body[column] for column in _BEFORE_SEQ})[:-1] + ',"seq":'
    tail = "," + _encode({column: body[column] for column in _AFTER_SEQ})[1:]
    return head.encode(), tail.encode()


def canonical(event: Mapping[str, Any]) -> bytes:
    """The JSON of every hashed column, keys sorted, no spaces, UTF-8."""
    head, tail = canonical_parts(plain_body(event))
    return head + _encode(event.get("seq")).encode() + tail


def chain_hash(prev_hash: str, event: Mapping[str, Any]) -> str:
    return hashlib.sha256(prev_hash.encode() + canonical(event)).hexdigest()


@dataclass(frozen=True)
class Verification:
    ok: bool
    checked: int
    first_broken_seq: int | None


def verify(rows: Iterable[Mapping[str, Any]]) -> Verification:
    """Rows in `seq` order."""
    expected_seq, prev, checked = 1, GENESIS, 0
    for row in rows:
        if row["seq"] != expected_seq or row["prev_hash"] != prev or row["hash"] != chain_hash(prev, row):
            return Verification(False, checked, expected_seq if row["seq"] > expected_seq else row["seq"])
        prev, expected_seq, checked = row["hash"], expected_seq + 1, checked + 1
    return Verification(True, checked, None)
