"""The catalog beside LangGraph's `AsyncPostgresStore`, in one run, on the LoCoMo conversations.

The peer runs in this process, as its users run it: the store over a psycopg pool on its own
database of the same PostgreSQL server as the catalog (the catalog's embedded one), a pgvector
HNSW index (cosine), and embeddings on its write path. Its embed function is the catalog's own
encoder (`catalog.search.embedder.OnnxEncoder`, MiniLM int8) called off the event loop, so both
sides run the same model on the same text (the entry's description, then its contents).

The catalog runs as `catalog serve` on a fresh data dir, driven over HTTP (httpx, keep-alive).

Per side, on the same conversations (every turn an entry in its conversation's scope, every
question with evidence a search in that scope, as `bench/locomo.py`):
- ingest until searchable: all turns written by `--concurrency` writers; the peer's writes are
  searchable when answered; the catalog's once every vector is stored and the full-text index
  has them (a search in each scope after the backlog is gone);
- search latency, one sequential client, top 10: every question right after the ingest (cold),
  then every question again (steady state); the catalog searches hybrid, the peer semantic (its
  only mode); then the catalog once more in semantic mode and in keyword mode alone;
- R@1/R@5/R@10 of those searches.

With --model, it prints instead what the model costs on these turns: texts per second of wall
time and of CPU time, for each text alone, batches of 16 padded to their longest text (as the
model was run before), and batches of 16 run as length-sorted runs (as now).

Run: .venv/bin/python bench/peer.py [FILE.json ...] [--concurrency 8] [--model]
(default files: ../shared/bench/locomo/{26,30,41}.json when present; the peer's packages are the
`bench` extra: pip install -e '.[bench]')
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.live import REPO, BenchServer
from bench.locomo import KS, STORE, UC, load, recall
from catalog.runtime import load_encoder, with_database
from catalog.search.embedder import DIMENSIONS, Encoder
from catalog.settings import Settings

PEER_DATABASE = "langgraph_store"
TOP_K = 10


@dataclass
class Side:
    name: str
    ingest_s: float = 0.0
    answered_s: float = 0.0  # all writes answered
    cpu_s: float = 0.0  # CPU time of the catalog's server process over the ingest (Linux /proc)
    cold_ms: list[float] = field(default_factory=list)  # every question, right after the ingest
    steady_ms: list[float] = field(default_factory=list)  # every question again
    recalls: list[dict[int, float]] = field(default_factory=list)
    by_mode_ms: dict[str, list[float]] = field(default_factory=dict)  # ours: one more pass per mode


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def text_of(entry: dict) -> str:
    """What both sides embed (the catalog's `embedding_text`: description, then contents)."""
    return f"{entry['description']}\n{entry['contents']}"


# --- the peer ------------------------------------------------------------------------------------


async def run_peer(url: str, datasets: list, encoder: Encoder, concurrency: int) -> Side:
    from langgraph.store.postgres.aio import AsyncPostgresStore

    async def embed(texts: list[str]) -> list[list[float]]:
        return (await asyncio.to_thread(encoder.encode, texts)).tolist()

    side = Side("LangGraph AsyncPostgresStore (in-process)")
    index = {"dims": DIMENSIONS, "embed": embed, "fields": ["text"], "distance_type": "cosine"}
    async with AsyncPostgresStore.from_conn_string(
        url, pool_config={"min_size": 1, "max_size": concurrency}, index=index
    ) as store:
        await store.setup()
        gate = asyncio.Semaphore(concurrency)

        async def put(scope: str, entry: dict) -> None:
            async with gate:
                await store.aput(("locomo", scope), entry["path"], {**entry, "text": text_of(entry)})

        started = time.perf_counter()
        for scope, entries, _ in datasets:
            await asyncio.gather(*(put(scope, e) for e in entries))
        side.ingest_s = side.answered_s = time.perf_counter() - started

        async def ask(scope: str, question: dict) -> list[str]:
            hits = await store.asearch(("locomo", scope), query=question["query"], limit=TOP_K)
            return [hit.key for hit in hits]

        await _searches(side, datasets, ask)
    return side


# --- the catalog ---------------------------------------------------------------------------------


async def run_catalog(server: BenchServer, datasets: list, concurrency: int) -> Side:
    side = Side("catalog (HTTP)")
    token = server.token()
    conn = await asyncpg.connect(server.db_url())
    async with httpx.AsyncClient(
        base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=120
    ) as client:
        r = await client.post(
            f"{UC}/memory-stores", json={"name": "locomo", "catalog_name": "main", "schema_name": "default"}
        )
        r.raise_for_status()
        gate = asyncio.Semaphore(concurrency)

        async def put(scope: str, entry: dict) -> None:
            async with gate:
                r = await client.post(
                    f"{UC}/memory-stores/{STORE}/entries",
                    params={"scope": scope},
                    json={**entry, "write_mode": "OVERWRITE"},
                )
                r.raise_for_status()

        async def search(scope: str, query: str, mode: str = "hybrid") -> list[str]:
            r = await client.post(
                f"{UC}/memory-stores/{STORE}/entries:search",
                json={"scope": scope, "query": query, "mode": mode, "top_k": TOP_K},
            )
            r.raise_for_status()
            return [x["memory_entry"]["path"] for x in r.json()["results"]]

        cpu = process_cpu(server.process.pid)
        started = time.perf_counter()
        for scope, entries, _ in datasets:
            await asyncio.gather(*(put(scope, e) for e in entries))
        side.answered_s = time.perf_counter() - started
        # searchable: no vector missing (a search would wait for them, up to its bound), then a
        # keyword search in each scope, which waits for the full-text index to hold every write
        while await conn.fetchval(  # noqa: ASYNC110 (another process's progress)
            "SELECT EXISTS (SELECT 1 FROM entries WHERE embedded_version IS DISTINCT FROM version)"
        ):
            await asyncio.sleep(0.05)
        for scope, entries, _ in datasets:
            await search(scope, entries[-1]["contents"], "keyword")
        side.ingest_s = time.perf_counter() - started
        side.cpu_s = process_cpu(server.process.pid) - cpu

        async def ask(scope: str, question: dict) -> list[str]:
            return await search(scope, question["query"])

        await _searches(side, datasets, ask)
        # the same questions once more in each single mode: what hybrid adds, and the peer's mode
        for mode in ("semantic", "keyword"):
            times = side.by_mode_ms.setdefault(mode, [])
            for scope, _, questions in datasets:
                for question in questions:
                    t0 = time.perf_counter()
                    await search(scope, question["query"], mode)
                    times.append((time.perf_counter() - t0) * 1000)
    await conn.close()
    return side


async def _searches(side: Side, datasets: list, ask) -> None:  # type: ignore[no-untyped-def]
    questions = [(scope, q) for scope, _, qs in datasets for q in qs]
    for latencies in (side.cold_ms, side.steady_ms):
        for scope, question in questions:
            t0 = time.perf_counter()
            ranked = await ask(scope, question)
            latencies.append((time.perf_counter() - t0) * 1000)
            if latencies is side.cold_ms:
                side.recalls.append(recall(ranked, question["evidence"]))


# --- the run -------------------------------------------------------------------------------------


async def fresh_database(server_url: str, name: str) -> str:
    conn = await asyncpg.connect(server_url)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    url = with_database(server_url, name)
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    finally:
        await conn.close()
    return url


def model_costs(datasets: list, encoder: Encoder) -> None:
    import numpy as np

    from catalog.search.embedder import OnnxEncoder

    assert isinstance(encoder, OnnxEncoder)
    texts = [text_of(e) for _, entries, _ in datasets for e in entries]
    random.Random(7).shuffle(texts)

    def padded(batch: list[str]) -> np.ndarray:  # the batch padded to its longest text, one run
        encodings = encoder.tokenizer.encode_batch(batch)
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(batch), width), dtype=np.int64)
        mask = np.zeros((len(batch), width), dtype=np.int64)
        for row, e in enumerate(encodings):
            ids[row, : len(e.ids)] = e.ids
            mask[row, : len(e.ids)] = 1
        return encoder._run(ids, mask)

    ways = {
        "each text alone": (encoder.encode, 1),
        "batches of 16, padded to the longest (before)": (padded, 16),
        "batches of 16, length-sorted runs (now)": (encoder.encode, 16),
    }
    print(f"the model on {len(texts)} LoCoMo turns (description, contents); load average {load_average()}\n")
    print("| how | texts/s (wall) | texts per CPU-second |")
    print("|---|---|---|")
    for label, (run_batch, size) in ways.items():
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(0, len(texts), size):
            run_batch(texts[i : i + size])
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(f"| {label} | {len(texts) / wall:.0f} | {len(texts) / cpu:.0f} |")


