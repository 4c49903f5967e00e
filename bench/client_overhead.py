"""What the catalog's Python client costs its own process per request: CPU and wall time of
sequential searches against a server that answers every request at once with the same bytes (a
search's answer: ten hits of LoCoMo-sized entries), so that only the client's side is measured.

- `AsyncClient` on its default transport over plain HTTP (`catalog.client._transport`: lean
  keep-alive connections on asyncio's streams);
- `AsyncClient` given an `httpx.AsyncClient` (httpx's own transport: httpcore, anyio, h11), as
  every request went before;
- `Client` (blocking) on its default transport over plain HTTP (the same, on sockets), and given
  an `httpx.Client` (httpx's own transport);
- the floor: a bare HTTP/1.1 exchange on asyncio's streams (`bench/load.py`'s `Connection`) and
  the JSON decoded, no client library.

Each way runs `--requests` searches after 200 to warm up, the ways in turn, `--rounds` times,
every client made once and its connections kept; the answering server is a process of its own.
Figures are per request: CPU of this process over the timed searches (`time.process_time`) and
the median wall time.

With `--data-dir D` (a store made by `bench/locomo.py --data-dir D`), it measures instead what
each client makes of a whole hybrid search: `catalog serve` on D, the LoCoMo questions asked in
their scopes by the same five clients in turn (each question by all of them, the order
rotating), `--rounds` passes after one to warm up; p50, p90 and p99 each.

Run: .venv/bin/python bench/client_overhead.py [--requests 3000] [--rounds 3]
     .venv/bin/python bench/client_overhead.py --data-dir D [--rounds 2] [FILE.json ...]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import locomo
from bench.live import REPO, BenchServer
from bench.load import Connection
from catalog.client import AsyncClient, Client

STORE = "main.default.bench"
UC = "/api/2.1/unity-catalog"
PATH = f"{UC}/memory-stores/{STORE}/entries:search"


def answer() -> bytes:
    """A search's answer as the server writes it: ten hits."""
    hits = [
        {
            "memory_entry": {
                "scope": "conv-26",
                "path": f"D1:{i}",
                "session_id": "session_1",
                "etag": f'"{i}"',
                "contents": "Caroline: I went to the LGBTQ support group yesterday and it was so powerful. "
                * 2,
                "description": "conversation turn",
                "created_at": 1_700_000_000_000,
                "created_by": "admin@example.com",
                "updated_at": 1_700_000_000_000,
                "updated_by": "admin@example.com",
                "state": "active",
            },
            "score": 0.5 - i / 100,
        }
        for i in range(10)
    ]
    body = json.dumps({"results": hits}).encode()
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
    return head + body


async def serve(port: int) -> None:
    """Answer every request on every connection with the same search answer."""
    reply = answer()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                writer.write(reply)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


Search = Callable[[str, str], Awaitable[object]]  # (scope, query) -> the answer


@contextlib.asynccontextmanager
async def searchers(url: str, token: str, store: str) -> AsyncIterator[dict[str, Search]]:
    """The five ways, each a hybrid search (top 10) of `store` over its own connections."""
    path = f"{UC}/memory-stores/{store}/entries:search"
    async with (
        AsyncClient(url, token) as lean,
        httpx.AsyncClient(timeout=30) as http,
        AsyncClient(url, token, http=http) as over_httpx,
    ):
        with (
            Client(url, token) as blocking,
            httpx.Client(timeout=30) as blocking_http,
            Client(url, token, http=blocking_http) as blocking_over_httpx,
        ):
            connection = Connection(url, token)

            def of(client: AsyncClient) -> Search:
                return lambda scope, query: client.store(store).search(scope, query, mode="hybrid", top_k=10)

            def blocking_of(client: Client) -> Search:
                async def search(scope: str, query: str) -> object:  # blocking, measured on purpose
                    return client.store(store).search(scope, query, mode="hybrid", top_k=10)

                return search

            async def bare(scope: str, query: str) -> object:
                body = json.dumps({"scope": scope, "query": query, "mode": "hybrid", "top_k": 10}).encode()
                status, data, _ = await connection.request("POST", path, body)
                assert status == 200, data
                return json.loads(data)

            try:
                yield {
                    "AsyncClient, lean transport (the default)": of(lean),
                    "AsyncClient over httpx.AsyncClient (httpx's transport)": of(over_httpx),
                    "Client, lean transport (the default)": blocking_of(blocking),
                    "Client over httpx.Client (httpx's transport)": blocking_of(blocking_over_httpx),
                    "bare HTTP/1.1 on asyncio's streams, json.loads": bare,
                }
            finally:
                await connection.close()


