"""The floor of a request over HTTP: what a request costs before and around its own work.

`catalog serve` on a fresh data dir (the real model), one store, 200 short entries in one scope;
then one sequential keep-alive client times, after a warm-up: `GET /healthz` (no token, a few
status queries), `GET` a store's details (authenticated, authorized, audited), and a search in
the scope in keyword mode and in hybrid mode (which adds the query's embedding and the vector
search).

With --cpu, what a request costs the server in CPU instead of time: the same cases (and the model
alone on the query), and a hybrid search of a second store, a conversation's 200 turns in ten
sessions (where a search also reads each hit's neighbours), each sent `--count` times (a
hybrid search 2/5 of it) by two client processes over two keep-alive
connections each (bench/load.py), the CPU time of the server's processes (every worker) and of
PostgreSQL's measured around them and divided by the requests answered; the clients' own CPU is
printed beside it. `--workers N` serves with N worker processes.

With --cpu --profile, py-spy samples the server's processes during each case (bench/where.py),
and a table says where their CPU went, stage by stage (the model, Tantivy, ranking, audit,
authorization, the token, asyncpg, JSON, Litestar, HTTP, the event loop, socket I/O).

With --cpu --perf, Linux `perf` samples the server's process instead, native code and kernel
included, and a table says which library its CPU went to (bench/where.py `PerfRecording`): the
model, the Python interpreter, the kernel (and, of that, waking and switching threads), the C
library, Tantivy, uvloop, asyncpg.

With --cpu --repo DIR, the server is another checkout's (a git worktree of an earlier commit):
the same figures before a change, with this tree's benchmark.

With --against DIR, the same on two servers at once, this tree's and another checkout's (a git
worktree of an earlier commit: `git worktree add /tmp/before <commit>`), each request of a case
sent to one then the other: what a change did to the floor.

With --tracing, the same on two servers at once, each request of a case sent to one then the
other: tracing off (no OTEL_ variable), and tracing on, exporting every span over OTLP/HTTP to a
receiver in this process that reads each batch and discards it (on the same machine, so its CPU
counts against the floor too).

Run: .venv/bin/python bench/request_floor.py [--n 300] [--tracing] [--against DIR]
     [--cpu [--workers N] [--profile | --perf] [--repo DIR] [--set CATALOG_NAME=VALUE ...]]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import locomo, where
from bench.live import BenchServer, span_receiver
from bench.load import Request, cpu_of_postgres, cpu_of_server, load, load_average

UC = "/api/2.1/unity-catalog"
STORE = "main.default.floor"
TALK = "main.default.floor_talk"  # --cpu's second store: a conversation's turns, in sessions
WORDS = [
    "the",
    "user",
    "likes",
    "hiking",
    "in",
    "the",
    "mountains",
    "and",
    "prefers",
    "tea",
    "over",
    "coffee",
    "when",
    "working",
    "late",
    "at",
    "night",
]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


Case = tuple[str, Callable[[], Awaitable[None]]]


async def prepare(client: httpx.AsyncClient) -> list[Case]:
    """One store of 200 short entries in one scope; the cases to time on it."""
    r = await client.post(
        f"{UC}/memory-stores", json={"name": "floor", "catalog_name": "main", "schema_name": "default"}
    )
    r.raise_for_status()
    for i in range(200):
        turn = " ".join(WORDS[i % 7 :] + WORDS[: i % 7])
        r = await client.post(
            f"{UC}/memory-stores/{STORE}/entries",
            json={"scope": "u1", "path": f"/notes/{i}.md", "contents": f"{turn} {i}"},
        )
        r.raise_for_status()

    async def search(mode: str) -> None:
        r = await client.post(
            f"{UC}/memory-stores/{STORE}/entries:search",
            json={"scope": "u1", "query": "hiking tea at night", "mode": mode},
        )
        r.raise_for_status()

    async def healthz() -> None:
        (await client.get("/healthz")).raise_for_status()

    async def store() -> None:
        (await client.get(f"{UC}/memory-stores/{STORE}")).raise_for_status()

    return [
        ("`GET /healthz` (no token)", healthz),
        ("`GET` a store's details (token, authorization, audit)", store),
        ("search, keyword mode", lambda: search("keyword")),
        ("search, hybrid mode (the query embedded)", lambda: search("hybrid")),
    ]


async def timed(call: Callable[[], Awaitable[None]]) -> float:
    t0 = time.perf_counter()
    await call()
    return (time.perf_counter() - t0) * 1000


async def measure(
    n: int, envs: list[dict[str, str]], repos: list[Path | None] | None = None
) -> list[list[tuple[str, float, float]]]:
    """(request, p50 ms, p99 ms) of each case on one fresh server per environment, all started
    at once; each case's requests alternate between the servers (so that whatever else runs on
    the machine weighs on each alike)."""
    servers: list[BenchServer] = []
    try:
        for env, repo in zip(envs, repos or [None] * len(envs), strict=True):
            servers.append(BenchServer(env=env, repo=repo))
        clients = [
            httpx.AsyncClient(base_url=s.url, headers={"Authorization": f"Bearer {s.token()}"}, timeout=60)
            for s in servers
        ]
        try:
            cases = [await prepare(client) for client in clients]
            rows: list[list[tuple[str, float, float]]] = [[] for _ in servers]
            for k, (label, _) in enumerate(cases[0]):
                calls = [server_cases[k][1] for server_cases in cases]
                for call in calls:
                    for _ in range(20):
                        await call()
                times: list[list[float]] = [[] for _ in calls]
                for i in range(n):
                    order = range(len(calls)) if i % 2 == 0 else reversed(range(len(calls)))
                    for j in order:
                        times[j].append(await timed(calls[j]))
                for j, series in enumerate(times):
                    rows[j].append((label, pct(series, 0.5), pct(series, 0.99)))
            return rows
        finally:
            for client in clients:
                await client.aclose()
    finally:
        for server in servers:
            server.stop()


async def run(n: int, tracing: bool, against: Path | None = None) -> None:
    print(f"{n} requests each, one sequential keep-alive client, after 20 to warm up\n")
    for name in [k for k in os.environ if k.startswith("OTEL_")]:
        del os.environ[name]  # BenchServer passes the environment on: off means no OTEL_ variable
    if against is not None:
        other, this = await measure(n, [{}, {}], [against, None])
        print(f"| request | p50, {against} | p50, this tree | p99, {against} | p99, this tree |")
        print("|---|---|---|---|---|")
        for (label, p50_a, p99_a), (_, p50_b, p99_b) in zip(other, this, strict=True):
            print(f"| {label} | {p50_a:.2f} ms | {p50_b:.2f} ms | {p99_a:.1f} ms | {p99_b:.1f} ms |")
        return
    if not tracing:
        print("| request | p50 | p99 |")
        print("|---|---|---|")
        for label, p50, p99 in (await measure(n, [{}]))[0]:
            print(f"| {label} | {p50:.1f} ms | {p99:.1f} ms |")
        return
    with span_receiver() as url:
        off, on = await measure(n, [{}, {"OTEL_EXPORTER_OTLP_ENDPOINT": url}])
    print("| request | p50, tracing off | p50, tracing on | p99, tracing off | p99, tracing on |")
    print("|---|---|---|---|---|")
    for (label, p50_off, p99_off), (_, p50_on, p99_on) in zip(off, on, strict=True):
        print(f"| {label} | {p50_off:.1f} ms | {p50_on:.1f} ms | {p99_off:.1f} ms | {p99_on:.1f} ms |")


def queries() -> list[str]:
    """Twenty short questions over the entries' words (the same few terms, in other orders)."""
    words = [w for w in WORDS if w not in ("the", "in", "and", "at", "when", "over")]
    return [" ".join(words[i % len(words) :][:3] + words[: (i * 3) % 4]) for i in range(20)]


