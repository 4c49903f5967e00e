"""The scope limits of a request: the actions it was allowed on a store only in some scopes
(grants limited to scopes), each to be held to the scopes the request reaches there, and those
scopes. Kept by the access seam for the request's pending audit event (`catalog.recorder.current`:
the request, or one operation inside it, such as a tool call), whose lifetime they share: a new
operation starts with none, as it starts with no decision.

Rules:
- `Authorizer.check` keeps an action allowed only in some scopes (`note`); where there is no
  pending event to keep it with (no request), the caller refuses: a limit nobody checks is none;
- `Access.hold_scopes` adds the scopes a request reaches and holds every limit on that store to
  them; a limit never held refuses the request's answer (`unheld`, checked by the web middleware
  before a success goes out);
- the patterns of the limits and the scopes reached are what a decision's reason names: the audit
  event keeps them as pseudonyms (`named`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

from catalog.recorder.writer import PendingEvent, current


@dataclass
class ScopeLimit:
    """An action allowed on a store only in the scopes `patterns` match, and whether the request
    has held the scopes it reaches to them."""

    action_name: str
    securable_id: str
    full_name: str
    patterns: tuple[str, ...]
    reason: str
    held: bool = False


@dataclass
class _Held:
    limits: list[ScopeLimit] = field(default_factory=list)
    reached: dict[str, set[str]] = field(default_factory=dict)  # securable id → scopes held so far


_BY_EVENT: WeakKeyDictionary[PendingEvent, _Held] = WeakKeyDictionary()


def _held(*, create: bool = False) -> _Held | None:
    """The current request's limits; made only for what adds to them (`create`): a request
    whose decisions are all whole, the usual one, keeps nothing."""
    pending = current.get()
    if pending is None:
        return None
    held = _BY_EVENT.get(pending)
    if held is None and create:
        held = _BY_EVENT[pending] = _Held()
    return held


def note(action_name: str, securable: Any, decision: Any) -> ScopeLimit | None:
    """Keep an action allowed only in some scopes (one per action and store), for the scopes the
    request reaches to be held to it. None when there is no request to keep it in."""
    held = _held(create=True)
    if held is None:
        return None
    for limit in held.limits:
        if limit.action_name == action_name and limit.securable_id == securable.node.id:
            return limit
    limit = ScopeLimit(action_name, securable.node.id, securable.full_name, decision.scopes, decision.reason)
    held.limits.append(limit)
    return limit


def on(securable_id: str) -> list[ScopeLimit]:
    """The current request's scope limits on a securable."""
    held = _held()
    return [] if held is None else [limit for limit in held.limits if limit.securable_id == securable_id]


def reached(securable_id: str) -> set[str]:
    """The scopes of a securable the current request has reached so far (held to its limits);
    the set is the request's own, to add to."""
    held = _held(create=True)
    return set() if held is None else held.reached.setdefault(securable_id, set())


def named() -> tuple[list[str], list[str]]:
    """The patterns of the current request's limits and the scopes it reached: what a decision's
    reason may name, kept as pseudonyms in its audit event."""
    held = _held()
    if held is None:
        return [], []
    patterns = [p for limit in held.limits for p in limit.patterns]
    return patterns, [scope for scopes in held.reached.values() for scope in scopes]


def scopes_reached(pending: PendingEvent) -> list[str]:
    """Every scope a request (its pending event) reached, on any store, sorted: its audit event
    names those no parameter of the request did (`pseudonyms.with_scopes`; a search's scopes
    come in its body)."""
    held = _BY_EVENT.get(pending)
    return [] if held is None else sorted({scope for scopes in held.reached.values() for scope in scopes})


def unheld(pending: PendingEvent) -> ScopeLimit | None:
    """A scope limit the request (its pending event) never held its scopes to: its answer must
    not go out."""
    held = _BY_EVENT.get(pending)
    return None if held is None else next((limit for limit in held.limits if not limit.held), None)
