"""One, two and three `catalog serve` nodes on one PostgreSQL: how ingest divides among them.

Each run starts N nodes on one fresh data dir (the first starts the embedded PostgreSQL, the
others join it; each node keeps its own full-text index slot) with the real ONNX model, then
writes `--entries` entries through the nodes in turn (round robin, as a load balancer would) from
`--concurrency` writers, and waits until every entry is searchable on every node (embedded, and
in each node's full-text index). It prints the rate writes were answered at, the rate until
searchable, and, read from each node's /metrics, how the work divided: the texts each node's
embedding worker embedded (claims share the queue) and the changes each node's indexer applied
(every node applies every change to its own index).

On a machine with C cores, nodes beyond C share the cores: the figure says what a node adds on
this machine, not on a cluster of machines.

With --load, what N nodes and N workers each bring on one machine, under a load from several
client processes (bench/load.py): for each N of `--scale`, N `catalog serve` nodes on one data
dir (each its own index slot; the load spread over their ports, as a balancer would) and one
`catalog serve --workers N` (one port, one shared index), each with the real model on a fresh
data dir holding `--entries` entries in 50 scopes. Each is measured for `--seconds` per
operation: hybrid searches, keyword searches, then writes (new entries). The table gives the rate,
its ratio to N = 1 of the same arrangement divided by N (the scaling: 1.0 is linear), the
latencies, the CPU the server's processes and PostgreSQL's kept busy (in cores), the busiest
client process's share of a core (near 1.0: the client, not the server, was the limit; add
`--clients`), and how many database sessions waited for the audit chain's lock on average
(sampled ten times a second from a connection of the benchmark's own: every process's audit
appends take that one lock, so a figure near the number of processes says the chain, not the
cores, was the limit).

Run: .venv/bin/python bench/cluster.py [--nodes 1,2,3] [--entries 600] [--concurrency 8]
     .venv/bin/python bench/cluster.py --load [--scale 1,2,4] [--seconds 20] [--clients 4]
        [--connections C] [--entries 2000] [--arrangements nodes,workers]

With --load, each client process opens `--connections` connections (by default enough that the
N processes have 16 each on average: at least 16 a client). The connections are kept open
through an operation's measurement, and a connection stays with the process that accepted it,
so with too few of them some workers would have little or nothing to do; the table says how
many of the N answered, and the least and most any of them answered.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import asyncpg
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.live import BenchServer
from bench.load import cpu_of_postgres, cpu_of_server, load, load_average, memory_of_server
from bench.search import RNG, sentence
from catalog.cli.workers import _raise_max_connections, connections_needed
from catalog.db import EmbeddedPostgres
from catalog.db.locks import AUDIT_CHAIN
from catalog.machine import limits

UC = "/api/2.1/unity-catalog"
STORE = "main.default.cluster_bench"


def metric(text: str, name: str) -> float:
    """The sum of a metric's samples in an exposition."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {"):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def make_room(data_dir: Path, nodes: int) -> None:
    """Let the embedded PostgreSQL of `data_dir` take the connections of `nodes` nodes: a node
    raises its `max_connections` for its own workers only, so without this the later of sixteen
    nodes on one data dir are refused ("too many clients"). Raised as `catalog serve --workers` does
    (`connections_needed`), then stopped, for the first node to start it with the setting."""
    if nodes < 2:
        return
    embedded = EmbeddedPostgres(data_dir / "postgres")
    try:
        await _raise_max_connections(embedded.start(), connections_needed(nodes))
    finally:
        embedded.stop()


async def start_nodes(data_dir: Path, nodes: int, servers: list[BenchServer]) -> None:
    """`nodes` nodes on one data dir, appended to `servers` as each starts (so that the caller
    stops those started when a later one fails to)."""
    await make_room(data_dir, nodes)
    for _ in range(nodes):
        servers.append(BenchServer(data_dir))


