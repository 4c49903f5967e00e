"""Pseudonyms for the audit log: scopes, entry paths, filter values and end users are kept in
events as keyed hashes, so that erasing a data subject can unlink them without touching the hash
chain. This module is the one place where any of them is turned into what an event holds, at
write time, for every event (`writer.append_on` calls `pseudonymize` before anything is hashed):
no caller can forget it.

Rules:
- a scope's subject is what comes before its first `:` (`alice` for `alice` and `alice:project-x`);
  each subject has a random key in `subject_keys`, created with its first event, outside the
  chain (the auditor role cannot read it). The table holds no clear-text subject: a key is found
  by the subject's keyed hash, sha256(pepper || subject), the pepper being one random value of
  the database (`audit_pepper`, also unreadable to auditors), computed in SQL (`repo`);
- every parameter an event may carry is declared once, in `catalog.event_params`, with how it is
  kept: in clear (names of stores, ids, counts, flags), as a scope or end user (`SCOPE_KEYS`,
  `SCOPE_LISTS`), as a path (`PATH_KEYS`: an entry's path, and the paths a tool call names: `by`,
  `into`, `paths`, `sources`, `written`) or a filter (`FILTER_KEYS`), or never (`[redacted]`:
  texts, page tokens); a parameter it does not declare is kept as `[redacted]` and noted;
- in an event, the values of `SCOPE_KEYS` and `SCOPE_LISTS` (a list, or one string when given
  once) and the `on_behalf_of` column become `ps_<hex>` = HMAC-SHA256(key of their subject, kind,
  value);
- `PATH_KEYS` (one path or a list) and `filter` (a metadata filter, whose values may name anyone)
  are keyed with the subject of the event's (first) scope, or of its end user; an event that names
  neither keeps its paths and its filter as `[redacted]` (no subject's key could ever unlink them);
- the `reason` keeps the scopes and scope patterns it names as pseudonyms too: those the request's
  decisions named (`mark`, called by `writer.note_decision`: the patterns of grants limited to
  scopes, the scopes held to them) and the event's own scopes. A pattern is keyed with the one
  subject whose scopes are all it matches (`alice`, `alice:*`); one that matches several
  subjects' scopes (`ali*`, `*`) is no subject's and stays as it is;
- an auditors' search for a scope (`audit.read`) names the scope it looks for without creating a
  key: a subject never seen, or erased, gets a throwaway key, so looking for an erased subject
  leaves nothing that names it;
- the server recomputes a scope's pseudonym to answer `GET /system/audit?scope=` while the key
  exists; erasing the subject deletes the key (crypto-shredding): the events stay and the chain
  verifies, but nothing left can tie them to the subject again (the deleted row's bytes stay in
  the table's files until it is rewritten: docs/audit/erasure.md says what stays on disk).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import asyncpg

from catalog.event_params import PARAMS, REDACTED, UNDECLARED, Kept, keys_of
from catalog.recorder import repo

# the parameters that hold a scope, a path or a value naming anyone (catalog.event_params declares
# every parameter an event may carry, and how it is kept)
SCOPE_KEYS = keys_of(Kept.SCOPE)  # a scope, or an end user (the scope it acts in)
SCOPE_LISTS = keys_of(Kept.SCOPES)  # a list of them, or one string (the parameter given once)
PATH_KEYS = keys_of(Kept.PATH)  # an entry's path or the start of one; the paths an action names
FILTER_KEYS = keys_of(Kept.FILTER)
PREFIX = "ps_"
# actions whose scope parameters look a scope up rather than act on it: they create no key
LOOKUPS = frozenset({"audit.read"})
# around a scope (`s`) or a scope pattern (`p`) a reason names, until `pseudonymize` keys it (a
# scope holds no control character, so no scope holds a mark)
_OPEN, _CLOSE = "\x02", "\x03"
_MARKED = re.compile(f"{_OPEN}([sp])([^{_OPEN}{_CLOSE}]*){_CLOSE}")
_MARKS = re.compile(f"({_OPEN}[sp][^{_OPEN}{_CLOSE}]*{_CLOSE})")


def subject_of(scope: str) -> str:
    return scope.split(":", 1)[0]


def subject_of_pattern(pattern: str) -> str | None:
    """The one subject whose scopes are all a scope pattern of a grant matches: a scope's (`alice`,
    `alice:x`), or a prefix's ending in `*` that holds a `:` (`alice:*`, `alice:x*`); None for a
    prefix that matches several subjects' scopes (`ali*`, `alice*`, `*`). Grants use the same rule
    (`access.scoping.subject_of_pattern`): erasing a subject takes its patterns out of them."""
    if pattern.endswith("*"):
        prefix = pattern[:-1]
        return subject_of(prefix) if ":" in prefix else None
    return subject_of(pattern)


def pseudonym(key: bytes, kind: str, value: str) -> str:
    digest = hmac.new(key, f"{kind}\x00{value}".encode(), hashlib.sha256).hexdigest()
    return PREFIX + digest[:40]


def mark(text: str | None, scopes: Iterable[str] = (), patterns: Iterable[str] = ()) -> str | None:
    """`text` (a decision's reason) with each of `scopes` and scope `patterns` it names marked for
    `pseudonymize` to key: the longest first, each where it stands as a name of its own (after the
    start, a space, `'`, `(` or `,`; before the end, a space, `,`, `;`, `'`, `)` or `: `), not
    inside a longer name. What is already marked stays as it is."""
    if not text:
        return text
    kinds = {v: "p" for v in patterns if v and v in text} | {v: "s" for v in scopes if v and v in text}
    wanted = sorted((v for v in kinds if _OPEN not in v and _CLOSE not in v), key=len, reverse=True)
    if not wanted:
        return text
    named = re.compile(r"(?<![^\s'(,])(" + "|".join(map(re.escape, wanted)) + r")(?=$|[\s,;')]|:(?:\s|$))")
    return "".join(
        part if _MARKS.fullmatch(part) else named.sub(lambda m: f"{_OPEN}{kinds[m[1]]}{m[1]}{_CLOSE}", part)
        for part in _MARKS.split(text)
    )


def _subject(kind: str, value: str) -> str | None:
    """The subject whose key keys a marked value (None: a pattern no one subject's)."""
    return subject_of(value) if kind == "s" else subject_of_pattern(value)


def _listed(value: Any) -> list[str]:
    """A list parameter's scopes: a list, or one string (the parameter given once)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def _params_scopes(params: dict[str, Any]) -> list[str]:
    """The scopes an event's parameters name."""
    found = [params[k] for k in SCOPE_KEYS if isinstance(params.get(k), str)]
    for key in SCOPE_LISTS:
        found += _listed(params.get(key))
    return found


def _scopes_of(event: dict[str, Any]) -> list[str]:
    found = _params_scopes(event.get("request_params") or {})
    if isinstance(event.get("on_behalf_of"), str):
        found.append(event["on_behalf_of"])
    return found


def with_scopes(params: dict[str, Any], reached: Sequence[str]) -> dict[str, Any]:
    """`params` naming, under `scopes`, every scope of `reached` (the scopes a request or an
    operation reached through the access seam) that none of its scope parameters names: an event
    is found by an auditor's `?scope=` for each scope its work reached, whether the scope came in
    a body, or beside a parameter naming another one."""
    if not reached:
        return params
    named = set(_params_scopes(params))
    more = [scope for scope in reached if scope not in named]
    if not more:
        return params
    return {**params, "scopes": [*_listed(params.get("scopes")), *more]}


def _named(event: dict[str, Any]) -> list[tuple[str, str]]:
    """The scopes (`s`) and patterns (`p`) the event's reason names (marked)."""
    reason = event.get("reason")
    return _MARKED.findall(reason) if isinstance(reason, str) else []


class KeyCache:
    """The subjects' keys an audit writer has used, all read at one epoch of `audit_key_epoch`
    (which every erasure of a key moves on, in its transaction), kept for at most `TTL` seconds:
    an event of a subject seen lately is keyed without a statement, and its append is made only
    if the epoch has not moved (`repo.append_batch`); else the writer forgets them all and
    keys the events again with the keys as they are now. An erased key leaves the memory of
    every process within `TTL`, or at its next append."""

    TTL = 60.0
    MAX = 10_000

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.keys: dict[str, bytes] = {}
        self.epoch: int | None = None
        self._clock = clock
        self._until = 0.0  # the clock's time the keys are forgotten

    def get(self, subjects: Sequence[str]) -> dict[str, bytes] | None:
        """Their keys, when every one is held."""
        if self._clock() >= self._until:
            self.forget()
            return None
        keys = self.keys
        return {s: keys[s] for s in subjects} if all(s in keys for s in subjects) else None

    def hold(self, keys: dict[str, bytes], epoch: int) -> None:
        if epoch != self.epoch or len(self.keys) + len(keys) > self.MAX or self._clock() >= self._until:
            self.keys, self.epoch, self._until = {}, epoch, self._clock() + self.TTL
        self.keys.update(keys)

    def forget(self) -> None:
        self.keys, self.epoch, self._until = {}, None, 0.0

    def left(self) -> float | None:
        """Seconds until the keys held are forgotten (None: none is held)."""
        return max(0.0, self._until - self._clock()) if self.keys else None

    def expire(self) -> None:
        """Forget the keys once their time is up (the writer calls it whenever it wakes)."""
        if self.keys and self._clock() >= self._until:
            self.forget()


async def keys_for(
    conn: asyncpg.Connection | asyncpg.Pool,
    subjects: Iterable[str],
    *,
    create: bool = True,
    cache: KeyCache | None = None,
) -> dict[str, bytes]:
    """The subjects' keys, created for those that have none (in the caller's transaction, so a
    key exists exactly when an event made with it does); with `create=False`, only the existing
    ones. With `cache`, those it holds (all of them, or none is taken from it), and it keeps
    those read."""
    wanted = sorted(set(subjects))
    if not wanted:
        return {}
    if not create:
        return await repo.existing_keys(conn, wanted)
    held = cache.get(wanted) if cache is not None else None
    if held is not None:
        return held
    fresh = [secrets.token_bytes(32) for _ in wanted]
    for _ in range(3):  # a concurrent first event of the same subject: read what it committed
        keys, epoch = await repo.create_keys(conn, wanted, fresh)
        if len(keys) == len(wanted):
            if cache is not None:
                cache.hold(keys, epoch)
            return keys
    raise RuntimeError(f"could not read or create the audit keys of {len(wanted)} subjects")


DONE = "_pseudonymized"  # marks an event already rewritten (an append retried after a failure)


async def pseudonymize(
    conn: asyncpg.Connection | asyncpg.Pool, events: Sequence[dict[str, Any]], cache: KeyCache | None = None
) -> int | None:
    """Replace, in place, the scopes, paths, filters and end users of the events, and the scopes
    and patterns their reasons name, by their pseudonyms (once: an event appended again keeps the
    pseudonyms it got). With `cache` (`keys_for`), the epoch of the keys it keyed them with (None
    when it needed none): their append must check it."""
    todo = []
    for event in events:
        if event.get(DONE):
            continue
        reason = event.get("reason")
        if (
            event.get("request_params")
            or isinstance(event.get("on_behalf_of"), str)
            or (isinstance(reason, str) and _OPEN in reason)
        ):
            todo.append(event)
        else:  # names no scope, path, filter or end user (a store's details): nothing to key
            event[DONE] = True
    scopes = [_scopes_of(event) for event in todo]  # each event's own scopes, its first the owner's
    for event, own in zip(todo, scopes, strict=True):  # the event's own scopes, where its reason names them
        if isinstance(event.get("reason"), str):
            event["reason"] = mark(event["reason"], scopes=own)
    subjects = [_subjects_of(event, own) for event, own in zip(todo, scopes, strict=True)]
    lookups = [event.get("action_name") in LOOKUPS for event in todo]
    wanted = {s for theirs, lookup in zip(subjects, lookups, strict=True) if not lookup for s in theirs}
    keys = await keys_for(conn, wanted, cache=cache) if wanted else {}
    looked_up = {s for theirs, lookup in zip(subjects, lookups, strict=True) if lookup for s in theirs}
    if looked_up - keys.keys():
        keys.update(await keys_for(conn, looked_up - keys.keys(), create=False))
    for event, own, theirs in zip(todo, scopes, subjects, strict=True):
        event[DONE] = True
        for subject in theirs - keys.keys():
            keys[subject] = secrets.token_bytes(32)  # a lookup of a subject without a key: unlinkable
        owner = keys[subject_of(own[0])] if own else None
        event["request_params"] = _params(event.get("request_params") or {}, keys, owner)
        if isinstance(event.get("on_behalf_of"), str):
            event["on_behalf_of"] = _hide(keys, "s", event["on_behalf_of"])
        if isinstance(event.get("reason"), str):
            event["reason"] = _MARKED.sub(lambda m: _hide(keys, m[1], m[2]), event["reason"])
    return cache.epoch if cache is not None and wanted else None


def _subjects_of(event: dict[str, Any], scopes: list[str]) -> set[str]:
    """The subjects whose keys an event needs: its scopes' and those its (marked) reason names."""
    named = {_subject(kind, value) for kind, value in _named(event)}
    return {subject_of(scope) for scope in scopes} | {s for s in named if s is not None}


def _hide(keys: dict[str, bytes], kind: str, value: str) -> str:
    """A scope's pseudonym (`kind` s), or a scope pattern's (p: a prefix's is of kind `pattern`);
    a pattern no one subject's stays as it is."""
    subject = _subject(kind, value)
    if subject is None:
        return value
    return pseudonym(keys[subject], "pattern" if kind == "p" and value.endswith("*") else "scope", value)


def _params(params: dict[str, Any], keys: dict[str, bytes], owner: bytes | None) -> dict[str, Any]:
    """The request parameters as an event keeps them; `owner`: the key its paths and filter are
    keyed with (None: the event names no subject, and they are kept as `[redacted]`)."""
    kept = dict(params)
    keyed = False  # whether a parameter is kept as a scope, a path or a filter
    for key, value in params.items():
        declared = PARAMS.get(key)
        if declared is None and value != REDACTED:
            UNDECLARED.add(key)  # a new parameter: declare it in catalog.event_params
        if declared is None or declared is Kept.REDACTED:
            kept[key] = REDACTED
        elif declared is not Kept.CLEAR:
            keyed = True
    if not keyed:
        return kept
    for key in SCOPE_KEYS:
        if isinstance(kept.get(key), str):
            kept[key] = _hide(keys, "s", kept[key])
    for key in SCOPE_LISTS:
        if isinstance(kept.get(key), str):
            kept[key] = _hide(keys, "s", kept[key])
        elif isinstance(kept.get(key), list):
            kept[key] = [_hide(keys, "s", v) if isinstance(v, str) else v for v in kept[key]]
    for key in (*PATH_KEYS, *FILTER_KEYS):
        value = kept.get(key)
        kind = "filter" if key in FILTER_KEYS else "path"
        if isinstance(value, str):
            kept[key] = REDACTED if owner is None else pseudonym(owner, kind, value)
        elif isinstance(value, list):
            # a list of paths is kept path by path; a single-valued parameter repeated is not kept
            kept[key] = [
                pseudonym(owner, kind, v)
                if key in PATH_KEYS and owner is not None and isinstance(v, str)
                else REDACTED
                for v in value
            ]
    return kept


async def scope_pseudonym(conn: asyncpg.Connection | asyncpg.Pool, scope: str) -> str | None:
    """What events hold for `scope`, or None when its subject has no key (never seen, or erased)."""
    key = await repo.subject_key(conn, subject_of(scope))
    return None if key is None else pseudonym(key, "scope", scope)


async def forget(conn: asyncpg.Connection, subject: str) -> bool:
    """Destroy the subject's key (crypto-shredding); whether there was one."""
    return await repo.delete_subject_key(conn, subject)
