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

Run: .venv/bin/python bench/cluster.py [--nodes 1,2,3] [--entries 600] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.live import BenchServer
from bench.search import RNG, sentence

UC = "/api/2.1/unity-catalog"
STORE = "main.default.cluster_bench"


def metric(text: str, name: str) -> float:
    """The sum of a metric's samples in an exposition."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and (line[len(name)] in " {"):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def run(nodes: int, entries: int, concurrency: int) -> dict[str, object]:
    data_dir = Path(tempfile.mkdtemp(prefix="catcluster"))
    servers = [BenchServer(data_dir)]
    servers += [BenchServer(data_dir) for _ in range(nodes - 1)]
    try:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1,2,3")
    parser.add_argument("--entries", type=int, default=600)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
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
