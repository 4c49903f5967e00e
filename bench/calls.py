"""Calls on the event loop's thread per request: a profile hook (`sys.setprofile`) in the
benchmark's server counts every Python function and every C function called on the thread that
runs the event loop (the request's own work, and the audit writer's and the indexer's that it
causes), over `--count` requests of each case after a warm-up, one request at a time. The cases:
a store's details, a keyword and a hybrid search, and a write of a new short entry (its
embedding pass and its share of the full-text index's commits, which run on that thread too).

A count does not weigh calls by their cost, and a C function's own work is one call however long
it runs; but the same tree gives the same count, where CPU timings on a shared machine move by
a third between runs. A before/after is this tree against another checkout's (`--repo`, a
`git worktree` of an earlier commit), in either order.

The server is `catalog serve` of the checkout (the real model) with request_floor's store: one
scope of 200 short entries, every entry embedded and indexed.

Run: .venv/bin/python bench/calls.py [--count 200] [--repo DIR] [--top 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.live import BenchServer
from bench.request_floor import DETAILS, STORE, UC, Request, prepared, searches

HERE = str(Path(__file__).resolve())
WARM_UP = 50


def serve(port: int, out: str) -> int:
    """`catalog serve` of the working directory's checkout, counting calls on its main thread
    (the event loop's) between SIGUSR1 and SIGUSR2, written to `out` as JSON at SIGUSR2."""
    sys.path.insert(0, os.getcwd())  # the checkout BenchServer runs in (--repo), first
    from catalog.app import create_app
    from catalog.cli import serve_app
    from catalog.settings import Settings

    counts: Counter[tuple[str, str]] = Counter()

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            counts[(frame.f_code.co_filename, frame.f_code.co_name)] += 1
        elif event == "c_call":
            counts[("<c>", getattr(arg, "__qualname__", type(arg).__name__))] += 1

    def start(*_: Any) -> None:
        counts.clear()
        sys.setprofile(hook)

    def stop(*_: Any) -> None:
        sys.setprofile(None)
        rows = [[file, name, n] for (file, name), n in counts.most_common()]
        Path(out).write_text(json.dumps(rows))

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    app = create_app(Settings.from_env(None, port=port))
    return 0 if serve_app(app, "127.0.0.1", port) else 1


def writes(n: int) -> list[Request]:
    """`n` writes of a new short entry each to the floor's store (scope u2)."""
    target = f"{UC}/memory-stores/{STORE}/entries"
    return [
        (
            "POST",
            target,
            json.dumps({"scope": "u2", "path": f"/calls/{i}.md", "contents": f"a note, number {i}"}).encode(),
        )
        for i in range(n)
    ]


def where(file: str) -> str:
    """A function's module as a short name: the catalog's or a library's package and module."""
    for marker in ("site-packages/", "/catalog/"):
        if marker in file:
            tail = file.split(marker, 1)[1]
            return ("catalog/" if marker == "/catalog/" else "") + tail.removesuffix(".py")
    return file if file.startswith("<") else "python: " + Path(file).stem


async def count_calls(repo: Path | None, count: int) -> dict[str, list[tuple[str, str, int]]]:
    """Each case's calls, counted over `count` requests."""
    out = Path(tempfile.mkdtemp(prefix="catcalls")) / "calls.json"
    server = BenchServer(argv=[HERE, "--serve", str(out)], repo=repo)
    try:
        token = await prepared(server)
        cases: dict[str, list[Request]] = {
            "details": DETAILS,
            "keyword": searches("keyword"),
            "hybrid": searches("hybrid"),
            # each write a new entry (its embedding and its share of the index's commits count too)
            "write": writes(WARM_UP + count),
        }
        found = {}
        async with httpx.AsyncClient(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        ) as client:
            for case, requests in cases.items():

                async def send(n: int, start: int = 0, requests: list[Request] = requests) -> None:
                    for i in range(start, start + n):
                        method, target, body = requests[i % len(requests)]
                        r = await client.request(method, target, content=body or None)
                        r.raise_for_status()

                await send(WARM_UP)
                server.process.send_signal(signal.SIGUSR1)
                await asyncio.sleep(0.2)
                await send(count, WARM_UP)
                # the audit writer's batch of the last request; the last writes' index commit
                await asyncio.sleep(1.5 if case == "write" else 0.2)
                server.process.send_signal(signal.SIGUSR2)
                deadline = time.monotonic() + 10
                while not out.exists() and time.monotonic() < deadline:  # noqa: ASYNC110 (another process writes it)
                    await asyncio.sleep(0.05)
                found[case] = [(file, name, n) for file, name, n in json.loads(out.read_text())]
                out.unlink()
        return found
    finally:
        server.stop()


def report(found: dict[str, list[tuple[str, str, int]]], count: int, top: int) -> None:
    for case, rows in found.items():
        total = sum(n for _, _, n in rows)
        modules: Counter[str] = Counter()
        for file, _, n in rows:
            modules[where(file)] += n
        print(f"\n{case}: {total / count:,.0f} calls a request ({count} requests)\n")
        print("| module | calls a request |")
        print("|---|---:|")
        for module, n in modules.most_common(top):
            print(f"| {module} | {n / count:.1f} |")
        print("\n| function | calls a request |")
        print("|---|---:|")
        for file, name, n in rows[:top]:
            print(f"| {where(file)}: {name} | {n / count:.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description="calls on the event loop's thread per request")
    parser.add_argument("--count", type=int, default=200, help="requests counted of each case")
    parser.add_argument("--repo", type=Path, help="another checkout's server (a before/after)")
    parser.add_argument("--top", type=int, default=20, help="rows of each table")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.port, args.serve)
    found = asyncio.run(count_calls(args.repo, args.count))
    report(found, args.count, args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
