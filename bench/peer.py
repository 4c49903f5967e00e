"""The catalog beside LangGraph's `AsyncPostgresStore` (and memnos, where it can run), in one run,
on the LoCoMo conversations.

The peer runs in this process, as its users run it: the store over a psycopg pool on its own
database of the same PostgreSQL server as the catalog (the catalog's embedded one), a pgvector
HNSW index (cosine), and embeddings on its write path. Its embed function is the catalog's own
encoder (`catalog.search.embedder.OnnxEncoder`, MiniLM int8) called off the event loop, so both
sides run the same model on the same text (the entry's description, then its contents).

The catalog runs as `catalog serve` on a fresh data dir, driven over HTTP (keep-alive) by the
catalog's own `AsyncClient` (over plain HTTP, its lean transport: `bench/client_overhead.py`).

memnos (a self-hosted memory server) is the optional third side, over HTTP, when
`bench/memnos_peer.py` finds it runnable offline (its own virtualenv `.venv-memnos`, the same
PostgreSQL and the same model); otherwise the table says why it is missing.

Before the sides, the model alone: every text the server embeds, run the way the server runs it
(`catalog.search.embedder.Embedder`: its lanes, its background batches), texts per second of
wall time on this machine now; the goal of the catalog's ingest is a share of it.

Per side, on the same conversations (every turn an entry in its conversation's scope, every
question with evidence a search in that scope, as `bench/locomo.py`):
- ingest until searchable: all turns written by `--concurrency` writers (the catalog's: each
  session written in order, as its turns happen, the sessions side by side); the peer's writes are
  searchable when answered; the catalog's once every vector is stored and the full-text index
  has them (a search in each scope after the backlog is gone);
- search latency, one sequential client, top 10: every question right after the ingest (cold),
  then every question again (steady state); the catalog searches hybrid, the peer semantic (its
  only mode); then the catalog once more in semantic mode and in keyword mode alone, and once
  more in hybrid mode over a bare HTTP/1.1 exchange (`bench/load.py`'s: what the client's own
  time adds to the catalog's latency);
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
import importlib
import json
import os
import random
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.live import REPO, BenchServer
from bench.load import Connection
from bench.locomo import KS, STORE, UC, load, recall
from catalog.client import AsyncClient
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
    cpu_s: float = 0.0  # CPU time of the side's server process over the ingest (Linux /proc)
    postgres_cpu_s: float = 0.0  # CPU time of every PostgreSQL process over the ingest
    cold_ms: list[float] = field(default_factory=list)  # every question, right after the ingest
    steady_ms: list[float] = field(default_factory=list)  # every question again
    recalls: list[dict[int, float]] = field(default_factory=list)
    # ours: one more pass of the questions per way of asking (a mode; the lean client)
    by_mode_ms: dict[str, list[float]] = field(default_factory=dict)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def text_of(entry: dict) -> str:
    """What both sides embed (the catalog's `embedding_text`: description, then contents)."""
    return f"{entry['description']}\n{entry['contents']}"


# --- the peer ------------------------------------------------------------------------------------


async def run_peer(url: str, datasets: list, encoder: Encoder, concurrency: int) -> Side:
    from langgraph.store.postgres.aio import AsyncPostgresStore
    from langgraph.store.postgres.base import PostgresIndexConfig

    async def embed(texts: Sequence[str]) -> list[list[float]]:
        return (await asyncio.to_thread(encoder.encode, list(texts))).tolist()

    side = Side("LangGraph AsyncPostgresStore (in-process)")
    index: PostgresIndexConfig = {
        "dims": DIMENSIONS,
        "embed": embed,
        "fields": ["text"],
        "distance_type": "cosine",
    }
    async with AsyncPostgresStore.from_conn_string(
        url, pool_config={"min_size": 1, "max_size": concurrency}, index=index
    ) as store:
        await store.setup()
        gate = asyncio.Semaphore(concurrency)

        async def put(scope: str, entry: dict) -> None:
            async with gate:
                await store.aput(("locomo", scope), entry["path"], {**entry, "text": text_of(entry)})

        started, pg = time.perf_counter(), postgres_cpu()
        for scope, entries, _ in datasets:
            await asyncio.gather(*(put(scope, e) for e in entries))
        side.ingest_s = side.answered_s = time.perf_counter() - started
        side.postgres_cpu_s = postgres_cpu() - pg

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
    # through the catalog's own `AsyncClient` (its users' client: over plain HTTP, its lean
    # transport), the writes as its generic request (the turn's fields as they are)
    async with AsyncClient(server.url, token, timeout=120) as sdk:
        store = {"name": "locomo", "catalog_name": "main", "schema_name": "default"}
        await sdk.request("POST", f"{UC}/memory-stores", json=store)
        gate = asyncio.Semaphore(concurrency)

        async def put(scope: str, entry: dict) -> None:
            async with gate:
                await sdk.request(
                    "POST",
                    f"{UC}/memory-stores/{STORE}/entries",
                    params={"scope": scope},
                    json={**entry, "write_mode": "OVERWRITE"},
                )

        async def search(scope: str, query: str, mode: str = "hybrid") -> list[str]:
            hits = await sdk.store(STORE).search(scope, query, mode=mode, top_k=TOP_K)
            return [hit.entry.path for hit in hits]

        # each session of each conversation in order, as its turns happen (its write order is its
        # dialogue's: what the neighbours of a hit are read from); the sessions side by side, as
        # many users' conversations are, by `concurrency` writers (the peer's writers)
        sessions: dict[tuple[str, str], list[dict]] = {}
        for scope, entries, _ in datasets:
            for entry in entries:
                sessions.setdefault((scope, entry.get("session_id", "")), []).append(entry)
        queue = list(sessions.items())

        async def writer() -> None:
            while queue:
                (scope, _), entries = queue.pop(0)
                for entry in entries:
                    await put(scope, entry)

        cpu, pg = process_cpu(server.process.pid), postgres_cpu()
        started = time.perf_counter()
        await asyncio.gather(*(writer() for _ in range(concurrency)))
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
        side.postgres_cpu_s = postgres_cpu() - pg

        async def ask(scope: str, question: dict) -> list[str]:
            return await search(scope, question["query"])

        await _searches(side, datasets, ask)
        # the same questions once more in each single mode: what hybrid adds, and the peer's mode
        for mode in ("semantic", "keyword"):
            times = side.by_mode_ms.setdefault(f"{mode} mode", [])
            for scope, _, questions in datasets:
                for question in questions:
                    t0 = time.perf_counter()
                    await search(scope, question["query"], mode)
                    times.append((time.perf_counter() - t0) * 1000)
        # hybrid again over a bare HTTP/1.1 exchange (bench/load.py's): the server's latency with
        # the least of a client's own (httpx on its own transport took 0.5-1.3 ms of a request
        # here, the catalog's AsyncClient about a third of that: bench/client_overhead.py)
        lean = Connection(server.url, token)
        times = side.by_mode_ms.setdefault("hybrid mode over a bare HTTP client", [])
        for scope, _, questions in datasets:
            for question in questions:
                asking = {"scope": scope, "query": question["query"], "mode": "hybrid", "top_k": TOP_K}
                body = json.dumps(asking).encode()
                t0 = time.perf_counter()
                status, _, _ = await lean.request("POST", f"{UC}/memory-stores/{STORE}/entries:search", body)
                times.append((time.perf_counter() - t0) * 1000)
                if status != 200:
                    raise RuntimeError(f"search answered {status}")
        await lean.close()
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

    two_threads = peer_encoder()
    ways = {
        "each text alone, one thread": (encoder.encode, 1, 1),
        "batches of 16 padded to the longest, one thread": (padded, 16, 1),
        "batches of 16 as length-sorted runs, one thread": (encoder.encode, 16, 1),
        "batches of 16 as length-sorted runs, one run on two threads (before)": (two_threads.encode, 16, 1),
        "batches of 8 as length-sorted runs, two one-thread lanes at once (now)": (encoder.encode, 8, 2),
    }
    print(f"the model on {len(texts)} LoCoMo turns (description, contents); load average {load_average()}\n")
    print("| how | texts/s (wall) | texts per CPU-second |")
    print("|---|---|---|")
    for label, (run_batch, size, lanes) in ways.items():
        batches = iter(range(0, len(texts), size))
        lock = threading.Lock()

        def lane(run_batch=run_batch, size=size, batches=batches, lock=lock) -> None:  # type: ignore[no-untyped-def]
            while True:
                with lock:
                    i = next(batches, None)
                if i is None:
                    return
                run_batch(texts[i : i + size])

        wall, cpu = time.perf_counter(), time.process_time()
        threads = [threading.Thread(target=lane) for _ in range(lanes)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        print(f"| {label} | {len(texts) / wall:.0f} | {len(texts) / cpu:.0f} |")


def process_cpu(pid: int) -> float:
    """User and system CPU seconds of a process so far, all its threads (0 where /proc is not)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peer_encoder() -> Encoder:
    from catalog.search.embedder import ModelFiles, OnnxEncoder

    return OnnxEncoder(ModelFiles.default(), threads=2)


def postgres_cpu() -> float:
    """CPU seconds of every PostgreSQL process on the machine so far (the benchmark's own)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/comm"):
        try:
            if stat.read_text().startswith("postgres"):
                total += process_cpu(int(stat.parent.name))
        except (OSError, ValueError):
            continue
    return total


async def model_alone(datasets: list, encoder: Encoder) -> float:
    """Texts per second of wall time of the model alone on every text the server embeds, run
    as the server runs it (the `Embedder`'s lanes and background batches)."""
    from catalog.search.embedder import Embedder

    texts = [text_of(e) for _, entries, _ in datasets for e in entries]
    embedder = Embedder(encoder)
    embedder.start()
    try:
        await embedder.embed(texts[:16], background=True)  # warm
        started = time.perf_counter()
        # as the worker claims them: 256 at a time, each claim's texts queued shortest first
        await asyncio.gather(
            *(embedder.embed(texts[i : i + 256], background=True) for i in range(0, len(texts), 256))
        )
        return len(texts) / (time.perf_counter() - started)
    finally:
        await embedder.close()


def load_average() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


MEMNOS_DATABASE = "memnos"


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
    model_rate = await model_alone(datasets, encoder)
    memnos_peer: ModuleType | None
    missing: str | None
    try:
        memnos_peer = importlib.import_module("bench.memnos_peer")
    except ImportError as exc:  # the module is optional
        memnos_peer, missing = None, f"bench/memnos_peer.py: {exc}"
    else:
        missing = memnos_peer.available() if not args.no_memnos else "left out (--no-memnos)"
    server = BenchServer()
    loads = [f"start {load_average()}"]
    try:
        postgres = with_database(server.db_url(), "postgres")
        peer_url = await fresh_database(postgres, PEER_DATABASE)
        sides: dict[str, Side] = {}
        for which in args.order.split(","):
            if which == "peer":
                # the peer embeds each write alone as it comes: the model on two threads serves
                # it best (one thread a run: 88 entries/s against 119 here)
                sides["peer"] = await run_peer(peer_url, datasets, peer_encoder(), args.concurrency)
            elif which == "memnos":
                if missing is None and memnos_peer is not None:
                    memnos_url = await fresh_database(postgres, MEMNOS_DATABASE)
                    sides["memnos"] = await memnos_peer.run_memnos(memnos_url, datasets, args.concurrency)
            else:
                sides["ours"] = await run_catalog(server, datasets, args.concurrency)
            loads.append(f"after {which} {load_average()}")
    finally:
        server.stop()
    peer, ours, memnos = sides["peer"], sides["ours"], sides.get("memnos")
    report(files, turns, questions, args, loads, model_rate, peer, ours, memnos, missing)


def report(  # type: ignore[no-untyped-def]
    files, turns, questions, args, loads, model_rate, peer: Side, ours: Side, memnos: Side | None, missing
) -> None:
    print(
        f"LoCoMo {', '.join(f.name for f in files)}: {turns} turns, {questions} questions; "
        f"{args.concurrency} writers; order {args.order}; load average {'; '.join(loads)}"
    )
    print(f"memnos: {memnos.name if memnos else f'not run: {missing}'}\n")
    sides = [peer, *([memnos] if memnos else []), ours]
    print(f"| figure | {' | '.join(s.name for s in sides)} | ours / LangGraph | goal |")
    print("|" + "---|" * (len(sides) + 3))

    def row(label: str, cells: list[str], ratio: str = "", goal: str = "") -> None:
        print(f"| {label} | {' | '.join(cells)} | {ratio} | {goal} |")

    rates = [turns / s.ingest_s for s in sides]
    cells = [f"{r:.0f}" for r in rates]
    cells[-1] += (
        f" (writes answered at {turns / ours.answered_s:.0f}/s; {rates[-1] / model_rate:.2f}x the model)"
    )
    row(
        "ingest until searchable (entries/s)",
        cells,
        f"{rates[-1] / rates[0]:.2f}x",
        f"> 1x LangGraph, ≥ 0.85x the model alone ({model_rate:.0f} texts/s)",
    )
    row(
        "CPU per ingested turn: the server process (model included) / PostgreSQL (ms)",
        [
            (f"{s.cpu_s / turns * 1000:.1f} / " if s.cpu_s else "in the benchmark's process / ")
            + f"{s.postgres_cpu_s / turns * 1000:.1f}"
            for s in sides
        ],
        "",
        "server ≤ memnos's" if memnos else "",
    )
    for label, values in (("right after ingest", "cold_ms"), ("steady state", "steady_ms")):
        for q in (0.5, 0.99):
            ms = [pct(getattr(s, values), q) for s in sides]
            goal = "≤ 0.8x" if q == 0.5 else ""
            row(
                f"search p{int(q * 100)}, {label} (ms)",
                [f"{x:.1f}" for x in ms],
                f"{ms[-1] / ms[0]:.2f}x",
                goal,
            )
    for mode, times in ours.by_mode_ms.items():
        p, o50, o99 = pct(peer.steady_ms, 0.5), pct(times, 0.5), pct(times, 0.99)
        row(
            f"ours in {mode} (steady): p50 / p99 (ms)",
            [""] * (len(sides) - 1) + [f"{o50:.1f} / {o99:.1f}"],
            f"{o50 / p:.2f}x (p50)",
        )
    first = min(500, len(ours.cold_ms))
    cold99, steady99 = pct(ours.cold_ms[:first], 0.99), pct(ours.steady_ms, 0.99)
    row(
        f"ours: p99 of the first {first} searches after the bulk load / steady p99",
        [""] * (len(sides) - 1) + [f"{cold99:.1f} / {steady99:.1f} ms ({cold99 / steady99:.2f}x)"],
        "",
        "≤ 1.5x",
    )
    row(
        f"ours: the slowest of the first {first} searches / of the steady ones (ms)",
        [""] * (len(sides) - 1) + [f"{max(ours.cold_ms[:first]):.1f} / {max(ours.steady_ms):.1f}"],
        "",
        "≤ 1000",
    )
    row(
        "ours: the first 10 searches after the bulk load (ms)",
        [""] * (len(sides) - 1) + [", ".join(f"{x:.0f}" for x in ours.cold_ms[:10])],
    )
    for k in KS:
        r = [statistics.mean(x[k] for x in s.recalls) for s in sides]
        row(f"R@{k}", [f"{x:.3f}" for x in r], f"{r[-1] - r[0]:+.3f}", "≥ 0.66" if k == 5 else "")


def main() -> None:
    parser = argparse.ArgumentParser(description="the catalog beside LangGraph's AsyncPostgresStore")
    parser.add_argument("files", nargs="*", help="LoCoMo JSON files")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--order", default="peer,memnos,ours", help="the sides in the order they run (peer, memnos, ours)"
    )
    parser.add_argument("--no-memnos", action="store_true", help="leave memnos out even where it can run")
    parser.add_argument("--model", action="store_true", help="only what the model costs, three ways")
    args = parser.parse_args()
    sides = args.order.split(",")
    if not {"peer", "ours"} <= set(sides) or not set(sides) <= {"peer", "memnos", "ours"}:
        # the report compares the catalog with the peer: both must run
        parser.error("--order names peer and ours (and memnos, if it is to run), separated by commas")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
