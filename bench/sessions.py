"""Session stores: appends per second and the latency of listing a 1,000-item session.

Runs `catalog serve` (the real app over HTTP, on a fresh data dir with the embedded PostgreSQL)
and drives it with httpx over keep-alive connections (the client's own cost is in the figures):
- appends of one item per request: one client on one session (sequential), 8 clients on 8
  sessions, and 8 clients on one session (all contending for its row lock);
- appends of 100 items per request (items per second);
- listing a session of 1,000 items oldest-first: in one page (page_size=1000), and page by page
  at the default page size (100, ten requests), as the SDK's clients read a transcript.
Items are Responses-style messages of about 200 bytes.

Run: .venv/bin/python bench/sessions.py [--appends N] [--lists N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from bench.live import BenchServer

BASE = "/api/2.0/agents/session-stores"
STORE = "bench-sessions"


def item(i: int) -> dict:
    return {
        "type": "message",
        "role": "user" if i % 2 == 0 else "assistant",
        "content": [{"type": "input_text", "text": f"message {i}: " + "lorem ipsum dolor sit amet " * 5}],
    }


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def new_session(http: httpx.AsyncClient, sid: str) -> None:
    r = await http.post(f"{BASE}/{STORE}/sessions", params={"session_id": sid}, json={"actor_id": "bench"})
    r.raise_for_status()


async def appends(
    http: httpx.AsyncClient, sessions: list[str], per_client: int, batch: int
) -> tuple[float, int]:
    """(seconds, requests) for len(sessions) clients, client k appending to sessions[k]."""

    async def client(sid: str) -> None:
        for i in range(per_client):
            body = {"items": [{"data": item(i * batch + j)} for j in range(batch)]}
            r = await http.post(f"{BASE}/{STORE}/sessions/{sid}/items:append", json=body)
            r.raise_for_status()

    start = time.perf_counter()
    await asyncio.gather(*(client(s) for s in sessions))
    return time.perf_counter() - start, per_client * len(sessions)


async def read_all(http: httpx.AsyncClient, sid: str, page_size: int | None) -> int:
    count, token = 0, None
    while True:
        params: dict[str, str | int] = {"order_by": "create_time asc"}
        if page_size:
            params["page_size"] = page_size
        if token:
            params["page_token"] = token
        r = await http.get(f"{BASE}/{STORE}/sessions/{sid}/items", params=params)
        r.raise_for_status()
        body = r.json()
        count += len(body["session_items"])
        token = body.get("next_page_token")
        if not token:
            return count


async def run(url: str, token: str, n_appends: int, n_lists: int) -> list[tuple[str, str]]:
    limits = httpx.Limits(max_connections=16, max_keepalive_connections=16)
    headers = {"Authorization": f"Bearer {token}"}
    rows: list[tuple[str, str]] = []
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=120) as http:
        r = await http.post(BASE, params={"session_store_name": STORE}, json={})
        r.raise_for_status()
        for sid in ["warm", "one", "shared", "big", *[f"own-{k}" for k in range(8)]]:
            await new_session(http, sid)
        await appends(http, ["warm"], 50, 1)  # connections, caches, plans

        seconds, requests = await appends(http, ["one"], n_appends, 1)
        rows.append(("append 1 item, 1 client", f"{requests / seconds:,.0f} appends/s"))
        seconds, requests = await appends(http, [f"own-{k}" for k in range(8)], n_appends // 8, 1)
        rows.append(("append 1 item, 8 clients on 8 sessions", f"{requests / seconds:,.0f} appends/s"))
        seconds, requests = await appends(http, ["shared"] * 8, n_appends // 8, 1)
        rows.append(("append 1 item, 8 clients on 1 session", f"{requests / seconds:,.0f} appends/s"))
        seconds, requests = await appends(http, ["big"], 10, 100)
        rows.append(("append 100 items per request, 1 client", f"{requests * 100 / seconds:,.0f} items/s"))

        assert await read_all(http, "big", 1000) == 1000
        for label, size in (
            ("list 1,000 items, one page", 1000),
            ("list 1,000 items, 10 pages of 100", None),
        ):
            times = []
            for _ in range(n_lists):
                start = time.perf_counter()
                assert await read_all(http, "big", size) == 1000
                times.append((time.perf_counter() - start) * 1000)
            rows.append(
                (
                    label,
                    f"p50 {statistics.median(times):.1f} ms, p99 {pct(times, 0.99):.1f} ms",
                )
            )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--appends", type=int, default=800, help="one-item appends per measurement")
    parser.add_argument("--lists", type=int, default=50, help="full reads of the 1,000-item session")
    args = parser.parse_args()
    server = BenchServer()
    try:
        rows = asyncio.run(run(server.url, server.token(), args.appends, args.lists))
    finally:
        server.stop()
    width = max(len(label) for label, _ in rows)
    print(f"| {'measurement'.ljust(width)} | result |")
    print(f"|{'-' * (width + 2)}|--------|")
    for label, value in rows:
        print(f"| {label.ljust(width)} | {value} |")


if __name__ == "__main__":
    main()
