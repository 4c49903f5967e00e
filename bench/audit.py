"""The cost of auditing: throughput of `entries:get` and of entry writes with the audit log on,
against the same build with it switched off (in this benchmark only).

Two server processes run the real app over HTTP (uvicorn) on one data dir and one embedded
PostgreSQL: one audits as shipped, the other has its audit writer switched off after start-up.
Both use a fast stand-in embedder so that the model does not dominate the writes. The load comes
from this process: 16 concurrent HTTP clients, the two servers measured in turn, median of rounds.

Run: .venv/bin/python bench/audit.py [--requests N] [--rounds R]
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

UC = "/api/2.1/unity-catalog"
STORE = f"{UC}/memory-stores/main.default.audit_bench"
CONCURRENCY = 16


def serve(port: int, audit: bool) -> int:
    """A server like `catalog serve`, with the stand-in embedder and the audit switch."""
    import uvicorn

    from catalog.app import create_app
    from catalog.cli import _server_class
    from catalog.search.embedder import HashEncoder
    from catalog.settings import Settings

    settings = Settings.from_env(None, port=port)
    app = create_app(settings, encoder=HashEncoder())
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False, lifespan="on")
    server = _server_class()(config)

    async def announce() -> None:
        while not server.started:
            await asyncio.sleep(0.05)
        app.state.runtime.audit.enabled = audit
        print(f"listening on http://127.0.0.1:{port}", flush=True)

    async def run() -> None:
        announcer = asyncio.create_task(announce())
        await server.serve()
        announcer.cancel()

    asyncio.run(run())
    return 0


async def rate(client: httpx.AsyncClient, requests: list[tuple[str, str, dict, dict | None]]) -> float:  # type: ignore[type-arg]
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(method: str, url: str, params: dict, body: dict | None) -> None:  # type: ignore[type-arg]
        async with gate:
            r = await client.request(method, url, params=params, json=body)
            assert r.status_code == 200, r.text

    started = time.perf_counter()
    await asyncio.gather(*(one(*request) for request in requests))
    return len(requests) / (time.perf_counter() - started)


def writes(tag: str, n: int) -> list[tuple[str, str, dict, dict | None]]:  # type: ignore[type-arg]
    return [
        ("POST", f"{STORE}/entries", {"scope": f"u{i % 50}"}, {"path": f"/{tag}/{i}.md", "contents": f"note {i}"})
        for i in range(n)
    ]


def reads(tag: str, n: int) -> list[tuple[str, str, dict, dict | None]]:  # type: ignore[type-arg]
    return [("GET", f"{STORE}/entries:get", {"scope": f"u{i % 50}", "path": f"/{tag}/{i}.md"}, None) for i in range(n)]


async def measure(args: argparse.Namespace) -> None:
    audited = BenchServer(argv=[str(Path(__file__).resolve()), "--serve", "on"])
    plain = BenchServer(data_dir=audited.data_dir, argv=[str(Path(__file__).resolve()), "--serve", "off"])
    results: dict[tuple[str, bool], list[float]] = {}
    try:
        token = audited.token()
        clients = {
            enabled: httpx.AsyncClient(
                base_url=server.url,
                headers={"Authorization": f"Bearer {token}"},
                timeout=60,
                limits=httpx.Limits(max_connections=CONCURRENCY),
            )
            for enabled, server in ((True, audited), (False, plain))
        }
        r = await clients[True].post(
            f"{UC}/memory-stores", json={"name": "audit_bench", "catalog_name": "main", "schema_name": "default"}
        )
        r.raise_for_status()
        for enabled, client in clients.items():  # warm both: connections, caches, prepared statements
            await rate(client, writes(f"warm-{int(enabled)}", 200))
            await rate(client, reads(f"warm-{int(enabled)}", 200))
        for round_ in range(args.rounds):
            for enabled in (True, False) if round_ % 2 == 0 else (False, True):  # cancel drift
                tag = f"{round_}-{int(enabled)}"
                results.setdefault(("write", enabled), []).append(
                    await rate(clients[enabled], writes(tag, args.requests))
                )
                results.setdefault(("get", enabled), []).append(await rate(clients[enabled], reads(tag, args.requests)))
            print(
                f"round {round_ + 1}/{args.rounds}: "
                + ", ".join(f"{op} {'on' if on else 'off'} {rates[-1]:.0f}/s" for (op, on), rates in results.items()),
                file=sys.stderr,
                flush=True,
            )
        for client in clients.values():
            await client.aclose()
    finally:
        plain.stop()
        audited.stop()
    print(
        f"audit cost: {args.requests} requests per measurement, {CONCURRENCY} concurrent HTTP clients, "
        f"two server processes on one embedded PostgreSQL, median of {args.rounds} rounds\n"
    )
    print("| operation | audited (req/s) | not audited (req/s) | cost |")
    print("|---|---|---|---|")
    for op in ("get", "write"):
        on, off = statistics.median(results[(op, True)]), statistics.median(results[(op, False)])
        label = "entries:get" if op == "get" else "entries write"
        print(f"| {label} | {on:.0f} | {off:.0f} | {(1 - on / off) * 100:.1f}% |")


def main() -> int:
    parser = argparse.ArgumentParser(description="audit cost")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--serve", choices=("on", "off"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.port, args.serve == "on")
    asyncio.run(measure(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
