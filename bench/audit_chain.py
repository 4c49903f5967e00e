"""The audit chain's ceiling: how many audit events per second one PostgreSQL appends to the one
global hash chain, against what the same PostgreSQL writes of the same rows with no chain.

Every audited request appends its event through `audit_append()` (migrations 0009, 0042), which takes the
chain's advisory lock, reads the head, numbers and hashes the events and inserts them; the lock is
held until the transaction ends. A change's event is appended in the change's transaction, in
one message with its COMMIT (with synchronous_commit off, then a synchronous flush marker), so
the lock is let go before the WAL flush; the events of requests that change nothing (reads) are
gathered by each process's writer into one call (a batch), one statement with its values bound,
committed on its own and synchronously while the lock is free (held through the flush; the
statement needs no transaction of its own), sent as a change's event is while others hold it
(`catalog.recorder.writer`). This benchmark drives those
statements directly, from C connections (as C server processes or nodes would), in batches of
B events, for each way of committing:

- `change's event, as shipped`: BEGIN, then append + COMMIT with synchronous_commit off and the
  flush marker in one message (the lock is held while PostgreSQL works, not while the disk
  flushes);
- `reads' batch, as shipped`: the one bound statement, committed synchronously, asking for the
  lock without waiting; when it is held, the batch (and those of the next `CONTENDED_SECONDS`
  on that connection) as a change's message, the lock let go before the flush (`AuditWriter`);
- `reads' batch, one statement always` and `..., a change's message always`: each way alone;
- `change's event, lock held to the flush`: BEGIN, then append + COMMIT with synchronous_commit
  on (where a database refuses the flush marker);
- `no chain`: the same rows inserted into a copy of the table with no lock and no hashing,
  committed synchronously: what the database would take of these rows without a chain.

The lock's hold time, on one connection (an upper bound: it includes the round trip): for a
change's event, the time of one append + COMMIT message with synchronous_commit off; for a
reads' batch, its statement's, flush included. `audit verify` is run at the end, over
every event appended, and must pass.

Run: .venv/bin/python bench/audit_chain.py [--seconds S] [--concurrency 1,8,32] [--batch 1,16]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg

from bench.live import REPO, BenchServer
from catalog.db import create_pool
from catalog.recorder import repo
from catalog.recorder.chain import canonical_parts, plain_body
from catalog.recorder.writer import Contention, _append_batch


def event(n: int) -> dict[str, object]:
    """An event like an entries.write request's."""
    return {
        "event_id": str(uuid.uuid4()),
        "event_time": datetime.now(UTC),
        "request_id": str(uuid.uuid4()),
        "principal": f"app-{n % 7}",
        "on_behalf_of": f"user-{n % 100}",
        "source_ip": "10.0.0.7",
        "user_agent": "bench/1",
        "service_name": "memory-catalog",
        "action_name": "entries.write",
        "securable_type": "memory_store",
        "securable_full_name": "main.default.bench",
        "securable_id": "6b1d1f34-1111-4c3e-9d7e-2a1b7c9e0f00",
        "privilege": "WRITE_MEMORY_STORE",
        "decision": "allow",
        "reason": None,
        "status_code": 200,
        "error_code": None,
        "request_params": {"scope": "p:0123456789abcdef", "path": "/memories/x.md", "mode": "OVERWRITE"},
        "result_count": 1,
        "policy_revision": 3,
    }


CHANGES = "change's event, as shipped"
READS = "reads' batch, as shipped (the lock asked for first)"
READS_HELD = "reads' batch, one statement always (lock held to the flush)"
READS_EARLY = "reads' batch, a change's message always (lock let go before the flush)"
HELD = "change's event, lock held to the flush"
NO_CHAIN = "no chain"


def batch(size: int) -> tuple[list[dict[str, object]], list[bytes], list[bytes]]:
    rows = [plain_body(event(n)) for n in range(size)]
    parts = [canonical_parts(row) for row in rows]
    return rows, [head for head, _ in parts], [tail for _, tail in parts]


async def chain_append(conn: asyncpg.Connection, size: int, early_unlock: bool) -> None:
    rows, heads, tails = batch(size)
    await repo.begin(conn)
    await repo.append(conn, rows, heads, tails, commit=True, early_unlock=early_unlock)


async def reads_append(conn: asyncpg.Connection, size: int, mode: str, contention: Contention) -> None:
    """As the audit writer appends a batch of reads' events (`AuditWriter`, `READS`): one
    statement while the chain's lock is free, a change's message for a while after finding it
    held; or always one of the two."""
    rows, heads, tails = batch(size)
    if mode == READS:
        await _append_batch(conn, rows, heads, tails, None, contention)
    elif mode == READS_EARLY:
        await repo.append_early(conn, rows, heads, tails, None)
    else:
        await repo.append(conn, rows, heads, tails)