async def run(nodes: int, entries: int, concurrency: int) -> dict[str, object]:
    data_dir = Path(tempfile.mkdtemp(prefix="catcluster"))
    servers: list[BenchServer] = []
    try:
        await start_nodes(data_dir, nodes, servers)
        token = servers[0].token()
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(headers=headers, timeout=120) as http:
            r = await http.post(
                f"{servers[0].url}{UC}/memory-stores",
                json={"name": STORE.rsplit(".", 1)[1], "catalog_name": "main", "schema_name": "default"},
            )
            r.raise_for_status()
            before = [(await http.get(f"{s.url}/metrics")).text for s in servers]
            texts = [(f"u{i % 50}", f"/notes/{i}.md", sentence(RNG)) for i in range(entries)]
            queue = list(enumerate(texts))
            started = time.perf_counter()

            async def writer() -> None:
                while queue:
                    i, (scope, path, text) = queue.pop()
                    node = servers[i % nodes]
                    r = await http.post(
                        f"{node.url}{UC}/memory-stores/{STORE}/entries",
                        params={"scope": scope},
                        json={"path": path, "contents": text, "write_mode": "OVERWRITE"},
                    )
                    r.raise_for_status()

            await asyncio.gather(*(writer() for _ in range(concurrency)))
            answered = time.perf_counter() - started
            # searchable everywhere: no node has an embedding backlog or an index behind
            while True:
                pages = [(await http.get(f"{s.url}/metrics")).text for s in servers]
                backlog = max(metric(p, "catalog_embedding_backlog_entries") for p in pages)
                lag = max(metric(p, "catalog_index_lag_changes") for p in pages)
                if backlog == 0 and lag == 0:
                    break
                await asyncio.sleep(0.05)
            searchable = time.perf_counter() - started
            embedded = [
                metric(p, "catalog_embedded_entries_total") - metric(b, "catalog_embedded_entries_total")
                for p, b in zip(pages, before, strict=True)
            ]
            applied = [
                metric(p, "catalog_index_watermark") - metric(b, "catalog_index_watermark")
                for p, b in zip(pages, before, strict=True)
            ]
        return {
            "nodes": nodes,
            "answered": entries / answered,
            "searchable": entries / searchable,
            "embedded": embedded,
            "applied": applied,
        }
    finally:
        for server in reversed(servers):
            server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)


# --- --load: N nodes and N workers under a load from several client processes ----------------------

SCOPES = 50


async def _searchable(servers: list[BenchServer], token: str) -> None:
    """Every entry embedded, then a keyword search on each server (which waits for its index)."""
    import asyncpg

    conn = await asyncpg.connect(servers[0].db_url())
    try:
        while await conn.fetchval(  # noqa: ASYNC110 (the servers' progress)
            "SELECT EXISTS (SELECT 1 FROM entries WHERE embedded_version IS DISTINCT FROM version)"
        ):
            await asyncio.sleep(0.2)
    finally:
        await conn.close()
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:
        for server in servers:
            for scope in range(SCOPES):
                r = await http.post(
                    f"{server.url}{UC}/memory-stores/{STORE}/entries:search",
                    json={"scope": f"u{scope}", "query": "the", "mode": "keyword"},
                )
                r.raise_for_status()


def _searches(mode: str, n: int) -> list[tuple[str, str, bytes | None]]:
    import json

    rng = __import__("random").Random(5)
    target = f"{UC}/memory-stores/{STORE}/entries:search"
    return [
        (
            "POST",
            target,
            json.dumps(
                {
                    "scope": f"u{rng.randrange(SCOPES)}",
                    "query": " ".join(sentence(rng).split()[:6]),
                    "mode": mode,
                }
            ).encode(),
        )
        for _ in range(n)
    ]


def _writes(tag: str, n: int) -> list[tuple[str, str, bytes | None]]:
    import json

    rng = __import__("random").Random(7)
    return [
        (
            "POST",
            f"{UC}/memory-stores/{STORE}/entries?scope=u{i % SCOPES}",
            json.dumps({"path": f"/{tag}/{i}.md", "contents": sentence(rng)}).encode(),
        )
        for i in range(n)
    ]


CHAIN_SAMPLE_SECONDS = 0.1


async def chain_waiters(url: str, stop: asyncio.Event) -> float:
    """The mean number of PostgreSQL sessions waiting for the audit chain's lock (an append of
    every worker's and node's events takes it: `catalog.db.locks.AUDIT_CHAIN`) until `stop` is
    set, sampled every CHAIN_SAMPLE_SECONDS on a connection of its own."""
    conn = await asyncpg.connect(url)
    samples: list[int] = []
    try:
        while not stop.is_set():
            samples.append(
                await conn.fetchval(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                    "AND classid = 0 AND objid = $1 AND objsubid = 1",
                    AUDIT_CHAIN,
                )
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), CHAIN_SAMPLE_SECONDS)
    finally:
        await conn.close()
    return sum(samples) / len(samples) if samples else 0.0