DETAILS: list[Request] = [("GET", f"{UC}/memory-stores/{STORE}", None)]


def searches(mode: str) -> list[Request]:
    """The twenty questions of `queries()` as searches of the floor's scope in `mode`."""
    target = f"{UC}/memory-stores/{STORE}/entries:search"
    return [
        ("POST", target, json.dumps({"scope": "u1", "query": q, "mode": mode}).encode()) for q in queries()
    ]


def talk_searches() -> list[Request]:
    """The twenty questions of `queries()` as hybrid searches of the conversation's scope."""
    target = f"{UC}/memory-stores/{TALK}/entries:search"
    return [
        ("POST", target, json.dumps({"scope": "u1", "query": q, "mode": "hybrid"}).encode())
        for q in queries()
    ]


async def converse(client: httpx.AsyncClient) -> None:
    """A second store: 200 turns of two speakers in ten sessions of twenty, written in order
    (`locomo.ingest`), each some forty words (a chat's turn): a hybrid search there also finds
    each hit's neighbours, the turns written just before and after it in its session."""
    r = await client.post(
        f"{UC}/memory-stores", json={"name": "floor_talk", "catalog_name": "main", "schema_name": "default"}
    )
    r.raise_for_status()
    turns = []
    for session in range(10):
        for i in range(20):
            k = session * 20 + i
            said = " ".join(WORDS[k % 11 :] + WORDS[: k % 11] + WORDS[k % 5 :][:6] + WORDS[: k % 3 + 15])
            speaker = "Ana" if i % 2 == 0 else "Ben"
            turns.append(
                {
                    "path": f"/dialog/{session}/{i}",
                    "contents": f"{speaker}: {said} ({k})",
                    "session_id": f"s{session}",
                }
            )
    await locomo.ingest(client, "u1", turns, 1, store=TALK)  # in order, as a conversation is imported


