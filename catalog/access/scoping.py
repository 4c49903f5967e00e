"""Scope patterns of grants limited to scopes: an exact scope (`team-a`), or a prefix ending in
`*` (`team-a:*` matches `team-a:x` and `team-a:x:y`, not `team-a`; `*` alone matches every
scope). A pattern that matches one data subject's scopes only is that subject's
(`subject_of_pattern`)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from catalog.errors import InvalidParameter
from catalog.recorder import pseudonyms
from catalog.wire.entry_keys import validate_scope

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


def subject_of_pattern(pattern: str) -> str | None:
    """The one data subject whose scopes are all a pattern matches (a scope's subject is what
    comes before its first `:`): the subject of an exact scope (`alice`, `alice:x`) or of a prefix
    holding a `:` (`alice:*`, `alice:x*`); None for a prefix that matches several subjects' scopes
    (`ali*`, `alice*`, `*`). Erasing a subject takes its patterns out of grants; the audit log
    keys a reason's patterns by the same rule (`catalog.recorder.pseudonyms`)."""
    return pseudonyms.subject_of_pattern(pattern)


def validate_pattern(pattern: str, field: str) -> str:
    """A scope pattern as a grant takes it: a scope (`validate_scope`'s rules) with `*` at most
    at its end (400 naming `field` otherwise)."""
    validate_scope(pattern, field)
    if "*" in pattern[:-1]:
        raise InvalidParameter(f"{field} is a scope or a prefix ending in '*': '*' only at its end", field)
    return pattern
