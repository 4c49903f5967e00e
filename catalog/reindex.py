"""`catalog reindex`: rebuild the derived search state from PostgreSQL.

- every full-text index slot of the data dir that no running server holds is rebuilt (a slot a
  server holds is skipped and named: that server keeps it current itself);
- entries whose vector is missing or stale are embedded, every entry with `--embeddings`;
- the HNSW index is rebuilt (REINDEX).
Progress goes to stderr, a summary to stdout.
"""

from __future__ import annotations

import asyncio
import sys
import time

import asyncpg

from catalog.auditlog.writer import record_system_events
from catalog.db import create_pool
from catalog.runtime import database_url_for_tools, load_encoder, prepare_database
from catalog.search import SearchEngine, repo
from catalog.search.embedder import Embedder
from catalog.search.fulltext import FullTextIndex
from catalog.search.indexer import Indexer
from catalog.search.repo import VectorSearch
from catalog.settings import Settings


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


async def reindex(settings: Settings, *, recompute_embeddings: bool = False) -> int:
    url, release = await database_url_for_tools(settings)
    try:
        system_events = await prepare_database(url, settings.admin)
        pool = await create_pool(url, min_size=1, max_size=4)
        try:
            system_events.append(
                {
                    "action_name": "system.reindex",
                    "request_params": {"embeddings": str(recompute_embeddings).lower()},
                }
            )
            await record_system_events(pool, system_events)
            return await _reindex(settings, pool, recompute_embeddings)
        finally:
            await pool.close()
    finally:
        await release()


async def _reindex(settings: Settings, pool: asyncpg.Pool, recompute_embeddings: bool) -> int:
    root = settings.index_dir
    root.mkdir(parents=True, exist_ok=True)
    slots = sorted(p for p in root.glob("slot-*") if p.is_dir() and ".corrupt" not in p.name)
    slots = slots or [root / "slot-0"]
    rebuilt = skipped = 0
    for directory in slots:
        try:
            index = await asyncio.to_thread(FullTextIndex, directory)
        except ValueError as exc:
            if "lock" in str(exc).lower():
                _say(f"{directory.name}: held by a running server, which keeps it current; skipped")
                skipped += 1
                continue
            raise
        indexer = Indexer(pool, root)
        indexer.index = index
        started = time.perf_counter()
        count = await indexer.rebuild()
        await indexer.catch_up()
        await asyncio.to_thread(index.close)
        _say(f"{directory.name}: {count} entries indexed in {time.perf_counter() - started:.1f} s")
        rebuilt += 1

    encoder = await asyncio.to_thread(load_encoder, settings)
    engine = SearchEngine(pool, Embedder(encoder), Indexer(pool, root), VectorSearch(pool))
    if recompute_embeddings:
        await repo.forget_embeddings(pool)
    total = await repo.count_unembedded(pool)
    started = time.perf_counter()
    done = 0
    while done < total:
        batch = await engine.embed_pass(1024)
        if batch == 0:
            break
        done += batch
        rate = done / max(time.perf_counter() - started, 1e-9)
        _say(f"embeddings: {done}/{total} ({rate:.0f}/s)")
    await repo.rebuild_vector_index(pool)
    print(f"reindexed: {rebuilt} full-text index slot(s) rebuilt, {skipped} skipped; {done} entries embedded")
    return 0
