"""Every action the server performs, declared once, with the privilege it needs and on what.

A route names its action; `Authorizer.authorize` looks the requirement up here. A test checks that
every route's action is declared and documented.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from catalog.governance.securables import SecurableType


class Privilege(StrEnum):
    CREATE_CATALOG = "CREATE_CATALOG"
    USE_CATALOG = "USE_CATALOG"
    CREATE_SCHEMA = "CREATE_SCHEMA"
    USE_SCHEMA = "USE_SCHEMA"
    CREATE_MEMORY_STORE = "CREATE_MEMORY_STORE"
    READ_MEMORY_STORE = "READ_MEMORY_STORE"
    WRITE_MEMORY_STORE = "WRITE_MEMORY_STORE"
    MANAGE = "MANAGE"
    ALL_PRIVILEGES = "ALL_PRIVILEGES"
    READ_AUDIT = "READ_AUDIT"


@dataclass(frozen=True)
class Action:
    name: str
    on: SecurableType
    privilege: Privilege | None  # None: open to every authenticated principal
    description: str
    data: bool = False  # touches entries: ownership of an ancestor alone does not grant it


_S = SecurableType
_P = Privilege

ACTIONS: dict[str, Action] = {
    a.name: a
    for a in [
        Action("metastore.summary", _S.METASTORE, None, "read the metastore summary"),
        Action("catalog.create", _S.METASTORE, _P.CREATE_CATALOG, "create a catalog"),
        Action("catalog.list", _S.METASTORE, None, "list the catalogs the caller may use or owns"),
        Action("catalog.get", _S.CATALOG, _P.USE_CATALOG, "read a catalog"),
        Action("catalog.update", _S.CATALOG, _P.MANAGE, "update a catalog or transfer its ownership"),
        Action("catalog.delete", _S.CATALOG, _P.MANAGE, "delete a catalog"),
        Action("schema.create", _S.CATALOG, _P.CREATE_SCHEMA, "create a schema in a catalog"),
        Action("schema.list", _S.CATALOG, _P.USE_CATALOG, "list the schemas of a catalog"),
        Action("schema.get", _S.SCHEMA, _P.USE_SCHEMA, "read a schema"),
        Action("schema.update", _S.SCHEMA, _P.MANAGE, "update a schema or transfer its ownership"),
        Action("schema.delete", _S.SCHEMA, _P.MANAGE, "delete a schema"),
        Action("memory_store.create", _S.SCHEMA, _P.CREATE_MEMORY_STORE, "create a memory store in a schema"),
        Action("memory_store.list", _S.SCHEMA, _P.USE_SCHEMA, "list the memory stores of a schema"),
        Action("memory_store.get", _S.MEMORY_STORE, _P.READ_MEMORY_STORE, "read a memory store's metadata"),
        Action("memory_store.update", _S.MEMORY_STORE, _P.MANAGE, "update a memory store or its owner"),
        Action("memory_store.delete", _S.MEMORY_STORE, _P.MANAGE, "delete a memory store"),
    ]
}


def action(name: str) -> Action:
    return ACTIONS[name]
