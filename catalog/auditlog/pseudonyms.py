"""Pseudonyms for the audit log: scopes, entry paths and end users are kept in events as keyed
hashes, so that erasing a data subject can unlink them without touching the hash chain.

Rules:
- a scope's subject is what comes before its first `:` (`alice` for `alice` and `alice:project-x`);
  each subject has a random key in `subject_keys`, created with its first event, outside the
  chain (the auditor role cannot read it);
- in an event, the values of `scope`, `actor_id`, `scopes`, `actor_ids` (request parameters) and
  the `on_behalf_of` column become `ps_<hex>` = HMAC-SHA256(key of their subject, kind, value);
  `path` and `path_prefix` are keyed with the subject of the event's (first) scope, or of its end
  user, and stay as they are when the event names neither;
- the server recomputes a scope's pseudonym to answer `GET /system/audit?scope=` while the key
  exists; erasing the subject deletes the key (crypto-shredding): the events stay and the chain
  verifies, but nothing left can tie them to the subject again.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable, Sequence
from typing import Any

import asyncpg

SCOPE_KEYS = ("scope", "actor_id")
SCOPE_LISTS = ("scopes", "actor_ids")
PATH_KEYS = ("path", "path_prefix")
PREFIX = "ps_"


def subject_of(scope: str) -> str:
    return scope.split(":", 1)[0]


def pseudonym(key: bytes, kind: str, value: str) -> str:
    digest = hmac.new(key, f"{kind}\x00{value}".encode(), hashlib.sha256).hexdigest()
    return PREFIX + digest[:40]


def _scopes_of(event: dict[str, Any]) -> list[str]:
    params = event.get("request_params") or {}
    found = [params[k] for k in SCOPE_KEYS if isinstance(params.get(k), str)]
    for key in SCOPE_LISTS:
        values = params.get(key)
        if isinstance(values, list):
            found += [v for v in values if isinstance(v, str)]
    if isinstance(event.get("on_behalf_of"), str):
        found.append(event["on_behalf_of"])
    return found


async def keys_for(conn: asyncpg.Connection | asyncpg.Pool, subjects: Iterable[str]) -> dict[str, bytes]:
    """The subjects' keys, created for those that have none (in the caller's transaction, so a
    key exists exactly when an event made with it does)."""
    wanted = sorted(set(subjects))
    if not wanted:
        return {}
    fresh = [secrets.token_bytes(32) for _ in wanted]
    for _ in range(3):  # a concurrent first event of the same subject: read what it committed
        rows = await conn.fetch(
            "WITH new AS (INSERT INTO subject_keys (subject, key) "
            "SELECT * FROM unnest($1::text[], $2::bytea[]) "
            "ON CONFLICT (subject) DO NOTHING RETURNING subject, key) "
            "SELECT subject, key FROM new UNION ALL "
            "SELECT subject, key FROM subject_keys WHERE subject = ANY($1::text[])",
            wanted,
            fresh,
        )
        keys = {row["subject"]: bytes(row["key"]) for row in rows}
        if len(keys) == len(wanted):
            return keys
    raise RuntimeError("could not read or create the audit keys of " + ", ".join(wanted))


DONE = "_pseudonymized"  # marks an event already rewritten (an append retried after a failure)


async def pseudonymize(conn: asyncpg.Connection | asyncpg.Pool, events: Sequence[dict[str, Any]]) -> None:
    """Replace, in place, the scopes, paths and end users of the events by their pseudonyms (once:
    an event appended again keeps the pseudonyms it got)."""
    todo = [event for event in events if not event.get(DONE)]
    subjects = {subject_of(scope) for event in todo for scope in _scopes_of(event)}
    keys = await keys_for(conn, subjects) if subjects else {}
    for event in todo:
        event[DONE] = True
        scopes = _scopes_of(event)
        if not scopes:
            continue
        params = dict(event.get("request_params") or {})

        def hide(value: str, kind: str = "scope") -> str:
            return pseudonym(keys[subject_of(value)], kind, value)

        for key in SCOPE_KEYS:
            if isinstance(params.get(key), str):
                params[key] = hide(params[key])
        for key in SCOPE_LISTS:
            if isinstance(params.get(key), list):
                params[key] = [hide(v) if isinstance(v, str) else v for v in params[key]]
        owner = keys[subject_of(scopes[0])]
        for key in PATH_KEYS:
            if isinstance(params.get(key), str):
                params[key] = pseudonym(owner, "path", params[key])
        if isinstance(event.get("on_behalf_of"), str):
            event["on_behalf_of"] = hide(event["on_behalf_of"])
        event["request_params"] = params


async def scope_pseudonym(conn: asyncpg.Connection | asyncpg.Pool, scope: str) -> str | None:
    """What events hold for `scope`, or None when its subject has no key (never seen, or erased)."""
    key = await conn.fetchval("SELECT key FROM subject_keys WHERE subject = $1", subject_of(scope))
    return None if key is None else pseudonym(bytes(key), "scope", scope)


async def forget(conn: asyncpg.Connection, subject: str) -> bool:
    """Destroy the subject's key (crypto-shredding); whether there was one."""
    status: str = await conn.execute("DELETE FROM subject_keys WHERE subject = $1", subject)
    return status.endswith(" 1")
