"""Securables as the authorizer sees them: a type, a full name, and the chain of existing objects
from the metastore down to it (the target last, when it exists)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class SecurableType(StrEnum):
    METASTORE = "METASTORE"
    CATALOG = "CATALOG"
    SCHEMA = "SCHEMA"
    MEMORY_STORE = "MEMORY_STORE"

    @classmethod
    def parse(cls, value: str) -> SecurableType:
        return cls(value.strip().upper().replace("-", "_"))


# Depth of each type in the namespace: the metastore is the root.
DEPTH = {
    SecurableType.METASTORE: 0,
    SecurableType.CATALOG: 1,
    SecurableType.SCHEMA: 2,
    SecurableType.MEMORY_STORE: 3,
}


@dataclass(frozen=True)
class Node:
    type: SecurableType
    full_name: str
    id: str
    owner: str


@dataclass(frozen=True)
class Securable:
    type: SecurableType
    full_name: str
    chain: tuple[Node, ...]
    revision: int | None = None  # the policy revision seen when the chain was read
    # a memory store's scope binding and shared scopes, read with the chain (None: not read)
    scope_rules: tuple[str, tuple[str, ...]] | None = None
    # its trust policy as stored, read with the chain too when `scope_rules` is (None: no policy)
    trust_policy: Mapping[str, Any] | None = None
    # for a search, the head of the entries' change log among the changes of the scopes it
    # reads, read with the chain (None: not read): every change to those scopes' entries
    # committed before the request is at or below it
    changes: int | None = None
    # and whether one of its entries lacked its vector then (None: not read)
    unembedded: bool | None = None
    # its own row, every column, as JSON, read with the chain when asked for (None: not read): the
    # slice owning its table reads it (`namespace.repo.store_of_row`)
    row: Mapping[str, Any] | None = None

    @property
    def exists(self) -> bool:
        return len(self.chain) == DEPTH[self.type] + 1

    @property
    def node(self) -> Node:
        assert self.exists, f"{self.full_name} does not exist"
        return self.chain[-1]

    @property
    def kind(self) -> str:
        """Lower-case name used in messages: 'catalog', 'schema', 'memory store'."""
        return self.type.value.lower().replace("_", " ")