async def plain_insert(conn: asyncpg.Connection, size: int) -> None:
    rows, _, _ = batch(size)
    await conn.execute(
        "INSERT INTO bench_audit_plain SELECT * FROM jsonb_populate_recordset(NULL::bench_audit_plain, $1)",
        rows,
    )


async def run(pool: asyncpg.Pool, mode: str, concurrency: int, size: int, seconds: float) -> float:
    """Events per second, on `concurrency` connections of the server's kind of pool (its codecs
    and session settings: `catalog.db.create_pool`)."""
    conns = [await pool.acquire() for _ in range(concurrency)]
    done = 0
    deadline = time.monotonic() + seconds

    async def worker(conn: asyncpg.Connection) -> None:
        nonlocal done
        contention = Contention()  # each connection as one process's writer
        while time.monotonic() < deadline:
            if mode == NO_CHAIN:
                await plain_insert(conn, size)
            elif mode in (READS, READS_HELD, READS_EARLY):
                await reads_append(conn, size, mode, contention)
            else:
                await chain_append(conn, size, early_unlock=mode == CHANGES)
            done += size

    start = time.monotonic()
    await asyncio.gather(*(worker(c) for c in conns))
    elapsed = time.monotonic() - start
    for conn in conns:
        await pool.release(conn)
    return done / elapsed


async def hold_time(pool: asyncpg.Pool, size: int, n: int = 300) -> tuple[float, float]:
    """Milliseconds the lock is held by an append of `size` events (median of n): a change's
    (one append + COMMIT message with synchronous_commit off) and a reads' batch's (its
    statement, committed synchronously)."""
    conn = await pool.acquire()
    changes, reads = [], []
    for _ in range(n):
        rows, heads, tails = batch(size)
        sql = "SET LOCAL synchronous_commit = off; " + repo.append_statement(rows, heads, tails) + "COMMIT"
        await conn.execute("BEGIN")
        start = time.perf_counter()
        await conn.execute(sql)
        changes.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        await reads_append(conn, size, READS_HELD, Contention())
        reads.append((time.perf_counter() - start) * 1000)
    await pool.release(conn)
    return statistics.median(changes), statistics.median(reads)


async def main(args: argparse.Namespace) -> None:
    server = BenchServer()
    try:
        url = server.db_url()
        admin = await asyncpg.connect(url)
        await admin.execute("DROP TABLE IF EXISTS bench_audit_plain")
        await admin.execute(
            "CREATE TABLE bench_audit_plain AS SELECT event_id, event_time, request_id, principal, "
            "on_behalf_of, source_ip, user_agent, service_name, action_name, securable_type, "
            "securable_full_name, securable_id, privilege, decision, reason, status_code, error_code, "
            "request_params, result_count, policy_revision FROM audit_events WITH NO DATA"
        )
        concurrency = [int(c) for c in args.concurrency.split(",")]
        sizes = [int(b) for b in args.batch.split(",")]
        pool = await create_pool(url, min_size=1, max_size=max(concurrency))
        modes = [CHANGES, READS, READS_HELD, READS_EARLY, HELD, NO_CHAIN]
        print(f"audit events per second ({args.seconds:g} s a cell; C connections, B events a batch)")
        print()
        header = " | ".join(f"C={c} B={b}" for b in sizes for c in concurrency)
        print(f"| way of committing | {header} |")
        print("|---|" + "---:|" * (len(sizes) * len(concurrency)))
        for mode in modes:
            cells = []
            for size in sizes:
                for c in concurrency:
                    cells.append(f"{await run(pool, mode, c, size, args.seconds):,.0f}")
            print(f"| {mode} | " + " | ".join(cells) + " |", flush=True)
        print()
        for size in sizes:
            change, reads = await hold_time(pool, size)
            print(
                f"lock hold per append of {size} event(s) (median, one connection): "
                f"a change's {change:.2f} ms, a reads' batch's {reads:.2f} ms (its flush included)"
            )
        verified = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "catalog", "audit", "verify"],
            env=server.env,
            capture_output=True,
            text=True,
            cwd=REPO,
        )
        print(f"catalog audit verify: {verified.stdout.strip() or verified.stderr.strip()}")
        await pool.close()
        await admin.execute("DROP TABLE bench_audit_plain")
        await admin.close()
    finally:
        server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--batch", default="1,16")
    asyncio.run(main(parser.parse_args()))