async def prepared(server: BenchServer) -> str:
    """The floor's store on `server` (`prepare`) and the conversation's (`converse`), every entry
    embedded and indexed; the admin's token."""
    token = server.token()
    async with httpx.AsyncClient(
        base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as client:
        await prepare(client)
        await converse(client)
        for store in (STORE, TALK):
            r = await client.post(
                f"{UC}/memory-stores/{store}/entries:search",
                json={"scope": "u1", "query": "tea", "mode": "hybrid"},
            )
            r.raise_for_status()
    return token


def model_cpu_ms(texts: list[str]) -> float:
    """The model alone on a query: CPU ms of one `encode` of one text on one thread (as a lane of
    the server runs it), the mean over the texts after a warm-up."""
    from catalog.runtime import load_encoder
    from catalog.settings import Settings

    encoder = load_encoder(Settings())
    for text in texts:
        encoder.encode([text])
    started = time.thread_time()
    for _ in range(10):
        for text in texts:
            encoder.encode([text])
    return (time.thread_time() - started) * 1000 / (10 * len(texts))


async def cpu(
    count: int,
    workers: int,
    processes: int,
    connections: int,
    profile: bool = False,
    settings: dict[str, str] | None = None,
    perf: bool = False,
    repo: Path | None = None,
) -> None:
    """Server-side CPU per request (the server's processes and PostgreSQL's) for each case
    (`settings`: more of the server's CATALOG_ variables)."""
    server = BenchServer(env={"CATALOG_WORKERS": str(workers), **(settings or {})}, repo=repo)
    try:
        token = await prepared(server)
        cases: list[tuple[str, list[Request], int]] = [
            ("`GET` a store's details", DETAILS, count),
            ("search, keyword mode", searches("keyword"), count),
            ("search, hybrid mode", searches("hybrid"), max(1, count * 2 // 5)),
            ("search, hybrid mode, a conversation's turns", talk_searches(), max(1, count * 2 // 5)),
        ]
        model = model_cpu_ms(queries())
        profiles: dict[str, tuple[float, dict[str, float]]] = {}
        print(
            f"{processes} client processes x {connections} keep-alive connections; {workers} worker(s); "
            f"{os.cpu_count()} cores; load average {load_average()} at the start\n"
        )
        print(
            "| request | requests | server CPU / request | PostgreSQL CPU / request | together | "
            "requests/s | client CPU / request | busiest client (cores) |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for label, requests, n in cases:
            # a warm-up: connections, statements, caches
            await load([server.url], token, requests, processes=processes, connections=connections, count=100)
            pgdata = server.data_dir / "postgres"
            served, postgres = cpu_of_server(server.process.pid), cpu_of_postgres(pgdata)
            recording: where.Recording | where.PerfRecording | None = None
            if profile:
                recording = where.Recording(server.process.pid)
            elif perf:
                recording = where.PerfRecording(server.process.pid)
            if recording is not None:
                recording.start()
            report = await load(
                [server.url], token, requests, processes=processes, connections=connections, count=n
            )
            served, postgres = cpu_of_server(server.process.pid) - served, cpu_of_postgres(pgdata) - postgres
            if recording is not None:
                profiles[label] = (served * 1000 / report.requests, recording.stop())
            assert report.errors == 0, report.first_error
            per = 1000 / report.requests
            print(
                f"| {label} | {report.requests} | {served * per:.2f} ms | {postgres * per:.2f} ms | "
                f"{(served + postgres) * per:.2f} ms | {report.rate:.0f} | "
                f"{sum(report.client_cpu_s) * per:.2f} ms | {report.busiest_client:.2f} |",
                flush=True,
            )
        print(f"\nthe model alone on a query (one thread): {model:.2f} ms of CPU")
        if profiles:
            labels = list(profiles)
            names = sorted(
                {n for _, shares in profiles.values() for n in shares},
                key=lambda n: -max(profiles[k][1].get(n, 0.0) for k in labels),
            )
            if where.FUTEX in names and "kernel" in names:  # "of which" goes under its whole
                names.remove(where.FUTEX)
                names.insert(names.index("kernel") + 1, where.FUTEX)
            sampler = "py-spy samples" if profile else "perf samples, by library"
            print(f"\nwhere the server's CPU goes ({sampler}; ms of CPU per request, and share):\n")
            print("| stage | " + " | ".join(labels) + " |")
            print("|---|" + "---:|" * len(labels))
            for name in names:
                shares = [(profiles[k][0], profiles[k][1].get(name, 0.0)) for k in labels]
                cells = [f"{ms * share:.2f} ({share:.0%})" for ms, share in shares]
                print(f"| {name} | " + " | ".join(cells) + " |")
        print(f"load average {load_average()} at the end")
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="the floor of a request over HTTP")
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument(
        "--tracing",
        action="store_true",
        help="measure with tracing off, then on (spans exported to a local receiver that discards them)",
    )
    parser.add_argument(
        "--against",
        type=Path,
        help="another checkout (a git worktree of an earlier commit): its server beside this tree's, "
        "each request of a case sent to one then the other",
    )
    parser.add_argument("--cpu", action="store_true", help="server CPU per request instead of latency")
    parser.add_argument("--count", type=int, default=1500, help="with --cpu: requests of each case")
    parser.add_argument("--workers", type=int, default=1, help="with --cpu: the server's worker processes")
    parser.add_argument("--processes", type=int, default=2, help="with --cpu: client processes")
    parser.add_argument("--connections", type=int, default=2, help="with --cpu: connections per client")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="with --cpu: where the server's CPU goes (py-spy, bench/where.py)",
    )
    parser.add_argument(
        "--perf",
        action="store_true",
        help="with --cpu: where the server's CPU goes by library, kernel included (Linux perf)",
    )
    parser.add_argument(
        "--repo",
        type=Path,
        help="with --cpu: serve another checkout's catalog (a git worktree of an earlier commit)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="CATALOG_NAME=VALUE",
        help="with --cpu: a setting of the server (e.g. CATALOG_EVENT_LOOP=asyncio); repeatable",
    )
    args = parser.parse_args()
    if args.cpu:
        given = dict(item.split("=", 1) for item in args.set)
        if any(not name.startswith("CATALOG_") for name in given):
            parser.error("--set takes CATALOG_NAME=VALUE")
        if args.perf and not where.perf_available():
            parser.error("--perf needs Linux perf (the linux-perf package)")
        asyncio.run(
            cpu(
                args.count,
                args.workers,
                args.processes,
                args.connections,
                args.profile,
                given,
                args.perf,
                args.repo,
            )
        )
        return
    asyncio.run(run(args.n, args.tracing, args.against))


if __name__ == "__main__":
    main()