async def alone(url: str, count: int, rounds: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Each way's CPU (ms a request) and median wall time (ms), a figure per round, against the
    answering process: `count` searches a way after 200 to warm up, the ways in turn."""
    cpu: dict[str, list[float]] = {}
    wall: dict[str, list[float]] = {}
    async with searchers(url, "token", STORE) as ways:
        for _ in range(rounds):
            for name, search in ways.items():
                for _ in range(200):
                    await search("conv-26", "support group")
                times = []
                started = time.process_time()
                for _ in range(count):
                    t0 = time.perf_counter()
                    await search("conv-26", "support group")
                    times.append(time.perf_counter() - t0)
                cpu.setdefault(name, []).append((time.process_time() - started) / count * 1000)
                wall.setdefault(name, []).append(statistics.median(times) * 1000)
    return cpu, wall


async def end_to_end(
    server: BenchServer, questions: list[tuple[str, str]], rounds: int
) -> dict[str, list[float]]:
    """Each way's latencies (ms) of whole hybrid searches, every question asked by each in turn."""
    async with searchers(server.url, server.token(), locomo.STORE) as ways:
        names = list(ways)
        times: dict[str, list[float]] = {name: [] for name in names}
        for round_ in range(rounds + 1):  # the first warms up
            for i, (scope, query) in enumerate(questions):
                for name in names[i % len(names) :] + names[: i % len(names)]:
                    t0 = time.perf_counter()
                    await ways[name](scope, query)
                    if round_:
                        times[name].append((time.perf_counter() - t0) * 1000)
        return times


def served(data_dir: Path, files: list[Path], rounds: int) -> None:
    files = files or sorted((REPO.parent / "shared/bench/locomo").glob("*.json"))
    if not files:
        print("client_overhead: no LoCoMo files given and ../shared/bench/locomo/ is not here")
        return
    questions = [(scope, q["query"]) for scope, _, qs in map(locomo.load, files) for q in qs]
    load = os.getloadavg()
    server = BenchServer(data_dir)
    try:
        times = asyncio.run(end_to_end(server, questions, rounds))
    finally:
        server.stop()
    print(
        f"{len(questions)} LoCoMo questions, hybrid, top 10, {rounds} round(s) after one to warm up; "
        f"load average {load[0]:.2f} at the start\n"
    )
    print("| client | p50 (ms) | p90 | p99 |")
    print("|---|---:|---:|---:|")
    for name, values in times.items():
        values.sort()
        n = len(values)
        print(f"| {name} | {values[n // 2]:.2f} | {values[int(n * 0.9)]:.2f} | {values[int(n * 0.99)]:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "files", nargs="*", type=Path, help="LoCoMo JSON files (with --data-dir: their questions)"
    )
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--data-dir", type=Path, help="a store made by bench/locomo.py: whole searches on it")
    parser.add_argument("--port", type=int, default=0, help="(the answering server's, internal)")
    parser.add_argument("--serve", action="store_true", help="(run the answering server, internal)")
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.port))
        return
    if args.data_dir is not None:
        served(args.data_dir, args.files, args.rounds)
        return
    port = 18765
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", "--port", str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        cpu, wall = asyncio.run(alone(f"http://127.0.0.1:{port}", args.requests, args.rounds))
        print(f"{args.requests} searches a way, {args.rounds} rounds (each round's figure)\n")
        print("| client | its CPU per request (ms) | median wall (ms) |")
        print("|---|---:|---:|")
        for name in cpu:
            c = " / ".join(f"{v:.3f}" for v in cpu[name])
            w = " / ".join(f"{v:.3f}" for v in wall[name])
            print(f"| {name} | {c} | {w} |")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
