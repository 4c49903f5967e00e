"""The metrics: the process's instruments (`catalog.telemetry`: request, search, embedding, audit,
authorization, pipeline and erasure histograms and counters), and gauges read at each scrape from
the live state of this process and a few small queries (how far the derived search state is
behind PostgreSQL, whether its workers are failing, the change logs' backlog).

Gauges are this process's view: every process keeps its own full-text index, so the index
figures differ per process (per node: Prometheus tells the processes apart by their `instance`);
the embedding backlog and the change logs are shared by all processes on the database.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import asyncpg

from catalog import telemetry
from catalog.access import SecurableType
from catalog.auth import Principal
from catalog.context import Context
from catalog.search.corpus import ENTRIES, Corpus
from catalog.search.health import WorkerStatus
from catalog.search.indexer import Indexer
from catalog.telemetry import Family
from catalog.telemetry.instruments import counter, gauge

CONTENT_TYPE = "text/plain; version=0.0.4"  # Prometheus text format (the charset, utf-8, is added)


def _worker(prefix: str, status: WorkerStatus, now: float) -> list[Family]:
    failing = 0.0 if status.failing_since is None else max(0.0, now - status.failing_since)
    return [
        gauge(
            f"{prefix}_healthy",
            f"1 when the {status.name} worker is keeping up, 0 while it fails",
            1.0 if status.healthy else 0.0,
        ),
        counter(
            f"{prefix}_failures_total", f"failed attempts of the {status.name} worker", status.failures_total
        ),
        gauge(
            f"{prefix}_failing_seconds",
            f"how long the {status.name} worker has been failing",
            round(failing, 3),
        ),
    ]


async def _lag_seconds(pool: asyncpg.Pool, indexer: Indexer, behind: int) -> float:
    """How long the oldest change row past this process's index watermark has waited (0 when
    the index holds every change row: `behind` is its lag in rows)."""
    if behind == 0:
        return 0.0
    value = await pool.fetchval(
        "SELECT extract(epoch FROM clock_timestamp() - min(at)) "
        f"FROM {indexer.corpus.changes} WHERE seq > $1",
        indexer.watermark,
    )
    return round(max(0.0, float(value or 0.0)), 3)


async def _backlog(pool: asyncpg.Pool, corpus: Corpus) -> int:
    """Change rows written and not yet pruned: the highest seq less the prune mark (an upper
    bound: a sequence may skip values)."""
    value = await pool.fetchval(
        "SELECT coalesce(max(seq), 0) - "
        "coalesce((SELECT up_to FROM change_log_pruned WHERE changes = $1), 0) "
        f"FROM {corpus.changes}",
        corpus.changes,
    )
    return max(0, int(value or 0))


def _resident_bytes() -> float | None:
    """This process's resident memory (Linux: /proc/self/statm), None where it cannot be read."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return float(pages * os.sysconf("SC_PAGE_SIZE"))


def _process() -> list[Family]:
    resident = _resident_bytes()
    if resident is None:
        return []
    return [gauge("process_resident_memory_bytes", "resident memory of this process", resident)]


async def collect(ctx: Context) -> list[Family]:
    families = [*telemetry.families(), *_process()]
    if ctx.search is None:
        return families
    search = ctx.search
    status = await search.status()
    now = time.time()
    index = search.indexer.index
    documents = await asyncio.to_thread(index.num_docs) if index is not None else 0
    others = [part.indexer for corpus, part in search.corpora.items() if corpus is not ENTRIES]
    urgent, background = search.embedder.queued
    return [
        *families,
        gauge(
            "catalog_index_lag_changes",
            "change rows committed in PostgreSQL and not yet applied to this process's full-text index",
            status.index.lag,
        ),
        gauge(
            "catalog_index_lag_seconds",
            "how long the oldest change row not yet applied to this process's full-text index has waited",
            await _lag_seconds(search.pool, search.indexer, status.index.lag),
        ),
        gauge(
            "catalog_index_watermark",
            "the change row up to which this process's full-text index is committed",
            search.indexer.watermark,
        ),
        gauge("catalog_index_documents", "entries in this process's full-text index", documents),
        counter(
            "catalog_index_commits_total",
            "commits this process made to its full-text index (none while it reads a slot another writes)",
            search.indexer.commits,
        ),
        *_worker("catalog_index", status.index, now),
        *[
            gauge(
                "catalog_transcript_index_lag_changes",
                "transcript change rows not yet applied to this process's transcript index",
                other.lag,
            )
            for other in status.other_indexes
        ],
        *[
            gauge(
                "catalog_transcript_index_lag_seconds",
                "how long the oldest transcript change row not yet applied to this process's transcript "
                "index has waited",
                await _lag_seconds(search.pool, indexer, other.lag),
            )
            for indexer, other in zip(others, status.other_indexes, strict=True)
        ],
        Family(
            "catalog_change_log_backlog_changes",
            "gauge",
            "change rows kept in a change log (written and not yet pruned; pruned once older than a day)",
            tuple(
                [
                    telemetry.Sample(
                        "catalog_change_log_backlog_changes",
                        (("log", corpus.changes),),
                        await _backlog(search.pool, corpus),
                    )
                    for corpus in search.corpora
                ]
            ),
        ),
        gauge(
            "catalog_embedding_backlog_entries",
            "entries whose vector is missing or older than their contents",
            status.embeddings.lag,
        ),
        Family(
            "catalog_embedding_queue_texts",
            "gauge",
            "texts waiting for this process's model: urgent (search queries) or background (the embedding "
            "worker's batches)",
            (
                telemetry.Sample("catalog_embedding_queue_texts", (("queue", "urgent"),), urgent),
                telemetry.Sample("catalog_embedding_queue_texts", (("queue", "background"),), background),
            ),
        ),
        *_worker("catalog_embedding", status.embeddings, now),
        counter(
            "catalog_embedded_entries_total",
            "vectors written by this process's embedding worker",
            search.embedded_total,
        ),
        counter("catalog_embedder_batches_total", "model runs", search.embedder.batches),
        counter("catalog_embedder_texts_total", "texts embedded by the model", search.embedder.texts),
    ]


async def render(ctx: Context, principal: Principal) -> str:
    await ctx.access.resolve(principal, "system.metrics", SecurableType.METASTORE)
    return telemetry.text_format(await collect(ctx))
