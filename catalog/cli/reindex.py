"""`catalog reindex`: rebuild the derived search state from PostgreSQL.

- for each corpus (entries, transcripts), every full-text index slot of the data dir that no
  running server holds is rebuilt (a slot a server holds is skipped and named: that server keeps
  it current itself);
- rows whose vector is missing or stale are embedded; with `--embeddings`, also every row whose
  vector another model made (each row keeps the id of the model that made its vector; a row
  embedded before that was kept counts as another model's): the rows this model made are kept;
- the HNSW indexes are rebuilt (REINDEX).
Progress goes to stderr, a summary to stdout.
"""

from __future__ import annotations

import asyncio
import sys
import time

import asyncpg

from catalog.db import create_pool
from catalog.recorder.writer import record_system_events
from catalog.runtime import database_url_for_tools, load_encoder, prepare_database
from catalog.search import SearchEngine, repo
from catalog.search.corpus import CORPORA
from catalog.search.embedder import Embedder
from catalog.search.fulltext import FullTextIndex, WriterLocked
from catalog.search.indexer import Indexer
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
    rebuilt = skipped = 0
    for corpus in CORPORA:
        indexer = Indexer(pool, settings.index_dir, corpus=corpus)
        root = indexer.index_root
        root.mkdir(parents=True, exist_ok=True)
        slots = sorted(p for p in root.glob("slot-*") if p.is_dir() and ".corrupt" not in p.name)
        for directory in slots or [root / "slot-0"]:
            label = f"{corpus.name} {directory.name}"
            try:
                index = await asyncio.to_thread(FullTextIndex, directory)
            except WriterLocked:
                _say(f"{label}: held by a running server, which keeps it current; skipped")
                skipped += 1
                continue
            indexer = Indexer(pool, settings.index_dir, corpus=corpus)
            indexer.index = index
            started = time.perf_counter()
            count = await indexer.rebuild()
            await indexer.catch_up()
            await asyncio.to_thread(index.close)
            _say(f"{label}: {count} documents indexed in {time.perf_counter() - started:.1f} s")
            rebuilt += 1

    encoder = await asyncio.to_thread(load_encoder, settings)
    embedder = Embedder(encoder)
    engine = SearchEngine.create(pool, embedder, settings.index_dir)
    embedded: list[str] = []
    for corpus in CORPORA:
        if recompute_embeddings:
            foreign = await repo.forget_embeddings(pool, corpus, keep=embedder.model_id)
            _say(f"embeddings of {corpus.name}: {foreign} not made by {embedder.model_id} (or missing)")
        total = await repo.count_unembedded(pool, corpus)
        started = time.perf_counter()
        done = 0
        while done < total:
            batch = await engine.embed_pass(1024, corpus)
            if batch == 0:
                break
            done += batch
            rate = done / max(time.perf_counter() - started, 1e-9)
            _say(f"embeddings of {corpus.name}: {done}/{total} ({rate:.0f}/s)")
        await repo.rebuild_vector_index(pool, corpus)
        embedded.append(f"{done} {corpus.name}")
    print(
        f"reindexed: {rebuilt} full-text index slot(s) rebuilt, {skipped} skipped; "
        f"embedded: {', '.join(embedded)}"
    )
    return 0
