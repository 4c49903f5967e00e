"""The cost of auditing: throughput of `entries:get` and of entry writes with the audit log on,
against the same build with it switched off (in this benchmark only).

The server runs in-process (the real app, the embedded PostgreSQL, a fast stand-in embedder so
that the model does not dominate the writes); 16 concurrent clients over ASGI.
Run: .venv/bin/python bench/audit.py [--requests N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from litestar.testing import AsyncTestClient

from catalog.app import create_app
from catalog.auth import mint_dev_token
from catalog.search.embedder import HashEncoder
from catalog.settings import Settings

UC = "/api/2.1/unity-catalog"
STORE = f"{UC}/memory-stores/main.default.audit_bench"


async def rate(calls: list, concurrency: int = 16) -> float:  # type: ignore[type-arg]
    gate = asyncio.Semaphore(concurrency)

    async def one(call):  # type: ignore[no-untyped-def]
        async with gate:
            r = await call()
            assert r.status_code == 200, r.text

    started = time.perf_counter()
    await asyncio.gather(*(one(c) for c in calls))
    return len(calls) / (time.perf_counter() - started)


async def main() -> None:
    parser = argparse.ArgumentParser(description="audit cost")
    parser.add_argument("--requests", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    settings = Settings(data_dir=Path(tempfile.mkdtemp(prefix="auditbench")))
    app = create_app(settings, encoder=HashEncoder())
    headers = {"Authorization": f"Bearer {mint_dev_token(settings, 'admin')}"}
    results: dict[tuple[str, bool], list[float]] = {}
    async with AsyncTestClient(app, timeout=60) as client:
        r = await client.post(
            f"{UC}/memory-stores",
            headers=headers,
            json={"name": "audit_bench", "catalog_name": "main", "schema_name": "default"},
        )
        r.raise_for_status()
        audit = app.state.runtime.audit
        n = args.requests
        for round_ in range(args.rounds):
            for enabled in (True, False):
                audit.enabled = enabled
                tag = f"{round_}-{int(enabled)}"

                def write(i: int, tag: str = tag):  # type: ignore[no-untyped-def]
                    return lambda: client.post(
                        f"{STORE}/entries",
                        headers=headers,
                        params={"scope": f"u{i % 50}"},
                        json={"path": f"/{tag}/{i}.md", "contents": f"note {i}"},
                    )

                def read(i: int, tag: str = tag):  # type: ignore[no-untyped-def]
                    return lambda: client.get(
                        f"{STORE}/entries:get",
                        headers=headers,
                        params={"scope": f"u{i % 50}", "path": f"/{tag}/{i}.md"},
                    )

                results.setdefault(("write", enabled), []).append(await rate([write(i) for i in range(n)]))
                results.setdefault(("get", enabled), []).append(await rate([read(i) for i in range(n)]))
        audit.enabled = True
    print(
        f"audit cost: {args.requests} requests per measurement, 16 concurrent clients, in-process, "
        f"median of {args.rounds} rounds\n"
    )
    print("| operation | audited (req/s) | not audited (req/s) | cost |")
    print("|---|---|---|---|")
    for op in ("get", "write"):
        on, off = statistics.median(results[(op, True)]), statistics.median(results[(op, False)])
        label = "entries:get" if op == "get" else "entries write"
        print(f"| {label} | {on:.0f} | {off:.0f} | {(1 - on / off) * 100:.1f}% |")


if __name__ == "__main__":
    asyncio.run(main())
