"""Pseudonyms for the audit log: scopes, entry paths, filter values and end users are kept in
events as keyed hashes, so that erasing a data subject can unlink them without touching the hash
chain. This module is the one place where any of them is turned into what an event holds.

Rules:
- a scope's subject is what comes before its first `:` (`alice` for `alice` and `alice:project-x`);
  each subject has a random key in `subject_keys`, created with its first event, outside the
  chain (the auditor role cannot read it). The table holds no clear-text subject: a key is found
  by the subject's keyed hash, sha256(pepper || subject), the pepper being one random value of
  the database (`audit_pepper`, also unreadable to auditors), computed in SQL (`repo`);
- in an event, the values of `scope`, `actor_id`, `scopes`, `actor_ids` (request parameters: a
  list, or one string when given once) and the `on_behalf_of` column become `ps_<hex>` =
  HMAC-SHA256(key of their subject, kind, value);
- `path`, `path_prefix` and `filter` (a metadata filter, whose values may name anyone) are keyed
  with the subject of the event's (first) scope, or of its end user; an event that names neither
  keeps its paths as they are and its filter as `[redacted]` (no subject's key could ever unlink it);
- an auditors' search for a scope (`audit.read`) names the scope it looks for without creating a
  key: a subject never seen, or erased, gets a throwaway key, so looking for an erased subject
  leaves nothing that names it;
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

from catalog.audit.log import repo

SCOPE_KEYS = ("scope", "actor_id")
SCOPE_LISTS = ("scopes", "actor_ids")
PATH_KEYS = ("path", "path_prefix")
FILTER_KEYS = ("filter",)
PREFIX = "ps_"
REDACTED = "[redacted]"
# actions whose scope parameters look a scope up rather than act on it: they create no key
LOOKUPS = frozenset({"audit.read"})


def subject_of(scope: str) -> str:
    return scope.split(":", 1)[0]


def pseudonym(key: bytes, kind: str, value: str) -> str:
    digest = hmac.new(key, f"{kind}\x00{value}".encode(), hashlib.sha256).hexdigest()
    return PREFIX + digest[:40]


def _listed(value: Any) -> list[str]:
    """A list parameter's scopes: a list, or one string (the parameter given once)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def _scopes_of(event: dict[str, Any]) -> list[str]:
    params = event.get("request_params") or {}
    found = [params[k] for k in SCOPE_KEYS if isinstance(params.get(k), str)]
    for key in SCOPE_LISTS:
        found += _listed(params.get(key))
    if isinstance(event.get("on_behalf_of"), str):
        found.append(event["on_behalf_of"])
    return found


async def keys_for(
    conn: asyncpg.Connection | asyncpg.Pool, subjects: Iterable[str], *, create: bool = True
) -> dict[str, bytes]:
    """The subjects' keys, created for those that have none (in the caller's transaction, so a
    key exists exactly when an event made with it does); with `create=False`, only the existing
    ones."""
    wanted = sorted(set(subjects))
    if not wanted:
        return {}
    if not create:
        return await repo.existing_keys(conn, wanted)
    fresh = [secrets.token_bytes(32) for _ in wanted]
    for _ in range(3):  # a concurrent first event of the same subject: read what it committed
        keys = await repo.create_keys(conn, wanted, fresh)
        if len(keys) == len(wanted):
            return keys
    raise RuntimeError(f"could not read or create the audit keys of {len(wanted)} subjects")


DONE = "_pseudonymized"  # marks an event already rewritten (an append retried after a failure)


async def pseudonymize(conn: asyncpg.Connection | asyncpg.Pool, events: Sequence[dict[str, Any]]) -> None:
    """Replace, in place, the scopes, paths, filters and end users of the events by their
    pseudonyms (once: an event appended again keeps the pseudonyms it got)."""
    todo = [event for event in events if not event.get(DONE)]
    lookups = {id(event) for event in todo if event.get("action_name") in LOOKUPS}
    subjects = {
        subject_of(scope) for event in todo if id(event) not in lookups for scope in _scopes_of(event)
    }
    keys = await keys_for(conn, subjects) if subjects else {}
    looked_up = {subject_of(scope) for event in todo if id(event) in lookups for scope in _scopes_of(event)}
    if looked_up - keys.keys():
        keys.update(await keys_for(conn, looked_up - keys.keys(), create=False))
    for event in todo:
        event[DONE] = True
        params = dict(event.get("request_params") or {})
        scopes = _scopes_of(event)
        if not scopes:
            for key in FILTER_KEYS:
                if key in params:
                    params[key] = REDACTED
            event["request_params"] = params
            continue
        for subject in {subject_of(scope) for scope in scopes} - keys.keys():
            keys[subject] = secrets.token_bytes(32)  # a lookup of a subject without a key: unlinkable

        def hide(value: str, kind: str = "scope") -> str:
            return pseudonym(keys[subject_of(value)], kind, value)

        for key in SCOPE_KEYS:
            if isinstance(params.get(key), str):
                params[key] = hide(params[key])
        for key in SCOPE_LISTS:
            if isinstance(params.get(key), str):
                params[key] = hide(params[key])
            elif isinstance(params.get(key), list):
                params[key] = [hide(v) if isinstance(v, str) else v for v in params[key]]
        owner = keys[subject_of(scopes[0])]
        for key in (*PATH_KEYS, *FILTER_KEYS):
            if isinstance(params.get(key), str):
                params[key] = pseudonym(owner, key if key in FILTER_KEYS else "path", params[key])
            elif isinstance(params.get(key), list):  # a single-valued parameter repeated
                params[key] = [REDACTED for _ in params[key]]
        if isinstance(event.get("on_behalf_of"), str):
            event["on_behalf_of"] = hide(event["on_behalf_of"])
        event["request_params"] = params


async def scope_pseudonym(conn: asyncpg.Connection | asyncpg.Pool, scope: str) -> str | None:
    """What events hold for `scope`, or None when its subject has no key (never seen, or erased)."""
    key = await repo.subject_key(conn, subject_of(scope))
    return None if key is None else pseudonym(key, "scope", scope)


async def forget(conn: asyncpg.Connection, subject: str) -> bool:
    """Destroy the subject's key (crypto-shredding); whether there was one."""
    return await repo.delete_subject_key(conn, subject)
