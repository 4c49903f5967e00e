"""The floor of a request over HTTP: what a request costs before and around its own work.

`catalog serve` on a fresh data dir (the real model), one store, 200 short entries in one scope;
then one sequential keep-alive client times, after a warm-up: `GET /healthz` (no token, a few
status queries), `GET` a store's details (authenticated, authorized, audited), and a search in
the scope in keyword mode and in hybrid mode (which adds the query's embedding and the vector
search).

With --tracing, the same on two servers at once, each request of a case sent to one then the
other: tracing off (no OTEL_ variable), and tracing on, exporting every span over OTLP/HTTP to a
receiver in this process that reads each batch and discards it (on the same machine, so its CPU
counts against the floor too).

Run: .venv/bin/python bench/request_floor.py [--n 300] [--tracing]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.live import BenchServer

UC = "/api/2.1/unity-catalog"
STORE = "main.default.floor"
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


@contextmanager
def discarding_receiver() -> Iterator[str]:
    """An OTLP/HTTP endpoint that reads every export and answers 200 with an empty body (an empty
    ExportTraceServiceResponse); yields its base URL."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a collector would

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


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


async def measure(n: int, envs: list[dict[str, str]]) -> list[list[tuple[str, float, float]]]:
    """(request, p50 ms, p99 ms) of each case on one fresh server per environment, all started
    at once; each case's requests alternate between the servers (so that whatever else runs on
    the machine weighs on each alike)."""
    servers: list[BenchServer] = []
    try:
        for env in envs:
            servers.append(BenchServer(env=env))
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


async def run(n: int, tracing: bool) -> None:
    print(f"{n} requests each, one sequential keep-alive client, after 20 to warm up\n")
    for name in [k for k in os.environ if k.startswith("OTEL_")]:
        del os.environ[name]  # BenchServer passes the environment on: off means no OTEL_ variable
    if not tracing:
        print("| request | p50 | p99 |")
        print("|---|---|---|")
        for label, p50, p99 in (await measure(n, [{}]))[0]:
            print(f"| {label} | {p50:.1f} ms | {p99:.1f} ms |")
        return
    with discarding_receiver() as url:
        off, on = await measure(n, [{}, {"OTEL_EXPORTER_OTLP_ENDPOINT": url}])
    print("| request | p50, tracing off | p50, tracing on | p99, tracing off | p99, tracing on |")
    print("|---|---|---|---|---|")
    for (label, p50_off, p99_off), (_, p50_on, p99_on) in zip(off, on, strict=True):
        print(f"| {label} | {p50_off:.1f} ms | {p50_on:.1f} ms | {p99_off:.1f} ms | {p99_on:.1f} ms |")


def main() -> None:
    parser = argparse.ArgumentParser(description="the floor of a request over HTTP")
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument(
        "--tracing",
        action="store_true",
        help="measure with tracing off, then on (spans exported to a local receiver that discards them)",
    )
    args = parser.parse_args()
    asyncio.run(run(args.n, args.tracing))


if __name__ == "__main__":
    main()
