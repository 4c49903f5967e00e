"""What every slice's service needs, built once by the composition root (`catalog.runtime`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import asyncpg

from catalog.access import Access, Authorizer, Node
from catalog.llm import ChatModel
from catalog.search import SearchEngine
from catalog.settings import Settings


@dataclass(frozen=True)
class Context:
    settings: Settings
    pool: asyncpg.Pool
    access: Access  # the one access seam (catalog.access.seam)
    search: SearchEngine | None = None  # None only in tools that never touch entries
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
