"""What a write costs until it is searchable: the CPU of each part of an ingest, per entry.

The LoCoMo development conversations are written the way `bench/peer.py` writes them (each
session in order, one turn a request, the sessions side by side on `--writers` writers), on a
fresh server whose PostgreSQL loads `pg_stat_statements`; then the benchmark waits until every
vector is stored. Printed, per entry written:

- the CPU of the server's process (every worker) and of PostgreSQL, over the whole ingest;
- PostgreSQL's time by statement (`pg_stat_statements`), the largest first; a statement run by
  a trigger or a function is counted on its own row and in the statement that ran it.

With --rate R, the turns are written by one client at R a second instead (the first `--count`
of them, in their sessions' order): what a write costs where writes come one at a time, each
its own embedding pass and its own share of the full-text index's commits. With --repo DIR, the
server is another checkout's (a git worktree of an earlier commit), for a before/after.

With --searches MODE, then: every question of the conversations searched once in that mode
(top 10, in its conversation's scope, one after the other), and PostgreSQL's time by statement
per search (what a search's statements cost PostgreSQL on this store).

With --vectors, instead: what storing one vector costs, and whether keeping vectors in a table of
their own would make it cheaper. On a copy of the entries table (every index of it) holding
`--rows` rows, each row's vector is set one statement at a time, as the embedding worker does;
then the same on a copy without the whole table's HNSW index (what a write pays for that index);
then the same vectors are inserted into a table of only (id, vector) with an HNSW index: the time
of each, per vector.

Run: .venv/bin/python bench/ingest_cost.py [FILE.json ...] [--writers 8] [--searches hybrid]
     .venv/bin/python bench/ingest_cost.py --rate 20 [--count 200] [--repo DIR]
     .venv/bin/python bench/ingest_cost.py --vectors [--rows 1500]
(default files: ../shared/bench/locomo/*.json when present)
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import asyncpg
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.live import REPO, BenchServer
from bench.load import cpu_of_postgres, cpu_of_server, load_average
from bench.locomo import STORE, UC, load

STATEMENTS = 15  # rows of the statements' table


def with_statement_stats(data_dir: Path, repo: Path | None = None) -> None:
    """Start the data dir's server once (its PostgreSQL is made), then have PostgreSQL load
    `pg_stat_statements` at its next start."""
    BenchServer(data_dir, repo=repo).stop()
    conf = next(data_dir.rglob("postgresql.conf"))
    with conf.open("a") as f:
        f.write("\nshared_preload_libraries = 'pg_stat_statements'\npg_stat_statements.track = 'all'\n")


async def statement_times(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    """`pg_stat_statements`' rows since its last reset, the largest total time first."""
    return await conn.fetch(
        "SELECT calls, total_exec_time + total_plan_time AS ms, query, toplevel "
        "FROM pg_stat_statements "
        "WHERE query NOT LIKE '%pg_stat_statements%' ORDER BY ms DESC"
    )


def print_statements(rows: list[asyncpg.Record], count: int, unit: str) -> None:
    """The statements' table, per `unit` (of which there were `count`)."""
    total = sum(r["ms"] for r in rows if r["toplevel"]) or 1.0
    print(f"\nPostgreSQL's time by statement (top level {total / count:.3f} ms per {unit}):\n")
    print(f"| statement | calls per {unit} | ms per {unit} | share of top level |")
    print("|---|---:|---:|---:|")
    for r in rows[:STATEMENTS]:
        text = re.sub(r"\s+", " ", r["query"])[:90].replace("|", "/")
        share = f"{r['ms'] / total:.0%}" if r["toplevel"] else "run by another statement"
        print(f"| `{text}` | {r['calls'] / count:.2f} | {r['ms'] / count:.3f} | {share} |")


