"""Casbin, the engine that decides. `policies/model.conf` (the package `catalog.policies`) states
the rules; this module hands the engine, per check, only the slice of the policy that can matter:
the grants and ownerships on the securable's own chain (metastore → catalog → schema → store)
held by the caller or one of its groups, the caller's group edges (g), and the chain's parent edges (g2).

Why a slice: pycasbin's `enforce()` evaluates the matcher once per policy line (several µs each), so
handing it every grant would cost tens of ms per check at 100,000 grants. A slice has a handful
of lines whatever the total. The engine is synchronous and used from the event loop's thread
only, so loading a slice and enforcing on it cannot interleave with another check.
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any

import casbin

# Package data, read through importlib.resources so that an installed wheel finds it.
MODEL: Traversable = files("catalog.policies") / "model.conf"  # policies/ in the tree


class _Enforcer(casbin.Enforcer):
    """pycasbin re-parses the matcher on every call; the matcher is fixed, so parse it once.
    The g/g2 functions it closes over are the enforcer's own role managers, which `load`
    refills in place, so the cached expression always sees the current slice."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._expressions: dict[str, Any] = {}  # per enforcer: it closes over this one's role managers
        super().__init__(*args, **kwargs)

    def _get_expression(self, expr: str, functions: Any = None) -> Any:  # type: ignore[override]
        expression = self._expressions.get(expr)
        if expression is None:
            expression = self._expressions[expr] = casbin.Enforcer._get_expression(expr, functions)
        return expression


class CasbinEngine:
    def __init__(self, model: Traversable = MODEL) -> None:
        self.enforcer = _Enforcer(casbin.Enforcer.new_model(text=model.read_text(encoding="utf-8")))
        self.enforcer.enable_log = False  # type: ignore[attr-defined]
        self._policy = self.enforcer.model.model["p"]["p"]
        self._members = self.enforcer.rm_map["g"]
        self._parents = self.enforcer.rm_map["g2"]

    @property
    def max_group_depth(self) -> int:
        """How many membership hops the engine follows (pycasbin's role manager limit)."""
        return int(self._members.max_hierarchy_level)

    def load(
        self,
        lines: list[list[str]],
        member_edges: Iterable[tuple[str, str]],
        parent_edges: Iterable[tuple[str, str]],
    ) -> None:
        self._policy.policy = lines
        self._members.clear()
        for child, group in member_edges:
            self._members.add_link(child, group)
        self._parents.clear()
        for child, parent in parent_edges:
            self._parents.add_link(child, parent)

    def enforce(self, sub: str, obj: str, act: str) -> tuple[bool, list[str] | None]:
        """Whether the loaded slice allows (sub, obj, act), and the policy line that did."""
        allowed, explain = self.enforcer.enforce_ex(sub, obj, act)
        return bool(allowed), (list(explain) if allowed and explain else None)
