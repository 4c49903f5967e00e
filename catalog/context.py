"""What every slice's service needs, built once by the composition root (`catalog.runtime`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import asyncpg

from catalog.governance import Access, Authorizer, Node
from catalog.llm import ChatModel
from catalog.search import SearchEngine
from catalog.settings import Settings


class ScopeEraser(Protocol):
    """Deletes a scope's rows (with `subject`: also of every scope starting `scope:`) from one
    store, or every store not under legal hold when given None; how many."""

    def __call__(
        self, conn: asyncpg.Connection, store_id: str | None, scope: str, *, subject: bool = False
    ) -> Awaitable[int]: ...


class ScopeHolder(Protocol):
    """The stores under legal hold (full names) in which a slice keeps rows of the scope (with
    `subject`: also of every scope starting `scope:`): its eraser leaves them there."""

    def __call__(
        self, conn: asyncpg.Connection, scope: str, *, subject: bool = False
    ) -> Awaitable[list[str]]: ...


@dataclass(frozen=True)
class Context:
    settings: Settings
    pool: asyncpg.Pool
    access: Access  # the one access seam (catalog.governance.access)
    search: SearchEngine | None = None  # None only in tools that never touch entries
    # What else a scope holds besides entries, by name (`conversations`, `sessions`): each eraser
    # deletes a scope's rows from one store, or from every store when given None, in the erasing
    # transaction, and answers how many. Slices above `entries` register theirs in the
    # composition root.
    scope_erasers: tuple[tuple[str, ScopeEraser], ...] = ()
    scope_holders: tuple[ScopeHolder, ...] = ()  # the same slices' held stores (see ScopeHolder)
    llm: ChatModel | None = None  # the upstream model (catalog.llm), None when not configured
    expiry_wake: Callable[[], None] | None = None  # an entry with an expiry was written

    @property
    def authorizer(self) -> Authorizer:
        return self.access.authorizer

    @property
    def metastore(self) -> Node:
        return self.access.metastore  # the root securable; its full name is the metastore id

    @property
    def metastore_id(self) -> str:
        return self.access.metastore_id