async def run(
    given: list[str],
    writers: int,
    searches: str | None = None,
    rate: float | None = None,
    limit: int = 200,
    repo: Path | None = None,
) -> None:
    files = [Path(f) for f in given] or sorted((REPO.parent / "shared/bench/locomo").glob("*.json"))
    if not files:
        print("ingest_cost: no files given and ../shared/bench/locomo/ is not here; pass LoCoMo JSON paths")
        return
    datasets = [load(f) for f in files]
    sessions: dict[tuple[str, str], list[dict]] = {}
    for scope, entries, _ in datasets:
        for entry in entries:
            sessions.setdefault((scope, entry.get("session_id", "")), []).append(entry)
    if rate is not None:  # one client: the first `limit` turns, in their sessions' order
        turns = [(key, entry) for key, entries in sessions.items() for entry in entries][:limit]
        sessions = {}
        for key, entry in turns:
            sessions.setdefault(key, []).append(entry)
        writers = 1
    count = sum(len(e) for e in sessions.values())
    data_dir = Path(tempfile.mkdtemp(prefix="catingest"))
    with_statement_stats(data_dir, repo)
    server = BenchServer(data_dir, repo=repo)
    try:
        token = server.token()
        conn = await asyncpg.connect(server.db_url())
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        async with httpx.AsyncClient(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=120
        ) as client:
            body = {"name": "locomo", "catalog_name": "main", "schema_name": "default"}
            (await client.post(f"{UC}/memory-stores", json=body)).raise_for_status()
            queue = list(sessions.items())

            async def writer() -> None:
                due = time.perf_counter()
                while queue:
                    (scope, _), entries = queue.pop(0)
                    for entry in entries:
                        if rate is not None:  # paced: the next write at its time
                            due += 1 / rate
                            await asyncio.sleep(max(0.0, due - time.perf_counter()))
                        r = await client.post(
                            f"{UC}/memory-stores/{STORE}/entries",
                            params={"scope": scope},
                            json={**entry, "write_mode": "OVERWRITE"},
                        )
                        r.raise_for_status()

            how = f"one client at {rate:g} a second" if rate is not None else f"{writers} writers"
            print(f"{count} entries, {how}; load average {load_average()} at the start\n")
            await conn.execute("SELECT pg_stat_statements_reset()")
            pgdata = server.data_dir / "postgres"
            served, postgres = cpu_of_server(server.process.pid), cpu_of_postgres(pgdata)
            started = time.perf_counter()
            await asyncio.gather(*(writer() for _ in range(writers)))
            answered = time.perf_counter() - started
            while await conn.fetchval(  # noqa: ASYNC110 (the server's embedding worker's progress)
                "SELECT EXISTS (SELECT 1 FROM entries WHERE embedded_version IS DISTINCT FROM version)"
            ):
                await asyncio.sleep(0.05)
            stored = time.perf_counter() - started
            served, postgres = cpu_of_server(server.process.pid) - served, cpu_of_postgres(pgdata) - postgres
            rows = await statement_times(conn)
            asked: list[asyncpg.Record] = []
            questions = [(scope, q["query"]) for scope, _, qs in datasets for q in qs]
            if searches is not None and questions:
                await conn.execute("SELECT pg_stat_statements_reset()")
                for scope, query in questions:
                    asking = {"scope": scope, "query": query, "mode": searches, "top_k": 10}
                    r = await client.post(f"{UC}/memory-stores/{STORE}/entries:search", json=asking)
                    r.raise_for_status()
                asked = await statement_times(conn)
        await conn.close()
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)  # its PostgreSQL's files: some 100 MB
    per = 1000 / count
    print("| figure | per entry |")
    print("|---|---:|")
    print(f"| written (answered) | {count / answered:.0f} entries/s |")
    print(f"| every vector stored | {count / stored:.0f} entries/s |")
    print(f"| server CPU (model included) | {served * per:.2f} ms |")
    print(f"| PostgreSQL CPU | {postgres * per:.2f} ms |")
    print_statements(rows, count, "entry")
    if asked:
        print(f"\n{len(questions)} searches in {searches} mode, one after the other:")
        print_statements(asked, len(questions), "search")
    print(f"\nload average {load_average()} at the end")


