"""Search latency at scale (in-process and over HTTP) and ingest throughput.

1. Ingest: entries written through the HTTP API by 16 concurrent clients, with the real ONNX
   model: how fast writes are answered, and how fast they become searchable (embedded and
   indexed: a search in their scope waits for both).
2. Scales (10k and 100k by default; --million adds 1M): entries are bulk-loaded into PostgreSQL
   with synthetic text (a 2,000-word vocabulary) and synthetic vectors (real embeddings of 2,000
   sentences plus small noise, so that the HNSW graph has real structure); the HNSW index is built
   and the Tantivy index rebuilt from PostgreSQL, both timed. Layout: one shared scope of
   min(100k, N/10) entries, the rest spread over 10,000 user scopes (1,000 at 10k).
3. Hybrid search, top_k=10, query embedding included: p50/p99 in-process (the service function)
   and over HTTP (one client, sequential), in user scopes and in the shared scope. The bulk load's
   writes are flushed first (a CHECKPOINT, and the rebuilt Tantivy files synced), so that their
   I/O does not land in the measurement.

Run: .venv/bin/python bench/search.py [--million] [--queries N] [--steps] [--skip-http]
(--steps: a table per scale of where an in-process search's time goes, step by step)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import asyncpg
import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.live import BenchServer
from catalog.auth import Principal
from catalog.db import EmbeddedPostgres, create_pool
from catalog.entries import operations as ops
from catalog.entries import repo as entries_repo
from catalog.entries import service as entries
from catalog.runtime import EMBEDDED_DATABASE, Runtime, ensure_database, load_encoder
from catalog.search import neighbours as search_context
from catalog.search import scope_index
from catalog.settings import Settings

UC = "/api/2.1/unity-catalog"
STORE = "main.default.bench"
RNG = random.Random(11)
# common English words: they tokenize like real notes (about one word piece a word)
WORDS = """
time year people way day man thing woman life child world school state family student group country
problem hand part place case week company system program question work government number night
point home water room mother area money story fact month lot right study book eye job word business
issue side kind head house service friend father power hour game line end member law car city
community name president team minute idea kid body information back parent face others level office
door health person art war history party result change morning reason research girl guy moment air
teacher force education foot boy age policy music market sense nation plan college interest death
experience effect class control care field development role effort rate heart drug show leader
light voice wife police mind price report decision son view relationship town road arm difference
value building action model season society tax director position player record paper space ground
form event official matter center couple site project activity star table need court oil situation
cost industry figure street image phone data picture practice piece land product doctor wall
patient worker news test movie north love support technology step baby computer type attention film
tree source organization hair window evidence population site garden coffee email meeting trip
dinner weekend allergy birthday hiking guitar recipe flight hotel train bicycle dog cat prefer like
enjoy visit plan buy read write call send remember forget learn teach cook travel move work happy
quiet early late busy short long new old small large important different local good great best
""".split()  # noqa: SIM905


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 20)))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# the columns of `entries` a bulk load fills (the rest keep their defaults)
ENTRY_COLUMNS = [
    "store_id",
    "scope",
    "session_id",
    "path",
    "contents",
    "description",
    "created_by",
    "updated_by",
    "embedding",
    "version",
    "embedded_version",
]


async def copy_entries(conn: object, records: Sequence[tuple[object, ...]], chunk: int = 50_000) -> None:
    """COPY rows of ENTRY_COLUMNS into `entries`, `chunk` rows at a time."""
    for start in range(0, len(records), chunk):
        await conn.copy_records_to_table(  # type: ignore[attr-defined]
            "entries", records=records[start : start + chunk], columns=ENTRY_COLUMNS
        )


async def ingest(server: BenchServer, n: int) -> tuple[float, float]:
    token = server.token()
    texts = [f"User note {i}: prefers " + sentence(RNG) for i in range(n)]
    async with httpx.AsyncClient(
        base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=300
    ) as client:
        r = await client.post(
            f"{UC}/memory-stores", json={"name": "bench", "catalog_name": "main", "schema_name": "default"}
        )
        r.raise_for_status()
        gate = asyncio.Semaphore(16)

        async def put(i: int) -> None:
            async with gate:
                r = await client.post(
                    f"{UC}/memory-stores/{STORE}/entries",
                    params={"scope": "ingest"},
                    json={"path": f"/notes/{i}.md", "contents": texts[i]},
                )
                r.raise_for_status()

        started = time.perf_counter()
        await asyncio.gather(*(put(i) for i in range(n)))
        answered = time.perf_counter() - started
        # searchable: every vector computed and the full-text index caught up
        conn = await asyncpg.connect(server.db_url())
        try:
            while await conn.fetchval(  # noqa: ASYNC110 (polling another process's progress)
                "SELECT count(*) FROM entries WHERE embedded_version IS DISTINCT FROM version"
            ):
                await asyncio.sleep(0.2)
        finally:
            await conn.close()
        r = await client.post(
            f"{UC}/memory-stores/{STORE}/entries:search",
            json={"scope": "ingest", "query": texts[-1], "top_k": 1, "mode": "keyword"},
        )
        r.raise_for_status()
        searchable = time.perf_counter() - started
    return n / answered, n / searchable


async def bulk_load(settings: Settings, total: int, have: int, base: np.ndarray) -> dict[str, float]:
    """Grow the store from `have` to `total` entries; returns build timings."""
    server = EmbeddedPostgres(settings.postgres_dir)
    url = await ensure_database(await asyncio.to_thread(server.start), EMBEDDED_DATABASE)
    pool = await create_pool(url, min_size=1, max_size=2)
    timings = {}
    try:
        store_id = await pool.fetchval("SELECT id FROM memory_stores WHERE name = 'bench'")
        shared = min(100_000, total // 10)
        users = 10_000 if total >= 100_000 else 1_000
        rng = np.random.default_rng(have + 1)
        records = []
        for i in range(have, total):
            scope = "shared" if i % 10 == 0 and i // 10 < shared else f"user-{i % users}"
            vector = base[rng.integers(len(base))] + np.asarray(
                rng.normal(0, 0.02, base.shape[1]), dtype=np.float32
            )
            vector /= np.linalg.norm(vector)
            records.append(
                (store_id, scope, "", f"/bulk/{i}.md", sentence(RNG), None, "bench", "bench", vector, 1, 1)
            )
        started = time.perf_counter()
        async with pool.acquire() as conn:
            await conn.execute("DROP INDEX IF EXISTS entries_embedding_hnsw")
            await conn.execute("SET session_replication_role = replica")  # no change-log rows: rebuilt below
            await copy_entries(conn, records)
            timings["copy_s"] = time.perf_counter() - started
            started = time.perf_counter()
            await conn.execute("SET maintenance_work_mem = '2GB'")
            await conn.execute("SET max_parallel_maintenance_workers = 1")
            await conn.execute(
                "CREATE INDEX entries_embedding_hnsw ON entries USING hnsw (embedding vector_cosine_ops)"
            )
            timings["hnsw_s"] = time.perf_counter() - started
            await conn.execute("VACUUM (ANALYZE) entries")  # steady state: no autovacuum mid-measurement
        # the vector indexes of scopes large enough for one of their own, as the server keeps them
        started = time.perf_counter()
        done = await scope_index.maintain(pool, settings.scope_index_min)
        timings["scope_index_s"] = time.perf_counter() - started
        timings["scope_indexes"] = len(done.built)
        # the bulk load's gigabytes of dirty pages written out now, not by a checkpoint mid-measurement
        await pool.execute("CHECKPOINT")
    finally:
        await pool.close()
        await asyncio.to_thread(server.stop)
    shutil.rmtree(settings.index_dir, ignore_errors=True)  # the next start rebuilds Tantivy
    return timings


class Steps:
    """Times each step of a search (the engine's own coroutines, wrapped here, in this process
    only): where a search's time goes. Keyword and semantic run concurrently in hybrid mode, so
    the steps overlap and do not add up to the total."""

    def __init__(self) -> None:
        self.kind = ""
        self.times: dict[tuple[str, str], list[float]] = {}

    def wrap(self, owner: object, name: str, label: str) -> None:
        real = getattr(owner, name)

        async def timed(*args: object, **kwargs: object) -> object:
            t0 = time.perf_counter()
            try:
                return await real(*args, **kwargs)
            finally:
                if self.kind:
                    self.times.setdefault((self.kind, label), []).append((time.perf_counter() - t0) * 1000)

        setattr(owner, name, timed)

    def instrument(self, runtime: Runtime) -> None:
        engine = runtime.context.search
        assert engine is not None
        self.wrap(engine.embedder, "embed", "embed the query (ONNX)")
        self.wrap(engine.indexer, "wait_fresh", "wait for the index (read-your-writes)")
        self.wrap(engine.worker, "embed_pending", "embed the rows lacking vectors (read-your-writes)")
        self.wrap(engine, "_keyword", "keyword: BM25 candidates (Tantivy)")
        self.wrap(engine.vectors, "search", "semantic: nearest vectors (pgvector)")
        self.wrap(engine, "_coverage", "keyword score: term counts in the scope (Tantivy)")
        self.wrap(search_context, "context", "neighbours and keyword-only candidates' cosines (PostgreSQL)")
        self.wrap(engine, "rank", "rank (all of the above)")
        self.wrap(entries_repo, "by_ids", "re-read the hits (PostgreSQL)")


async def measure_in_process(
    settings: Settings, queries: list[tuple[str, str]], steps: Steps | None = None
) -> tuple[float, dict]:
    started = time.perf_counter()
    runtime = await Runtime.start(settings)
    start_s = time.perf_counter() - started
    await asyncio.to_thread(os.sync)  # the rebuilt Tantivy index written out before measuring
    latencies: dict[str, list[float]] = {"user": [], "shared": []}
    if steps is not None:
        steps.instrument(runtime)
    try:
        admin = Principal("admin")
        for kind, text in queries[:20]:  # warm-up
            await entries.search(
                runtime.context, admin, ops.Search(store=STORE, scopes=(_scope(kind),), query=text)
            )
        assert runtime.context.search is not None
        vectors = runtime.context.search.vectors
        fallbacks = vectors.fallbacks
        for kind, text in queries:
            if steps is not None:
                steps.kind = kind
            t0 = time.perf_counter()
            await entries.search(
                runtime.context, admin, ops.Search(store=STORE, scopes=(_scope(kind),), query=text)
            )
            latencies[kind].append((time.perf_counter() - t0) * 1000)
        fallbacks = vectors.fallbacks - fallbacks
        print(f"searches through a scope's own vector index: {vectors.own_index_searches}", flush=True)
    finally:
        if steps is not None:
            steps.kind = ""
        await runtime.close()
    print(
        f"{len(queries)} in-process searches: {fallbacks} HNSW scans came back short of the filter "
        "and ran the exact scan after",
        flush=True,
    )
    return start_s, latencies


def _scope(kind: str) -> str:
    return "shared" if kind == "shared" else f"user-{RNG.randrange(1000)}"


async def measure_http(settings: Settings, queries: list[tuple[str, str]]) -> dict:
    server = BenchServer(settings.data_dir)
    latencies: dict[str, list[float]] = {"user": [], "shared": []}
    try:
        token = server.token()
        async with httpx.AsyncClient(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        ) as client:
            for kind, text in queries[:20] + queries:
                t0 = time.perf_counter()
                r = await client.post(
                    f"{UC}/memory-stores/{STORE}/entries:search",
                    json={"scope": _scope(kind), "query": text, "top_k": 10},
                )
                r.raise_for_status()
                latencies[kind].append((time.perf_counter() - t0) * 1000)
    finally:
        server.stop()
    return {k: v[20 // 2 :] for k, v in latencies.items()}


async def main() -> None:
    parser = argparse.ArgumentParser(description="search latency and ingest throughput")
    parser.add_argument("--million", action="store_true", help="also measure at 1M entries (long)")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--ingest", type=int, default=3000)
    parser.add_argument("--steps", action="store_true", help="also time each step of an in-process search")
    parser.add_argument("--skip-http", action="store_true", help="in-process only")
    args = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="catbench-search-"))
    settings = Settings(data_dir=data_dir)
    server = BenchServer(data_dir)
    try:
        answered, searchable = await ingest(server, args.ingest)
    finally:
        server.stop()
    print(
        f"ingest over HTTP, 16 concurrent writers, real embeddings: {args.ingest} entries; "
        f"writes answered at {answered:.0f}/s, searchable (embedded + indexed) at {searchable:.0f}/s\n"
    )

    encoder = await asyncio.to_thread(load_encoder, settings)
    base = encoder.encode([sentence(RNG) for _ in range(2000)])
    queries = [("user" if i % 2 else "shared", " ".join(RNG.sample(WORDS, 4))) for i in range(args.queries)]
    scales = [10_000, 100_000] + ([1_000_000] if args.million else [])
    rows = []
    have = args.ingest
    for total in scales:
        timings = await bulk_load(settings, total, have, base)
        have = total
        steps = Steps() if args.steps else None
        start_s, inproc = await measure_in_process(settings, queries, steps)
        http = inproc if args.skip_http else await measure_http(settings, queries)
        rows.append((total, timings, start_s, inproc, http))
        if steps is not None:
            print(f"\n{total:,} entries: where an in-process hybrid search's time goes (ms)\n")
            print("| step | user p50 | user p99 | shared p50 | shared p99 |")
            print("|---|---|---|---|---|")
            labels = list(dict.fromkeys(label for _, label in steps.times))
            for label in labels:
                cells = []
                for kind in ("user", "shared"):
                    values = steps.times.get((kind, label), [0.0])
                    cells += [f"{statistics.median(values):.1f}", f"{pct(values, 0.99):.1f}"]
                print(f"| {label} | " + " | ".join(cells) + " |")
            print(flush=True)
        print(
            f"{total:,} entries: copy {timings['copy_s']:.0f} s, HNSW build {timings['hnsw_s']:.0f} s, "
            f"indexes of large scopes' own: {timings['scope_indexes']:.0f} built in "
            f"{timings['scope_index_s']:.0f} s, start with Tantivy rebuild {start_s:.0f} s",
            flush=True,
        )
    shutil.rmtree(data_dir, ignore_errors=True)

    print("\nhybrid search, top_k=10, query embedding included (ms):\n")
    print("| entries | where | in-process p50 | in-process p99 | HTTP p50 | HTTP p99 |")
    print("|---|---|---|---|---|---|")
    for total, _, _, inproc, http in rows:
        for kind, label in (("user", "user scope"), ("shared", "shared scope")):
            local, remote = inproc[kind], http[kind]
            print(
                f"| {total:,} | {label} | {statistics.median(local):.1f} | {pct(local, 0.99):.1f} "
                f"| {statistics.median(remote):.1f} | {pct(remote, 0.99):.1f} |"
            )


if __name__ == "__main__":
    asyncio.run(main())
