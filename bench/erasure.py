"""How long erasing a data subject takes: `--entries` entries (default 10,000) of one subject
spread over `--stores` stores (default 10), half in its own scope and half in `subject:project`
scopes, each entry with a second version in its history, next to another subject's entries that
stay; then `POST /system/erase-subject` once, timed, and the time of the same request for a subject
that has nothing.

A `catalog serve` on a fresh data dir (embedded PostgreSQL); entries are written with
`entries:batchCreate` (100 a request).

Run: .venv/bin/python bench/erasure.py [--entries 10000] [--stores 10]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.live import BenchServer

UC = "/api/2.1/unity-catalog"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--stores", type=int, default=10)
    args = parser.parse_args()
    server = BenchServer()
    try:
        run(server, args.entries, args.stores)
    finally:
        server.stop()


def run(server: BenchServer, entries: int, stores: int) -> None:
    http = httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {server.token()}"}, timeout=600
    )
    per_store = entries // stores
    began = time.perf_counter()
    for s in range(stores):
        name = f"erase-{s}"
        http.post(
            f"{UC}/memory-stores", json={"name": name, "catalog_name": "main", "schema_name": "default"}
        ).raise_for_status()
        base = f"{UC}/memory-stores/main.default.{name}/entries:batchCreate"
        for start in range(0, per_store, 100):
            for scope in ("subject-1", "subject-1:project", "other-subject"):
                if scope == "other-subject" and start % 1000:
                    continue  # a few of another subject's, which stay
                count = min(100, per_store - start) if scope != "other-subject" else 10
                half = count // 2 if scope.startswith("subject-1") else count
                batch = [
                    {"path": f"/notes/{start + i}.md", "contents": f"note {start + i} of {scope}"}
                    for i in range(half)
                ]
                for mode in ("EXCLUSIVE", "APPEND"):  # a second version of each: history
                    r = http.post(base, params={"scope": scope}, json={"entries": batch, "write_mode": mode})
                    r.raise_for_status()
    setup = time.perf_counter() - began
    began = time.perf_counter()
    r = http.post(f"{UC}/system/erase-subject", json={"subject": "subject-1"})
    r.raise_for_status()
    elapsed = time.perf_counter() - began
    erased = sum(r.json()["erased"].values())
    began = time.perf_counter()
    http.post(f"{UC}/system/erase-subject", json={"subject": "nobody-here"}).raise_for_status()
    empty = time.perf_counter() - began
    print(f"setup: {stores} stores, written in {setup:.1f} s")
    print("| erase-subject | entries erased | stores | time |")
    print("|---|---|---|---|")
    print(
        f"| a subject with entries and history | {erased:,} | {len(r.json()['erased'])} | {elapsed:.2f} s |"
    )
    print(f"| a subject with nothing | 0 | 0 | {empty * 1000:.0f} ms |")


if __name__ == "__main__":
    main()