PER_PROCESS = 16  # connections each server process has on average, by default


def connections_per_client(n: int, clients: int, asked: int | None) -> int:
    """The connections each client process opens against `n` server processes: `asked`, else
    enough for PER_PROCESS a process (at least PER_PROCESS a client)."""
    if asked is not None:
        return asked
    return max(PER_PROCESS, -(-PER_PROCESS * n // clients))


def spread(answers: dict[str, int], n: int) -> str:
    """How the answers divided among a server's `n` workers: how many answered, the least and
    the most any answered, and each one's count."""
    if not answers:
        return ""
    counts = list(answers.values())
    return f"{len(counts)} of {n}, {min(counts)}-{max(counts)}: " + " / ".join(map(str, counts))


async def measure_load(
    arrangement: str, n: int, entries: int, seconds: float, clients: int, connections: int
) -> list[dict[str, object]]:
    """One arrangement of `n` (nodes or workers): the rows of its measurements."""
    data_dir = Path(tempfile.mkdtemp(prefix="catload"))
    servers: list[BenchServer] = []
    rows: list[dict[str, object]] = []
    try:
        if arrangement == "workers":
            servers.append(BenchServer(data_dir, env={"CATALOG_WORKERS": str(n)}))
        else:
            await start_nodes(data_dir, n, servers)
        urls = [s.url for s in servers]
        pids = [s.process.pid for s in servers]
        token = servers[0].token()
        database = servers[0].db_url()
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:
            r = await http.post(
                f"{urls[0]}{UC}/memory-stores",
                json={"name": STORE.rsplit(".", 1)[1], "catalog_name": "main", "schema_name": "default"},
            )
            r.raise_for_status()
        await load(urls, token, _writes("seed", entries), processes=clients, connections=4, count=entries)
        await _searchable(servers, token)
        plan = [
            ("hybrid search", _searches("hybrid", 5000), _searches("hybrid", 200)),
            ("keyword search", _searches("keyword", 5000), _searches("keyword", 200)),
            ("write", _writes("measured", 200_000), _writes("warm", 200)),
        ]
        for op, requests, warm in plan:
            await load(urls, token, warm, processes=clients, connections=2, count=len(warm))
            served = sum(cpu_of_server(pid) for pid in pids)
            postgres = cpu_of_postgres(data_dir / "postgres")
            stop = asyncio.Event()
            waiting = asyncio.ensure_future(chain_waiters(database, stop))
            try:
                report = await load(
                    urls, token, requests, processes=clients, connections=connections, seconds=seconds
                )
            finally:
                stop.set()
            chain = await waiting
            served = sum(cpu_of_server(pid) for pid in pids) - served
            postgres = cpu_of_postgres(data_dir / "postgres") - postgres
            rows.append(
                {
                    "arrangement": arrangement,
                    "n": n,
                    "op": op,
                    "rate": report.rate,
                    "p50": report.pct(0.5),
                    "p99": report.pct(0.99),
                    "server_cores": served / report.seconds,
                    "postgres_cores": postgres / report.seconds,
                    "client": report.busiest_client,
                    "chain_waiters": chain,
                    "errors": report.errors,
                    "first_error": report.first_error,
                    "workers": dict(sorted(report.workers.items())),
                    "connections": clients * connections,
                }
            )
            print(
                f"  {arrangement} {n} {op}: {report.rate:.0f}/s p50 {report.pct(0.5):.1f} ms, "
                f"server {served / report.seconds:.2f} cores, errors {report.errors} {report.first_error}",
                file=sys.stderr,
                flush=True,
            )
            if op == "write":  # let the writes' embedding and indexing finish before the next run
                await _searchable(servers, token)
        memory = [memory_of_server(pid) for pid in pids]
        for row in rows:
            row["memory_mb"] = sum(mb for mb, _ in memory)
            row["processes"] = sum(count for _, count in memory)
    finally:
        for server in reversed(servers):
            server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    return rows


def run_load(args: argparse.Namespace) -> None:
    scale = [int(x) for x in args.scale.split(",")]
    arrangements = args.arrangements.split(",")
    most = connections_per_client(max(scale), args.clients, args.connections)
    found = limits()
    print(
        f"{args.entries} entries in {SCOPES} scopes; {args.clients} client processes x {most} connections "
        f"at N = {max(scale)}, "
        f"{args.seconds:g} s an operation; {os.cpu_count()} cores (affinity "
        f"{found.affinity}; CPU limit {found.cpu_quota or 'none'}; memory limit "
        f"{f'{found.memory / 2**30:.1f} GiB' if found.memory else 'none'}); "
        f"load average {load_average()} at the start"
    )
    rows: list[dict[str, object]] = []
    for n in scale:
        for arrangement in arrangements:
            rows += asyncio.run(
                measure_load(
                    arrangement,
                    n,
                    args.entries,
                    args.seconds,
                    args.clients,
                    connections_per_client(n, args.clients, args.connections),
                )
            )
    print(f"load average {load_average()} at the end\n")
    print(
        "| arrangement | N | connections | operation | requests/s | scaling (rate / (N x rate at 1)) "
        "| p50 ms | p99 ms "
        "| server cores busy | PostgreSQL cores busy | busiest client (cores) | waiting for the audit chain "
        "| answers by worker | server memory (MB, PSS; processes) |"
    )
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    base = {(r["arrangement"], r["op"]): float(r["rate"]) for r in rows if r["n"] == 1}  # type: ignore[arg-type]
    base.update({("workers", op): rate for (a, op), rate in list(base.items()) if a == "nodes"})
    for r in rows:
        n = int(r["n"])  # type: ignore[call-overload]
        rate = float(r["rate"])  # type: ignore[arg-type]
        one = base.get((str(r["arrangement"]), str(r["op"])))
        scaling = f"{rate / (n * one):.2f}" if one else ""
        answered = spread(r["workers"], n)  # type: ignore[arg-type]
        print(
            f"| {r['arrangement']} | {n} | {r['connections']} | {r['op']} | {rate:.0f} | {scaling} "
            f"| {r['p50']:.1f} | {r['p99']:.1f} | {r['server_cores']:.2f} | {r['postgres_cores']:.2f} "
            f"| {r['client']:.2f} "
            f"| {r['chain_waiters']:.2f} | {answered} | {r['memory_mb']:.0f} ({r['processes']}) |"
        )
        if r["errors"]:
            print(f"|  | | | errors: {r['errors']} ({r['first_error']}) | | | | | | | | | |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1,2,3")
    parser.add_argument("--entries", type=int, default=600)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--load", action="store_true", help="N nodes and N workers under load (see above)")
    parser.add_argument("--scale", default="1,2", help="with --load: the Ns")
    parser.add_argument("--arrangements", default="nodes,workers", help="with --load: nodes, workers or both")
    parser.add_argument("--seconds", type=float, default=20.0, help="with --load: seconds an operation")
    parser.add_argument("--clients", type=int, default=4, help="with --load: client processes")
    parser.add_argument(
        "--connections",
        type=int,
        default=None,
        help="with --load: connections per client (default: 16 a server process, at least 16 a client)",
    )
    args = parser.parse_args()
    if args.load:
        if args.entries == 600:
            args.entries = 2000
        run_load(args)
        return
    print(
        f"{args.entries} entries from {args.concurrency} writers, round robin over the nodes; "
        f"{os.cpu_count()} cores; the real ONNX model on every node"
    )
    print()
    print("| nodes | writes answered (entries/s) | until searchable everywhere (entries/s) "
          "| entries embedded, per node | changes applied to its index, per node |")  # fmt: skip
    print("|---:|---:|---:|---|---|")
    for n in (int(x) for x in args.nodes.split(",")):
        row = asyncio.run(run(n, args.entries, args.concurrency))
        embedded = " / ".join(f"{x:.0f}" for x in row["embedded"])  # type: ignore[attr-defined]
        applied = " / ".join(f"{x:.0f}" for x in row["applied"])  # type: ignore[attr-defined]
        print(
            f"| {n} | {row['answered']:.0f} | {row['searchable']:.0f} | {embedded} | {applied} |", flush=True
        )


if __name__ == "__main__":
    main()
