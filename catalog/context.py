from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from catalog.governance import Authorizer, Node
from catalog.search import SearchEngine
from catalog.settings import Settings


@dataclass(frozen=True)
class Context:
    """What every service function needs, built once in the app's lifespan."""

    settings: Settings
    pool: asyncpg.Pool
    authorizer: Authorizer
    metastore: Node  # the root securable; its full name is the metastore id
    search: SearchEngine | None = None  # None only in tools that never touch entries

    @property
    def metastore_id(self) -> str:
        return self.metastore.id
