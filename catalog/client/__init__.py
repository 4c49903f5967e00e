"""A Python client of the memory catalog's API, for applications and people who talk to a
server over HTTP (it needs httpx and msgspec, and nothing of the server).

    from catalog.client import Client

    with Client("http://127.0.0.1:8080", token) as catalog:
        catalog.memory_stores.create("main.default.support", description="what support learned")
        store = catalog.store("main.default.support")
        store.write("user-123", "/prefs.md", "Prefers email.", write_mode="OVERWRITE")
        for hit in store.search("user-123", "how to contact"):
            print(hit.score, hit.entry.path)
        catalog.grants.update("memory_store", "main.default.support", "data-team",
                              add=["READ_MEMORY_STORE"])

`AsyncClient` has the same methods, awaited (lists are async iterators). Failures raise
`CatalogError` with `.status`, `.error_code` and `.message`.
"""

from catalog.client._async import AsyncClient, AsyncStore
from catalog.client._core import Call, Retry
from catalog.client._sync import Client, Store
from catalog.client.errors import CatalogError
from catalog.client.types import (
    AuditEvent,
    AuditVerification,
    Catalog,
    DeletedEntry,
    DeletedMatching,
    EffectivePrivilege,
    EffectivePrivilegeAssignment,
    Entry,
    EntrySummary,
    EntryVersion,
    Group,
    GroupMember,
    Lineage,
    LineageEdge,
    LineageEnd,
    MemoryStore,
    MetastoreSummary,
    OriginEdge,
    PrivilegeAssignment,
    Schema,
    SearchHit,
    SearchHits,
    TranscriptEnd,
)

__all__ = [
    "AsyncClient",
    "AsyncStore",
    "AuditEvent",
    "AuditVerification",
    "Call",
    "Catalog",
    "CatalogError",
    "Client",
    "DeletedEntry",
    "DeletedMatching",
    "EffectivePrivilege",
    "EffectivePrivilegeAssignment",
    "Entry",
    "EntrySummary",
    "EntryVersion",
    "Group",
    "GroupMember",
    "Lineage",
    "LineageEdge",
    "LineageEnd",
    "MemoryStore",
    "MetastoreSummary",
    "OriginEdge",
    "PrivilegeAssignment",
    "Retry",
    "Schema",
    "SearchHit",
    "SearchHits",
    "Store",
    "TranscriptEnd",
]