async def vectors(rows: int) -> None:
    import numpy as np

    server = BenchServer()
    try:
        conn = await asyncpg.connect(server.db_url())
        await conn.execute("CREATE TABLE entries_copy (LIKE entries INCLUDING ALL)")
        indexes = await conn.fetchval("SELECT count(*) FROM pg_indexes WHERE tablename = 'entries_copy'")
        # the same rows without the whole table's HNSW index (what a write pays for it)
        await conn.execute("CREATE TABLE entries_unindexed (LIKE entries INCLUDING ALL)")
        unindexed = await conn.fetchval(
            "SELECT indexname FROM pg_indexes "
            "WHERE tablename = 'entries_unindexed' AND indexdef LIKE '%USING hnsw%'"
        )
        await conn.execute(f'DROP INDEX "{unindexed}"')
        await conn.execute("CREATE TABLE vectors_only (id uuid PRIMARY KEY, embedding vector(384))")
        await conn.execute("CREATE INDEX ON vectors_only USING hnsw (embedding vector_cosine_ops)")
        store = await conn.fetchval("SELECT gen_random_uuid()")
        texts = [f"Caroline: turn {i} about tea, hiking and a charity race" for i in range(rows)]
        for table in ("entries_copy", "entries_unindexed"):
            await conn.executemany(
                f"INSERT INTO {table} (store_id, scope, session_id, path, contents, description, "
                "created_by, updated_by) VALUES ($1, 'u', 's', $2, $3, 'd', 'a', 'a')",
                [(store, f"/p/{i}", text) for i, text in enumerate(texts)],
            )
        ids = [r[0] for r in await conn.fetch("SELECT id FROM entries_copy ORDER BY path")]
        # the other copy's rows have ids of their own: each vector goes to the row of its path
        unindexed_ids = [r[0] for r in await conn.fetch("SELECT id FROM entries_unindexed ORDER BY path")]
        # the real model's vectors of the texts (the shape of real data: HNSW's cost depends on it)
        from catalog.runtime import load_encoder
        from catalog.settings import Settings

        made = load_encoder(Settings()).encode(texts)
        literals = ["[" + ",".join(f"{x:.6f}" for x in v) + "]" for v in np.asarray(made)]
        timed = {}
        for name, sql, keys in (
            (
                "set the vector of an entries row (the table's every index)",
                "UPDATE entries_copy SET embedding = $2::vector WHERE id = $1",
                ids,
            ),
            (
                "the same, the table without its HNSW index",
                "UPDATE entries_unindexed SET embedding = $2::vector WHERE id = $1",
                unindexed_ids,
            ),
            (
                "insert it into a table of only (id, vector)",
                "INSERT INTO vectors_only (id, embedding) VALUES ($1, $2::vector)",
                ids,
            ),
        ):
            started = time.perf_counter()
            for entry_id, literal in zip(keys, literals, strict=True):
                await conn.execute(sql, entry_id, literal)
            timed[name] = (time.perf_counter() - started) * 1000 / rows
        await conn.close()
    finally:
        server.stop()
    print(f"{rows} vectors, one statement each; the entries table has {indexes} indexes\n")
    print("| storing one vector | ms (wall, one client) |")
    print("|---|---:|")
    for name, ms in timed.items():
        print(f"| {name} | {ms:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description="what a write costs until it is searchable")
    parser.add_argument("files", nargs="*", help="LoCoMo JSON files")
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument(
        "--searches",
        choices=("hybrid", "keyword", "semantic"),
        help="then search every question once in this mode: PostgreSQL's time by statement per search",
    )
    parser.add_argument(
        "--vectors", action="store_true", help="a vector in the row, without the HNSW index, in a table apart"
    )
    parser.add_argument("--rows", type=int, default=1500, help="with --vectors: rows of the tables")
    parser.add_argument("--rate", type=float, help="one client writing this many turns a second")
    parser.add_argument("--count", type=int, default=200, help="with --rate: how many turns")
    parser.add_argument("--repo", type=Path, help="another checkout's server (a before/after)")
    args = parser.parse_args()
    if args.vectors:
        asyncio.run(vectors(args.rows))
        return
    asyncio.run(run(args.files, args.writers, args.searches, args.rate, args.count, args.repo))


if __name__ == "__main__":
    main()
