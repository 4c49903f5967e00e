"""A vector index of its own for each very large scope (a partial HNSW index).

pgvector filters an HNSW scan after the fact (unless its iterative scans continue it, which
measured no better here: bench/vector_filter.py): to find 30 rows of a scope that holds a tenth of
the entries, the scan of the whole table's graph must take 480 candidates. A scope with an index
of its own is searched in its own graph, for a few hundred candidates (`VectorSearch.own_candidates`).

Rules:
- a scope of at least `min_entries` entries (among the `MAX_INDEXES` largest) gets `CREATE INDEX
  CONCURRENTLY ... WHERE store_id = <store> AND scope = <scope>` (writes go on while it builds);
  one that has shrunk below half of that loses it (`DROP INDEX CONCURRENTLY`), as does one whose
  store is gone or that is no longer among the largest;
- an index's name is derived from its store and scope (`entries_hnsw_s_<md5>`), so every process
  finds the same one; a build interrupted by a crash leaves an invalid index, which is dropped and
  built again; the values in the predicate are quoted by PostgreSQL (`format('%L')`; the SQL is
  in `catalog.search.scope_index_repo`);
- one process maintains them at a time (an advisory lock); searches use an index only once it is
  valid (`VectorSearch` asks `ready_index`).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass

import asyncpg

from catalog.search import scope_index_repo as repo

log = logging.getLogger("catalog.search")

# A scope's own index orders by inner product (`vector_ip_ops`), the whole table's by cosine: every
# vector is L2-normalised, so both order alike, and a query ordering by inner product can only be
# answered by a scope's own index (PostgreSQL 18's planner, with pgvector 0.8's costs, otherwise
# prefers the whole table's graph with a filter)
PREFIX = "entries_hnsw_ip_"
# the own indexes of earlier versions (by cosine): dropped by the maintenance, rebuilt under PREFIX
EARLIER_PREFIXES = ("entries_hnsw_s_",)
_LOCK = 0x5C09E1DE  # the advisory lock of the maintenance (any process, one at a time)
BUILD_MEMORY = "512MB"  # maintenance_work_mem while an index is built
# at most this many scopes have an index of their own, the largest: every index on the table is
# maintained on each write to its scope and weighed by the planner on each query of the table
MAX_INDEXES = 64


def index_name(store_id: str, scope: str) -> str:
    digest = hashlib.md5(f"{store_id}/{scope}".encode(), usedforsecurity=False).hexdigest()
    return PREFIX + digest


@dataclass(frozen=True)
class Maintained:
    built: list[tuple[str, str]]  # (store id, scope)
    dropped: list[str]  # index names


async def ready_index(conn: asyncpg.Connection | asyncpg.Pool, store_id: str, scope: str) -> bool:
    """Whether the scope's own index exists and may be used."""
    return await repo.index_ready(conn, index_name(store_id, scope))


async def maintain(pool: asyncpg.Pool, min_entries: int) -> Maintained:
    """Build the indexes large scopes lack and drop those no longer needed (see the rules)."""
    built: list[tuple[str, str]] = []
    dropped: list[str] = []
    async with pool.acquire() as conn:
        if not await repo.try_lock(conn, _LOCK):
            return Maintained(built, dropped)  # another process is at it
        try:
            rows = await repo.largest_scopes(conn, max(1, min_entries // 2), MAX_INDEXES)
            keep = {index_name(r["store_id"], r["scope"]): r for r in rows}
            for earlier in EARLIER_PREFIXES:
                for name in await repo.indexes_named(conn, earlier):
                    await repo.drop_index(conn, name)
                    dropped.append(name)
            existing = await repo.indexes_named(conn, PREFIX)
            for name, valid in existing.items():
                if name not in keep or not valid:  # shrunk, store gone, or a build that died
                    await repo.drop_index(conn, name)
                    dropped.append(name)
            for name, row in keep.items():
                if row["n"] < min_entries or existing.get(name):
                    continue
                # the graph of 100k vectors takes about 200 MB; built in memory it is several
                # times faster than spilled (the setting lasts until the connection is reset below)
                await repo.set_build_memory(conn, BUILD_MEMORY)
                log.info(
                    "building the vector index of a large scope",
                    extra={"store_id": row["store_id"], "entries": row["n"], "index": name},
                )
                await repo.build_index(conn, name, row["store_id"], row["scope"])
                built.append((row["store_id"], row["scope"]))
        finally:
            await repo.reset_build_memory(conn)
            await repo.unlock(conn, _LOCK)
    return Maintained(built, dropped)
