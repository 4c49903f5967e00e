"""The vector leg filtered to one scope, at scale: how each way of searching it does against an
exact scan, by the scope's share of the table.

pgvector 0.8 can continue an HNSW scan until enough rows pass the filter (`hnsw.iterative_scan`);
the server's vector leg (`catalog.search.repo.VectorSearch`) decides by the scope's size instead:
an exact scan in scopes too small a share of the table for the HNSW candidates to hold enough of
them, a scope's own index (a partial HNSW index) in scopes of `CATALOG_SCOPE_INDEX_MIN` entries or
more, and in between the whole table's graph with oversampled candidates, then the exact scan if
the filter left too few. This benchmark measures each against the exact answer.

Layout (`--entries`, default 1M; shares of it): scopes of 100 entries (20 %), of 2,000 (4 %), of
10,000 (10 %), of 30,000 (15 %), of 100,000 (20 %), and one of the rest (31 %), in one store,
with synthetic vectors (the real model's embeddings of 2,000 sentences plus small noise, so that
the graph has real structure) bulk-loaded into the server's own schema; the whole table's HNSW
index is built, and the large scopes' own indexes as the server keeps them. Each query is the
model's embedding of four common words, searched in a scope of each size, top 10:

- `exact`: the exact scan (the truth: recall 1.0 by definition);
- `server`: what the server does (`VectorSearch.search`, its choice per scope size);
- `server, own index read for N`: the same, a scope's own index read for N candidates at least
  (`VectorSearch.own_candidates`);
- `iterative relaxed`/`iterative strict`: one statement ordered by distance with the filter in it,
  `hnsw.iterative_scan` `relaxed_order`/`strict_order`, `hnsw.ef_search` 40 or 200 (the planner
  chooses the index or not, as it would for the server).

Recall@10 is the share of the exact top 10 each way returns (the length penalty of long entries
is the same for all: every row here is one passage).

Run: .venv/bin/python bench/vector_filter.py [--entries 1000000] [--queries 40]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.live import BenchServer
from bench.search import RNG, WORDS, copy_entries, sentence
from catalog.db import EmbeddedPostgres, create_pool
from catalog.runtime import EMBEDDED_DATABASE, ensure_database, load_encoder
from catalog.search import scope_index
from catalog.search.repo import _FILTER, _PENALTY, VectorSearch
from catalog.settings import Settings

UC = "/api/2.1/unity-catalog"
OWN_CANDIDATES = (100, 200, 400)
BANDS = [(100, 0.20), (2_000, 0.04), (10_000, 0.10), (30_000, 0.15), (100_000, 0.20)]


def layout(total: int) -> list[tuple[str, int]]:
    """(scope, entries) of the store: the bands, then the rest in one scope."""
    scopes: list[tuple[str, int]] = []
    for size, share in BANDS:
        for k in range(max(1, int(total * share) // size)):
            scopes.append((f"s{size}-{k}", size))
    rest = total - sum(n for _, n in scopes)
    if rest > 0:
        scopes.append(("rest", rest))
    return scopes


async def load(settings: Settings, total: int, base: np.ndarray) -> tuple[str, dict[str, float]]:
    server = EmbeddedPostgres(settings.postgres_dir)
    url = await ensure_database(await asyncio.to_thread(server.start), EMBEDDED_DATABASE)
    pool = await create_pool(url, min_size=1, max_size=2)
    timings: dict[str, float] = {}
    try:
        store_id = str(await pool.fetchval("SELECT id FROM memory_stores WHERE name = 'vf'"))
        rng = np.random.default_rng(5)
        started = time.perf_counter()
        async with pool.acquire() as conn:
            await conn.execute("DROP INDEX IF EXISTS entries_embedding_hnsw")
            await conn.execute("SET session_replication_role = replica")  # no change-log rows
            batch: list[tuple[object, ...]] = []
            i = 0
            for scope, size in layout(total):
                for _ in range(size):
                    noise = np.asarray(rng.normal(0, 0.02, base.shape[1]), dtype=np.float32)
                    vector = base[rng.integers(len(base))] + noise
                    vector /= np.linalg.norm(vector)
                    batch.append((store_id, scope, "", f"/v/{i}.md", "x", None, "b", "b", vector, 1, 1))
                    i += 1
                    if len(batch) == 50_000:
                        await copy_entries(conn, batch)
                        batch = []
            if batch:
                await copy_entries(conn, batch)
            timings["copy_s"] = time.perf_counter() - started
            started = time.perf_counter()
            await conn.execute("SET maintenance_work_mem = '2GB'")
            await conn.execute(
                "CREATE INDEX entries_embedding_hnsw ON entries USING hnsw (embedding vector_cosine_ops)"
            )
            timings["hnsw_s"] = time.perf_counter() - started
            await conn.execute("VACUUM (ANALYZE) entries")
        started = time.perf_counter()
        done = await scope_index.maintain(pool, settings.scope_index_min)
        timings["own_indexes"] = len(done.built)
        timings["own_s"] = time.perf_counter() - started
        await pool.execute("CHECKPOINT")
    finally:
        await pool.close()
        await asyncio.to_thread(server.stop)
    return store_id, timings


CONDITION = f"{_FILTER} AND state = 'active'"


def iterative_sql(candidates: int) -> str:
    return (
        "SELECT id::text, 1 - d FROM ("
        f"  SELECT id, (embedding <=> $5) + {_PENALTY} AS d FROM entries WHERE {CONDITION} "
        f"  ORDER BY embedding <=> $5 LIMIT {candidates}) nearest ORDER BY d LIMIT $6"
    )


async def measure(settings: Settings, store_id: str, queries: np.ndarray, total: int) -> list[tuple]:
    server = EmbeddedPostgres(settings.postgres_dir)
    url = await asyncio.to_thread(server.start)
    url = await ensure_database(url, EMBEDDED_DATABASE)
    pool = await create_pool(url, min_size=2, max_size=4)
    search = VectorSearch(pool, scope_index_min=settings.scope_index_min)
    rows = []
    try:
        by_size: dict[int, list[str]] = {}
        for scope, size in layout(total):
            by_size.setdefault(size, []).append(scope)

        async def exact(scope: str, q: np.ndarray) -> list[tuple[str, float]]:
            hits, _ = await search._exact(CONDITION, store_id, [scope], None, None, q, 10)
            return hits

        async def server_way(scope: str, q: np.ndarray) -> list[tuple[str, float]]:
            hits, _ = await search.search(store_id, [scope], q, 10)
            return hits

        def server_with(own: int):  # type: ignore[no-untyped-def]
            other = VectorSearch(pool, scope_index_min=settings.scope_index_min)
            other.own_candidates = own

            async def run(scope: str, q: np.ndarray) -> list[tuple[str, float]]:
                hits, _ = await other.search(store_id, [scope], q, 10)
                return hits

            return run

        def iterative(mode: str, ef: int):  # type: ignore[no-untyped-def]
            async def run(scope: str, q: np.ndarray) -> list[tuple[str, float]]:
                async with pool.acquire() as conn, conn.transaction():
                    await conn.execute("SET LOCAL plan_cache_mode = force_custom_plan")
                    await conn.execute("SELECT set_config('hnsw.iterative_scan', $1, true)", mode)
                    await conn.execute("SELECT set_config('hnsw.ef_search', $1, true)", str(ef))
                    found = await conn.fetch(iterative_sql(ef), store_id, [scope], None, None, q, 10)
                return [(r[0], float(r[1])) for r in found]

            return run

        ways = [
            ("exact", exact),
            ("server", server_way),
            *[(f"server, own index read for {n}", server_with(n)) for n in OWN_CANDIDATES],
            ("iterative relaxed, ef_search 40", iterative("relaxed_order", 40)),
            ("iterative strict, ef_search 40", iterative("strict_order", 40)),
            ("iterative relaxed, ef_search 200", iterative("relaxed_order", 200)),
        ]
        for size, scopes in sorted(by_size.items()):
            truth: list[list[tuple[str, float]]] = []
            picks = [scopes[k % len(scopes)] for k in range(len(queries))]
            for scope, q in zip(picks, queries, strict=True):  # warm: every way once
                for _, way in ways:
                    await way(scope, q)
            for name, way in ways:
                times, recalls, gaps = [], [], []
                for k, (scope, q) in enumerate(zip(picks, queries, strict=True)):
                    started = time.perf_counter()
                    got = await way(scope, q)
                    times.append((time.perf_counter() - started) * 1000)
                    if name == "exact":
                        truth.append(got)
                    best = {i for i, _ in truth[k]}
                    recalls.append(len({i for i, _ in got} & best) / max(1, len(best)))
                    # how much less similar the k-th found is than the k-th of the exact answer
                    gaps.append(truth[k][-1][1] - got[-1][1] if got and truth[k] else 1.0)
                times.sort()
                rows.append(
                    (
                        size,
                        len(scopes),
                        name,
                        statistics.mean(recalls),
                        min(recalls),
                        statistics.mean(gaps),
                        times[len(times) // 2],
                        times[min(len(times) - 1, int(0.99 * len(times)))],
                    )
                )
                print(
                    f"  {size} {name}: recall {statistics.mean(recalls):.3f}",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        await pool.close()
        await asyncio.to_thread(server.stop)
    return rows


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=40)
    args = parser.parse_args()
    data_dir = Path(tempfile.mkdtemp(prefix="catbench-vf-"))
    settings = Settings(data_dir=data_dir)
    try:
        server = BenchServer(data_dir)
        try:
            token = server.token()
            r = httpx.post(  # noqa: ASYNC210 (before anything else runs)
                f"{server.url}{UC}/memory-stores",
                headers={"Authorization": f"Bearer {token}"},
                json={"name": "vf", "catalog_name": "main", "schema_name": "default"},
                timeout=60,
            )
            r.raise_for_status()
        finally:
            server.stop()
        encoder = await asyncio.to_thread(load_encoder, settings)
        base = encoder.encode([sentence(RNG) for _ in range(2000)])
        queries = encoder.encode([" ".join(RNG.sample(WORDS, 4)) for _ in range(args.queries)])
        store_id, timings = await load(settings, args.entries, base)
        print(
            f"{args.entries:,} entries: copy {timings['copy_s']:.0f} s, "
            f"HNSW build {timings['hnsw_s']:.0f} s, "
            f"{timings['own_indexes']:.0f} scopes' own indexes in {timings['own_s']:.0f} s "
            f"(CATALOG_SCOPE_INDEX_MIN {settings.scope_index_min:,}); {args.queries} queries per scope size\n"
        )
        rows = await measure(settings, store_id, queries, args.entries)
        print(
            "| scope size | scopes | way | recall@10 (mean) | recall@10 (worst) "
            "| 10th's similarity below the exact 10th's | p50 ms | p99 ms |"
        )
        print("|---:|---:|---|---:|---:|---:|---:|---:|")
        for size, count, name, mean, worst, gap, p50, p99 in rows:
            print(
                f"| {size:,} | {count} | {name} | {mean:.3f} | {worst:.2f} | {gap:.4f} "
                f"| {p50:.1f} | {p99:.1f} |"
            )
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
