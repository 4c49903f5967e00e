"""The floor of a request over HTTP: what a request costs before and around its own work.

`catalog serve` on a fresh data dir (the real model), one store, 200 short entries in one scope;
then one sequential keep-alive client times, after a warm-up: `GET /healthz` (no token, a few
status queries), `GET` a store's details (authenticated, authorized, audited), and a search in
the scope in keyword mode and in hybrid mode (which adds the query's embedding and the vector
search).

Run: .venv/bin/python bench/request_floor.py [--n 300]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

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


async def run(n: int) -> None:
    server = BenchServer()
    try:
        token = server.token()
        async with httpx.AsyncClient(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        ) as client:
            r = await client.post(
                f"{UC}/memory-stores",
                json={"name": "floor", "catalog_name": "main", "schema_name": "default"},
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

            cases: list[tuple[str, Callable[[], Awaitable[None]]]] = [
                ("`GET /healthz` (no token)", healthz),
                ("`GET` a store's details (token, authorization, audit)", store),
                ("search, keyword mode", lambda: search("keyword")),
                ("search, hybrid mode (the query embedded)", lambda: search("hybrid")),
            ]
            print(f"{n} requests each, one sequential keep-alive client, after 20 to warm up\n")
            print("| request | p50 | p99 |")
            print("|---|---|---|")
            for label, call in cases:
                for _ in range(20):
                    await call()
                times = []
                for _ in range(n):
                    t0 = time.perf_counter()
                    await call()
                    times.append((time.perf_counter() - t0) * 1000)
                print(f"| {label} | {pct(times, 0.5):.1f} ms | {pct(times, 0.99):.1f} ms |")
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="the floor of a request over HTTP")
    parser.add_argument("--n", type=int, default=300)
    asyncio.run(run(parser.parse_args().n))


if __name__ == "__main__":
    main()
