"""How a scope's vectors are stored, and what the exact scan of a hybrid search pays for it.

    .venv/bin/python bench/locomo.py --data-dir D FILE.json ...     # once: a store of conversations
    .venv/bin/python bench/vector_storage.py --data-dir D [--queries 200] [--rounds 6]

In a scope small enough for an exact scan (every scope of LoCoMo and BEAM), the vector leg reads
each row of the scope and computes its cosine (`catalog.search.repo.VectorSearch`). On a copy of
D (D itself is left as it is), the server's own vector search is timed over three tables of the
same rows:

- `entries as written`: the table as the server wrote it (each row inserted, then updated with
  its vector by the embedding worker: the old versions are dead until vacuumed);
- `rewritten, vector`: the same rows copied into a fresh table (vectors kept in the row, as
  migration 0041 keeps them), with the index the scan reads, vacuumed;
- `rewritten, halfvec`: the same, the vectors stored as pgvector's `halfvec` (two bytes a
  dimension instead of four).

Each round searches the stored vectors of `--queries` random entries, each in its own scope (top
33, as a hybrid search asks), one statement at a time; printed: the median time of a search per
round (the statement's round trip included), the tables' sizes, and the buffers one scan of the
largest scope reads (EXPLAIN); then the same after a `VACUUM` of the table as written (which
removes its dead versions, but moves no row). All three are read through an index of the scope
(sequential scans are switched off in the copy's database: the planner would read the small
fresh copies whole).
The halfvec copy's cosines differ from the vector's by the half precision's rounding: its top 33
are compared with the vector copy's (share of the same ids).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg

from bench.live import BenchServer
from catalog.db import create_pool
from catalog.search.corpus import ENTRIES, Corpus
from catalog.search.repo import VectorSearch

TOP = 33  # what a hybrid search of top 10 asks of the vector leg (MIN_CANDIDATES 30 and more)
TABLES = {
    "entries as written": "entries",
    "rewritten, vector": "bench_vectors_plain",
    "rewritten, halfvec": "bench_vectors_half",
}


async def copies(conn: asyncpg.Connection) -> None:
    """The two rewritten tables: entries' rows in their physical order, vectors in the row."""
    for table, column in (("bench_vectors_plain", None), ("bench_vectors_half", "halfvec(384)")):
        await conn.execute(f"DROP TABLE IF EXISTS {table}")
        await conn.execute(f"CREATE TABLE {table} AS SELECT * FROM entries WITH NO DATA")
        if column is not None:
            await conn.execute(f"ALTER TABLE {table} ALTER COLUMN embedding TYPE {column}")
        await conn.execute(f"ALTER TABLE {table} ALTER COLUMN embedding SET STORAGE PLAIN")
        await conn.execute(f"INSERT INTO {table} SELECT * FROM entries")
        # an index that finds a scope's rows, as entries' `entries_scope_path` (migration 0004)
        await conn.execute(f"CREATE INDEX ON {table} (store_id, scope, path text_pattern_ops)")
        await conn.execute(f"VACUUM ANALYZE {table}")


def corpus_of(table: str) -> Corpus:
    return Corpus(
        table, table, ENTRIES.changes, ENTRIES.key, "", ENTRIES.hnsw_index, ENTRIES.metadata, ENTRIES.state
    )


async def run(url: str, queries: int, rounds: int) -> None:
    admin = await asyncpg.connect(url)
    await copies(admin)
    # the copies are small and fresh: the planner would read them whole rather than
    # through the scope's index, which the table as written is read by; all three by it
    await admin.execute("SET enable_seqscan = off")
    database = await admin.fetchval("SELECT quote_ident(current_database())")
    await admin.execute(f"ALTER DATABASE {database} SET enable_seqscan = off")
    pool = await create_pool(url, min_size=1, max_size=2)
    rows = await pool.fetch(
        "SELECT store_id::text, scope, embedding FROM entries "
        "WHERE embedding IS NOT NULL AND state = 'active' ORDER BY random() LIMIT $1",
        queries,
    )
    asked = [(row[0], row[1], row[2].to_numpy()) for row in rows]
    searches = {name: VectorSearch(pool, corpus_of(table)) for name, table in TABLES.items()}
    largest = await admin.fetchrow(
        "SELECT store_id, scope FROM entries GROUP BY 1, 2 ORDER BY count(*) DESC LIMIT 1"
    )
    print(f"{len(asked)} searches a round, each in its entry's scope, top {TOP}; {rounds} rounds")
    found: dict[str, list[list[str]]] = {}
    for phase in ("as the server left them", "after `VACUUM entries`"):
        if phase.startswith("after"):
            await admin.execute("VACUUM entries")
        times: dict[str, list[float]] = {name: [] for name in TABLES}
        for _ in range(rounds):
            for name, search in searches.items():
                took, found[name] = [], []
                for store_id, scope, vector in asked:
                    started = time.perf_counter()
                    hits, _ = await search.search(store_id, [scope], vector, TOP)
                    took.append((time.perf_counter() - started) * 1000)
                    found[name].append([doc for doc, _ in hits])
                times[name].append(statistics.median(took))
        print(f"\n{phase}:\n")
        print("| table | median ms a search, by round | size | buffers, largest scope's scan |")
        print("|---|---|---:|---:|")
        for name, table in TABLES.items():
            size = await admin.fetchval(f"SELECT pg_size_pretty(pg_table_size('{table}'))")
            plan = json.loads(
                await admin.fetchval(
                    "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT embedding <=> embedding "
                    f"FROM {table} WHERE store_id = $1 AND scope = $2",
                    largest["store_id"],
                    largest["scope"],
                )
            )[0]["Plan"]
            buffers = plan.get("Shared Hit Blocks", 0) + plan.get("Shared Read Blocks", 0)
            rounds_ms = " ".join(f"{ms:.3f}" for ms in times[name])
            print(f"| {name} | {rounds_ms} | {size} | {buffers} |")
    same = [
        len(set(half) & set(plain)) / max(len(plain), 1)
        for half, plain in zip(found["rewritten, halfvec"], found["rewritten, vector"], strict=True)
    ]
    print(f"\nhalfvec's top {TOP} against the vector copy's: {statistics.mean(same):.3f} the same ids")
    await pool.close()
    await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, required=True, help="a store made by bench/locomo.py")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vecstore") as scratch:
        copy = Path(scratch) / "data"
        # `cp -a`: PostgreSQL's files keep their owner (the embedded server's user when run as root)
        subprocess.run(["cp", "-a", str(args.data_dir), str(copy)], check=True)
        server = BenchServer(copy)
        try:
            asyncio.run(run(server.db_url(), args.queries, args.rounds))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
