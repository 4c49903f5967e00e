from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Principal:
    """The verified caller: the token's `sub`, and the end user it acts for, if the token says so."""

    name: str
    on_behalf_of: str | None = None
