"""A write's cost by its rate: what one write costs the server and PostgreSQL in CPU when writes
come at a steady rate, and when they come as fast as several connections send them.

`catalog serve` of the checkout (the real model) on a fresh data dir, one store; for each rate R
of `--rates`, one client writes a short entry every 1/R s for `--seconds` (each write awaited
before the next is due), then `--connections` connections write back to back for as long. Each
case ends when every entry written is embedded and a search of the store has been answered (a
search waits for the full-text index to hold every earlier write), so what each write causes in
the background is counted with it. The server's CPU (every process of it) and PostgreSQL's
(postmaster and backends) are read around each case, less what the idle server used over as
long just before, and divided by the writes; `commits` is how many commits the server made to
its full-text index per write (`catalog_index_commits_total`; "-" for a checkout without it).

With --repo DIR, the server is another checkout's (a git worktree of an earlier commit): the same
figures before a change, with this tree's benchmark.

Run: .venv/bin/python bench/write_rate.py [--rates 2,10,50] [--seconds 10] [--connections 8]
     [--repo DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.live import BenchServer
from bench.load import cpu_of_postgres, cpu_of_server, load_average

UC = "/api/2.1/unity-catalog"
STORE = "main.default.writes"
IDLE = 3.0  # seconds the idle server is measured before each case
COMMITS = re.compile(r"^catalog_index_commits_total(?:\{[^}]*\})? ([0-9.e+]+)$", re.MULTILINE)


async def commits(client: httpx.AsyncClient) -> float | None:
    """The server's index commits so far (summed over its processes' series), None without the metric."""
    r = await client.get("/metrics")
    found = COMMITS.findall(r.text) if r.status_code == 200 else []
    return sum(float(v) for v in found) if found else None


class Writer:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.written = 0

    async def write(self) -> None:
        n = self.written
        self.written += 1
        r = await self.client.post(
            f"{UC}/memory-stores/{STORE}/entries",
            json={
                "scope": f"u{n % 5}",
                "path": f"/notes/{n}.md",
                "contents": f"the user prefers tea, note {n}",
            },
        )
        r.raise_for_status()


async def settled(client: httpx.AsyncClient, conn: asyncpg.Connection) -> None:
    """Every entry embedded, and the full-text index holding every write (a search waits for it)."""
    while await conn.fetchval(  # noqa: ASYNC110 (the server's embedding worker's progress)
        "SELECT EXISTS (SELECT 1 FROM entries WHERE embedded_version IS DISTINCT FROM version)"
    ):
        await asyncio.sleep(0.05)
    r = await client.post(
        f"{UC}/memory-stores/{STORE}/entries:search", json={"scope": "u0", "query": "tea", "mode": "keyword"}
    )
    r.raise_for_status()


async def case(
    server: BenchServer,
    client: httpx.AsyncClient,
    conn: asyncpg.Connection,
    writer: Writer,
    label: str,
    run: Callable[[], Awaitable[None]],
) -> str:
    pgdata = server.data_dir / "postgres"
    idle_server, idle_pg = cpu_of_server(server.process.pid), cpu_of_postgres(pgdata)
    await asyncio.sleep(IDLE)
    idle_rate = (cpu_of_server(server.process.pid) - idle_server) / IDLE
    idle_pg_rate = (cpu_of_postgres(pgdata) - idle_pg) / IDLE
    before_commits = await commits(client)
    served, postgres, first = cpu_of_server(server.process.pid), cpu_of_postgres(pgdata), writer.written
    started = time.perf_counter()
    await run()
    answered = time.perf_counter() - started
    await settled(client, conn)
    took = time.perf_counter() - started
    served = cpu_of_server(server.process.pid) - served - idle_rate * took
    postgres = cpu_of_postgres(pgdata) - postgres - idle_pg_rate * took
    after_commits = await commits(client)
    n = writer.written - first
    per_commit = (
        "-"
        if before_commits is None or after_commits is None
        else f"{(after_commits - before_commits) / n:.2f}"
    )
    return (
        f"| {label} | {n} | {n / answered:.0f} | {served / n * 1000:.2f} | {postgres / n * 1000:.2f} "
        f"| {(served + postgres) / n * 1000:.2f} | {per_commit} |"
    )


async def main(rates: list[float], seconds: float, connections: int, repo: Path | None) -> None:
    server = BenchServer(repo=repo)  # a data dir of its own, removed when it stops
    try:
        token = server.token()
        conn = await asyncpg.connect(server.db_url())
        limits = httpx.Limits(max_connections=connections)
        async with httpx.AsyncClient(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60, limits=limits
        ) as client:
            body = {"name": "writes", "catalog_name": "main", "schema_name": "default"}
            (await client.post(f"{UC}/memory-stores", json=body)).raise_for_status()
            writer = Writer(client)
            for _ in range(50):  # warm-up: the model, the statements, the index
                await writer.write()
            await settled(client, conn)
            print(f"load average {load_average()} at the start\n")
            print(
                "| writes | written | writes/s | server CPU ms / write | PostgreSQL CPU ms / write "
                "| together | index commits / write |"
            )
            print("|---|---:|---:|---:|---:|---:|---:|")
            for rate in rates:

                async def paced(rate: float = rate) -> None:
                    start = time.perf_counter()
                    for i in range(round(rate * seconds)):
                        due = start + i / rate
                        if (wait := due - time.perf_counter()) > 0:
                            await asyncio.sleep(wait)
                        await writer.write()

                print(await case(server, client, conn, writer, f"{rate:g} a second, one client", paced))

            async def flat_out() -> None:
                deadline = time.perf_counter() + seconds

                async def one() -> None:
                    while time.perf_counter() < deadline:
                        await writer.write()

                await asyncio.gather(*(one() for _ in range(connections)))

            print(
                await case(server, client, conn, writer, f"back to back, {connections} connections", flat_out)
            )
        await conn.close()
    finally:
        server.stop()
    print(f"\nload average {load_average()} at the end")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="a write's cost by its rate")
    parser.add_argument("--rates", default="2,10,50", help="writes a second of the paced cases")
    parser.add_argument("--seconds", type=float, default=10.0, help="seconds of each case")
    parser.add_argument("--connections", type=int, default=8, help="connections of the back-to-back case")
    parser.add_argument("--repo", type=Path, help="another checkout's server (a before/after)")
    args = parser.parse_args()
    asyncio.run(main([float(r) for r in args.rates.split(",")], args.seconds, args.connections, args.repo))
