"""The metrics, read from the live state of this process (and two small queries): how far the
derived search state is behind PostgreSQL and whether its workers are failing.

Gauges are this process's view: every process keeps its own full-text index, so the index
figures differ per process; the embedding backlog is shared by all processes on the database.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from catalog.auth import Principal
from catalog.context import Context
from catalog.governance import SecurableType
from catalog.search.health import WorkerStatus

CONTENT_TYPE = "text/plain; version=0.0.4"  # Prometheus text format (the charset, utf-8, is added)


@dataclass(frozen=True)
class Metric:
    name: str
    kind: str  # gauge | counter
    help: str
    value: float


def _worker(prefix: str, status: WorkerStatus, now: float) -> list[Metric]:
    failing = 0.0 if status.failing_since is None else max(0.0, now - status.failing_since)
    return [
        Metric(
            f"{prefix}_healthy",
            "gauge",
            f"1 when the {status.name} worker is keeping up, 0 while it fails",
            1.0 if status.healthy else 0.0,
        ),
        Metric(
            f"{prefix}_failures_total",
            "counter",
            f"failed attempts of the {status.name} worker",
            status.failures_total,
        ),
        Metric(
            f"{prefix}_failing_seconds",
            "gauge",
            f"how long the {status.name} worker has been failing",
            round(failing, 3),
        ),
    ]


async def collect(ctx: Context) -> list[Metric]:
    if ctx.search is None:
        return []
    search = ctx.search
    status = await search.status()
    now = time.time()
    index = search.indexer.index
    documents = await asyncio.to_thread(index.num_docs) if index is not None else 0
    return [
        Metric(
            "catalog_index_lag_changes",
            "gauge",
            "change rows committed in PostgreSQL and not yet applied to this process's full-text index",
            status.index.lag,
        ),
        Metric(
            "catalog_index_watermark",
            "gauge",
            "the change row up to which this process's full-text index is committed",
            search.indexer.watermark,
        ),
        Metric(
            "catalog_index_documents",
            "gauge",
            "entries in this process's full-text index",
            documents,
        ),
        *_worker("catalog_index", status.index, now),
        *[
            Metric(
                "catalog_transcript_index_lag_changes",
                "gauge",
                "transcript change rows not yet applied to this process's transcript index",
                other.lag,
            )
            for other in status.other_indexes
        ],
        Metric(
            "catalog_embedding_backlog_entries",
            "gauge",
            "entries whose vector is missing or older than their contents",
            status.embeddings.lag,
        ),
        *_worker("catalog_embedding", status.embeddings, now),
        Metric(
            "catalog_embedded_entries_total",
            "counter",
            "vectors written by this process's embedding worker",
            search.embedded_total,
        ),
        Metric("catalog_embedder_batches_total", "counter", "model runs", search.embedder.batches),
        Metric(
            "catalog_embedder_texts_total", "counter", "texts embedded by the model", search.embedder.texts
        ),
    ]


def text_format(metrics: list[Metric]) -> str:
    lines: list[str] = []
    for m in metrics:
        value = str(int(m.value)) if float(m.value).is_integer() else repr(float(m.value))
        lines += [f"# HELP {m.name} {m.help}", f"# TYPE {m.name} {m.kind}", f"{m.name} {value}"]
    return "\n".join(lines) + "\n"


async def render(ctx: Context, principal: Principal) -> str:
    await ctx.access.resolve(principal, "system.metrics", SecurableType.METASTORE)
    return text_format(await collect(ctx))
