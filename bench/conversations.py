"""Conversations (OpenAI-compatible API): append throughput and list latency over HTTP.

A `catalog serve` on a fresh data dir (embedded PostgreSQL), one store, the admin's token.
1. Appends of one message item each (a chat turn) into one conversation up to 1,000 items:
   sequentially (one client), then from 8 concurrent clients into the same conversation (they
   serialize on its row lock) and from 8 clients into 8 conversations of their own.
2. On the 1,000-item conversation: list a page (`limit` 20 and 100, newest first and oldest
   first, and a page `after` an item in the middle) and retrieve one item, sequentially; then
   transcript search (`conversations:search`, keyword, semantic, hybrid) over every message of
   the scope (about 3,000, all cases above).

Run: .venv/bin/python bench/conversations.py [--items 1000] [--reads 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.live import BenchServer

UC = "/api/2.1/unity-catalog"
BASE = "/ai-gateway/mlflow/v1/conversations"
STORE = "main.default.conversations-bench"
CLIENTS = 8


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def message(i: int) -> dict[str, object]:
    role = "user" if i % 2 == 0 else "assistant"
    return {
        "role": role,
        "content": f"turn {i}: a sentence or two of chat, as a person or a model writes it.",
    }


async def new_conversation(http: httpx.AsyncClient) -> str:
    r = await http.post(
        BASE, json={"memory_store": {"name": STORE}, "scope": {"kind": "user", "value": "bench-user"}}
    )
    r.raise_for_status()
    conversation_id: str = r.json()["id"]
    return conversation_id


async def append_many(http: httpx.AsyncClient, conversation: str, start: int, count: int) -> list[float]:
    latencies = []
    for i in range(start, start + count):
        began = time.perf_counter()
        r = await http.post(f"{BASE}/{conversation}/items", json={"items": [message(i)]})
        latencies.append(time.perf_counter() - began)
        r.raise_for_status()
    return latencies


async def appends(http: httpx.AsyncClient, items: int) -> tuple[str, list[tuple[str, float, float, float]]]:
    """(the conversation filled sequentially, rows of (case, appends/s, p50 ms, p99 ms))."""
    rows = []
    full = await new_conversation(http)
    await append_many(http, full, 0, 20)  # warm-up: connections, plans
    full = await new_conversation(http)
    began = time.perf_counter()
    latencies = await append_many(http, full, 0, items)
    rows.append(("1 client, 1 conversation", items / (time.perf_counter() - began), *_ms(latencies)))

    shared = await new_conversation(http)
    per = items // CLIENTS
    began = time.perf_counter()
    results = await asyncio.gather(*(append_many(http, shared, c * per, per) for c in range(CLIENTS)))
    elapsed = time.perf_counter() - began
    rows.append(
        (f"{CLIENTS} clients, 1 conversation", per * CLIENTS / elapsed, *_ms([x for r in results for x in r]))
    )

    own = [await new_conversation(http) for _ in range(CLIENTS)]
    began = time.perf_counter()
    results = await asyncio.gather(*(append_many(http, own[c], 0, per) for c in range(CLIENTS)))
    elapsed = time.perf_counter() - began
    rows.append(
        (
            f"{CLIENTS} clients, {CLIENTS} conversations",
            per * CLIENTS / elapsed,
            *_ms([x for r in results for x in r]),
        )
    )
    return full, rows


def _ms(latencies: list[float]) -> tuple[float, float]:
    return statistics.median(latencies) * 1000, pct(latencies, 0.99) * 1000


async def reads(
    http: httpx.AsyncClient, conversation: str, items: int, n: int
) -> list[tuple[str, float, float]]:
    ids: list[str] = []  # oldest first, up to the middle of the conversation
    while True:
        params: dict[str, str | int] = {"limit": 100, "order": "asc", **({"after": ids[-1]} if ids else {})}
        r = await http.get(f"{BASE}/{conversation}/items", params=params)
        r.raise_for_status()
        ids += [item["id"] for item in r.json()["data"]]
        if not r.json()["has_more"] or len(ids) >= items // 2:
            break
    middle = ids[min(len(ids), items // 2) - 1]
    cursor = ids[len(ids) // 2]
    cases: list[tuple[str, str, dict[str, str | int]]] = [
        ("list, limit 20, newest first", f"{BASE}/{conversation}/items", {}),
        ("list, limit 100, newest first", f"{BASE}/{conversation}/items", {"limit": 100}),
        ("list, limit 100, oldest first", f"{BASE}/{conversation}/items", {"limit": 100, "order": "asc"}),
        (
            "list, limit 100, after an item",
            f"{BASE}/{conversation}/items",
            {"limit": 100, "order": "asc", "after": middle},
        ),
        ("retrieve one item", f"{BASE}/{conversation}/items/{cursor}", {}),
        ("retrieve the conversation", f"{BASE}/{conversation}", {}),
    ]
    rows = []
    for name, url, params in cases:
        for _ in range(10):  # warm-up
            (await http.get(url, params=params)).raise_for_status()
        latencies = []
        for _ in range(n):
            began = time.perf_counter()
            r = await http.get(url, params=params)
            latencies.append(time.perf_counter() - began)
            r.raise_for_status()
        rows.append((name, *_ms(latencies)))
    # transcript search over every message of the scope (all the conversations above)
    search = f"{UC}/memory-stores/{STORE}/conversations:search"
    for mode in ("keyword", "semantic", "hybrid"):
        latencies = []
        for i in range(n + 10):
            body = {"scope": "bench-user", "query": f"turn {i * 7 % items}: a sentence of chat", "mode": mode}
            began = time.perf_counter()
            r = await http.post(search, json=body)
            if i >= 10:  # the first ten warm up
                latencies.append(time.perf_counter() - began)
            r.raise_for_status()
            assert r.json()["results"], "a search finds messages"
        rows.append((f"transcript search, {mode}, top 10", *_ms(latencies)))
    return rows


async def run(server: BenchServer, items: int, n: int) -> None:
    headers = {"Authorization": f"Bearer {server.token()}"}
    limits = httpx.Limits(max_connections=CLIENTS * 2)
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60, limits=limits) as http:
        r = await http.post(
            f"{UC}/memory-stores",
            json={"name": STORE.rsplit(".", 1)[1], "catalog_name": "main", "schema_name": "default"},
        )
        r.raise_for_status()
        full, append_rows = await appends(http, items)
        r = await http.get(f"{BASE}/{full}/items", params={"limit": 1})
        assert r.json()["data"][0]["content"][0]["text"].startswith(f"turn {items - 1}:")
        read_rows = await reads(http, full, items, n)
    print(f"appends (one message item per request; {items} items per case)")
    print("| case | appends/s | p50 ms | p99 ms |\n|---|---:|---:|---:|")
    for name, rate, p50, p99 in append_rows:
        print(f"| {name} | {rate:.0f} | {p50:.1f} | {p99:.1f} |")
    print(f"\nreads on a {items}-item conversation ({n} sequential requests each)")
    print("| request | p50 ms | p99 ms |\n|---|---:|---:|")
    for name, p50, p99 in read_rows:
        print(f"| {name} | {p50:.1f} | {p99:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--items", type=int, default=1000, help="items per append case (default 1000)")
    parser.add_argument("--reads", type=int, default=200, help="requests per read case (default 200)")
    args = parser.parse_args()
    server = BenchServer()
    try:
        asyncio.run(run(server, args.items, args.reads))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