def process_cpu(pid: int) -> float:
    """User and system CPU seconds of a process so far, all its threads (0 where /proc is not)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load_average() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


async def run(args: argparse.Namespace) -> None:
    files = [Path(f) for f in args.files] or sorted((REPO.parent / "shared/bench/locomo").glob("*.json"))
    if not files:
        print("peer: no files given and ../shared/bench/locomo/ is not here; pass LoCoMo JSON paths")
        return
    datasets = [load(f) for f in files]
    turns = sum(len(e) for _, e, _ in datasets)
    questions = sum(len(q) for _, _, q in datasets)
    encoder = await asyncio.to_thread(load_encoder, Settings())
    if args.model:
        model_costs(datasets, encoder)
        return
    server = BenchServer()
    loads = [f"start {load_average()}"]
    try:
        peer_url = await fresh_database(with_database(server.db_url(), "postgres"), PEER_DATABASE)
        sides: dict[str, Side] = {}
        for which in args.order.split(","):
            if which == "peer":
                sides["peer"] = await run_peer(peer_url, datasets, encoder, args.concurrency)
            else:
                sides["ours"] = await run_catalog(server, datasets, args.concurrency)
            loads.append(f"after {which} {load_average()}")
    finally:
        server.stop()
    peer, ours = sides["peer"], sides["ours"]

    print(
        f"LoCoMo {', '.join(f.name for f in files)}: {turns} turns, {questions} questions; "
        f"{args.concurrency} writers; order {args.order}; load average {'; '.join(loads)}\n"
    )
    print(f"| figure | {peer.name} | {ours.name} | ours / peer | goal |")
    print("|---|---|---|---|---|")
    p_rate, o_rate = turns / peer.ingest_s, turns / ours.ingest_s
    print(
        f"| ingest until searchable (entries/s) | {p_rate:.0f} | {o_rate:.0f} "
        f"(writes answered at {turns / ours.answered_s:.0f}/s) | {o_rate / p_rate:.2f}x | ≥ 3x |"
    )
    print(
        f"| ours: CPU of the server process per ingested turn, model included | | "
        f"{ours.cpu_s / turns * 1000:.1f} ms | | |"
    )
    for label, q in (("p50", 0.5), ("p99", 0.99)):
        p, o = pct(peer.cold_ms, q), pct(ours.cold_ms, q)
        goal = "≤ 1x" if label == "p50" else ""
        print(f"| search {label}, right after ingest (ms) | {p:.1f} | {o:.1f} | {o / p:.2f}x | {goal} |")
    for label, q in (("p50", 0.5), ("p99", 0.99)):
        p, o = pct(peer.steady_ms, q), pct(ours.steady_ms, q)
        print(f"| search {label}, steady state (ms) | {p:.1f} | {o:.1f} | {o / p:.2f}x | |")
    for mode, times in ours.by_mode_ms.items():
        p, o50, o99 = pct(peer.steady_ms, 0.5), pct(times, 0.5), pct(times, 0.99)
        print(
            f"| ours in {mode} mode (steady): p50 / p99 (ms) | | {o50:.1f} / {o99:.1f} "
            f"| {o50 / p:.2f}x (p50) | |"
        )
    first = min(500, len(ours.cold_ms))
    cold99, steady99 = pct(ours.cold_ms[:first], 0.99), pct(ours.steady_ms, 0.99)
    print(
        f"| ours: p99 of the first {first} searches after the bulk load / steady p99 | | "
        f"{cold99:.1f} / {steady99:.1f} ms | {cold99 / steady99:.2f}x | ≤ 2x |"
    )
    print(
        f"| ours: the first 10 searches after the bulk load (ms) | | "
        f"{', '.join(f'{x:.0f}' for x in ours.cold_ms[:10])} | | |"
    )
    for k in KS:
        p = statistics.mean(r[k] for r in peer.recalls)
        o = statistics.mean(r[k] for r in ours.recalls)
        print(f"| R@{k} | {p:.3f} | {o:.3f} | {o - p:+.3f} | |")


def main() -> None:
    parser = argparse.ArgumentParser(description="the catalog beside LangGraph's AsyncPostgresStore")
    parser.add_argument("files", nargs="*", help="LoCoMo JSON files")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--order", default="peer,ours", choices=["peer,ours", "ours,peer"])
    parser.add_argument("--model", action="store_true", help="only what the model costs, three ways")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
