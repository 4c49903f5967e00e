"""What keeping entry history costs on writes: the same writes with the history triggers on and
off (the triggers disabled in PostgreSQL for the "off" rounds), alternating, median of rounds.

A `catalog serve` on a fresh data dir (embedded PostgreSQL), one store; each round: `--writes`
sequential writes over HTTP (one client) and the same from 8 concurrent clients, half of them new
entries and half overwrites of one of 50 paths (so pruning every tenth version runs too).

Then the same at the statement level, where load on the machine blurs less: the server's own
overwrite statement (`catalog.entries.repo.upsert_overwrite`), run `--statements` times in a row
on one connection (half new paths, half overwrites of 50 hot paths), triggers on and off in
alternating rounds, median per write, on the same database with the server stopped. The HTTP
figure includes the server's background work (indexing, embedding) competing for the same
cores; the statement figure is what the triggers add to the writing transaction itself.

Run: .venv/bin/python bench/history.py [--writes 400] [--rounds 3] [--statements 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

import asyncpg
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.live import BenchServer
from catalog.db import EmbeddedPostgres
from catalog.runtime import EMBEDDED_DATABASE, ensure_database
from catalog.settings import Settings

UC = "/api/2.1/unity-catalog"
STORE = f"{UC}/memory-stores/main.default.history-bench"
TRIGGERS = ("entries_history_insert", "entries_history_update", "entries_history_delete")


async def writes(http: httpx.AsyncClient, n: int, clients: int) -> float:
    async def one(c: int) -> None:
        for i in range(n // clients):
            path = f"/new/{uuid.uuid4().hex}.md" if i % 2 else f"/hot/{(c * 7 + i) % 50}.md"
            r = await http.post(
                f"{STORE}/entries",
                params={"scope": f"user-{c}"},
                json={"path": path, "contents": f"fact {i} " * 20, "write_mode": "OVERWRITE"},
            )
            r.raise_for_status()

    began = time.perf_counter()
    await asyncio.gather(*(one(c) for c in range(clients)))
    return (n // clients) * clients / (time.perf_counter() - began)


async def switch(db: str, on: bool) -> None:
    conn = await asyncpg.connect(db)
    try:
        for trigger in TRIGGERS:
            await conn.execute(f"ALTER TABLE entries {'ENABLE' if on else 'DISABLE'} TRIGGER {trigger}")
    finally:
        await conn.close()


async def statements(db: str, n: int, rounds: int) -> None:
    """Microseconds per overwrite statement, history triggers on vs off (median of rounds)."""
    from catalog.entries import repo

    conn = await asyncpg.connect(db)
    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    try:
        store_id = str(await conn.fetchval("SELECT id FROM memory_stores WHERE name = 'history-bench'"))

        async def burst() -> float:
            began = time.perf_counter()
            for i in range(n):
                path = f"/stmt/{uuid.uuid4().hex}.md" if i % 2 else f"/stmt-hot/{i % 50}.md"
                fields = repo.Fields(contents=f"fact {i} " * 20, description=None, source_type=None)
                async with conn.transaction():
                    await repo.upsert_overwrite(conn, repo.Key(store_id, "bench", "", path), fields, "admin")
            return (time.perf_counter() - began) / n * 1e6

        await burst()  # warm-up
        cost: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(rounds):
            for enabled in (True, False):
                await switch(db, enabled)
                cost[enabled].append(await burst())
        await switch(db, True)
    finally:
        await conn.close()
    on, off = statistics.median(cost[True]), statistics.median(cost[False])
    print()
    print("| one overwrite statement (its own transaction) | history on | history off | cost |")
    print("|---|---|---|---|")
    added = f"+{on - off:.0f} µs ({100 * (on - off) / off:.1f}%)"
    print(f"| median of {rounds} rounds of {n} | {on:.0f} µs | {off:.0f} µs | {added} |")


async def run(server: BenchServer, n: int, rounds: int) -> None:
    db = server.db_url()
    headers = {"Authorization": f"Bearer {server.token()}"}
    async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=60) as http:
        r = await http.post(
            f"{UC}/memory-stores",
            json={"name": "history-bench", "catalog_name": "main", "schema_name": "default"},
        )
        r.raise_for_status()
        await writes(http, 100, 4)  # warm-up
        rates: dict[tuple[bool, int], list[float]] = {}
        for _ in range(rounds):
            for enabled in (True, False):
                await switch(db, enabled)
                for clients in (1, 8):
                    rates.setdefault((enabled, clients), []).append(await writes(http, n, clients))
        await switch(db, True)
    print("| writers | history on | history off | cost |")
    print("|---|---|---|---|")
    for clients in (1, 8):
        on, off = statistics.median(rates[(True, clients)]), statistics.median(rates[(False, clients)])
        print(f"| {clients} | {on:.0f} writes/s | {off:.0f} writes/s | {100 * (off - on) / off:.1f}% |")


async def statements_alone(data_dir: Path, n: int, rounds: int) -> None:
    """The statement rounds on the same database with the server stopped: no background work
    (indexing, embedding) competes with the statements for the cores."""
    postgres = EmbeddedPostgres(Settings(data_dir=data_dir).postgres_dir)
    url = await ensure_database(await asyncio.to_thread(postgres.start), EMBEDDED_DATABASE)
    try:
        await statements(url, n, rounds)
    finally:
        await asyncio.to_thread(postgres.stop)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--writes", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--statements", type=int, default=2000, help="0: skip the statement-level rounds")
    args = parser.parse_args()
    server = BenchServer()
    try:
        asyncio.run(run(server, args.writes, args.rounds))
    finally:
        server.stop(keep=True)  # its embedded PostgreSQL's files serve the statement-level rounds
    try:
        if args.statements:
            asyncio.run(statements_alone(server.data_dir, args.statements, max(args.rounds, 3)))
    finally:
        server.remove()


if __name__ == "__main__":
    main()
