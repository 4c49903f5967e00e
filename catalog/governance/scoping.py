"""Scope patterns of grants limited to scopes: an exact scope (`team-a`), or a prefix ending in
`*` (`team-a:*` matches `team-a:x` and `team-a:x:y`, not `team-a`; `*` alone matches every
scope)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

MAX_PATTERNS = 20  # per grant (the grants table holds to it too)


def matches(pattern: str, scope: str) -> bool:
    if pattern.endswith("*"):
        return scope.startswith(pattern[:-1])
    return scope == pattern


def first_outside(patterns: Sequence[str], scopes: Iterable[str]) -> str | None:
    """The first of `scopes` (in sorted order) that no pattern matches, or None."""
    for scope in sorted(scopes):
        if not any(matches(pattern, scope) for pattern in patterns):
            return scope
    return None
