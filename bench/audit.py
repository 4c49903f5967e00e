"""The cost of auditing: throughput of `entries:get` and of entry writes with the audit log on,
against the same build with it switched off (in this benchmark only).

Two server processes run the real app over HTTP (uvicorn) on one data dir and one embedded
PostgreSQL: one audits as shipped, the other has its audit writer switched off after start-up.
Both use a fast stand-in embedder so that the model does not dominate the writes. The load comes
from this process over 16 keep-alive connections (a lean HTTP/1.1 client); the two servers are
measured in turn, after the previous writes' background work has settled; median of rounds.

Run: .venv/bin/python bench/audit.py [--requests N] [--rounds R]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg

from bench.live import BenchServer

UC = "/api/2.1/unity-catalog"
STORE = f"{UC}/memory-stores/main.default.audit_bench"
CONCURRENCY = 16
HERE = str(Path(__file__).resolve())


def serve(port: int, audit: bool) -> int:
    """A server like `catalog serve`, with the stand-in embedder and the audit switch."""
    from catalog.app import create_app
    from catalog.cli import serve_app
    from catalog.settings import Settings

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from fake_embedder import HashEncoder  # the model's cost is not what this measures

    app = create_app(Settings.from_env(None, port=port), encoder=HashEncoder())

    def switch() -> None:
        app.state.runtime.audit.enabled = audit

    return 0 if serve_app(app, "127.0.0.1", port, on_started=switch) else 1


class Connection:
    """A lean keep-alive HTTP/1.1 client connection, so that the load generator takes as little
    of the machine as it can (httpx costs more per request than the server's whole audit)."""

    def __init__(self, url: str, token: str) -> None:
        self.host, self.port = urlsplit(url).hostname or "127.0.0.1", urlsplit(url).port or 80
        self.token = token
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, target: str, body: bytes | None) -> tuple[int, bytes]:
        for _ in range(2):  # the server closes connections idle for 5 s: then once more on a new one
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            answer = await self._exchange(method, target, body)
            if answer is not None:
                return answer
            await self.close()
        raise ConnectionError(f"{method} {target}: the server closed the connection")

    async def _exchange(self, method: str, target: str, body: bytes | None) -> tuple[int, bytes] | None:
        assert self.reader is not None and self.writer is not None
        head = (
            f"{method} {target} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {self.token}\r\n"
            f"User-Agent: bench-audit\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body or b'')}\r\n\r\n"
        )
        self.writer.write(head.encode() + (body or b""))
        status_line = await self.reader.readline()
        if not status_line:
            return None
        length = 0
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
        return int(status_line.split()[1]), await self.reader.readexactly(length)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
        self.reader = self.writer = None


Request = tuple[str, str, bytes | None]


async def rate(connections: list[Connection], requests: list[Request]) -> float:
    """Requests per second, the list shared by the connections (one request in flight on each)."""
    pending = iter(requests)

    async def drive(conn: Connection) -> None:
        for method, target, body in pending:
            status, answer = await conn.request(method, target, body)
            assert status == 200, answer

    started = time.perf_counter()
    await asyncio.gather(*(drive(conn) for conn in connections))
    return len(requests) / (time.perf_counter() - started)


def writes(tag: str, n: int) -> list[Request]:
    return [
        (
            "POST",
            f"{STORE}/entries?scope=u{i % 50}",
            json.dumps({"path": f"/{tag}/{i}.md", "contents": f"note {i}"}).encode(),
        )
        for i in range(n)
    ]


def reads(tag: str, n: int) -> list[Request]:
    return [("GET", f"{STORE}/entries:get?scope=u{i % 50}&path=/{tag}/{i}.md", None) for i in range(n)]


async def settle(conn: asyncpg.Connection) -> None:
    """Wait for the background work of the writes (vectors, then the full-text indexers)."""
    while await conn.fetchval(  # noqa: ASYNC110 (polling the servers' progress)
        "SELECT count(*) FROM entries WHERE embedded_version IS DISTINCT FROM version"
    ):
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.6)


async def measure(args: argparse.Namespace) -> None:
    audited = BenchServer(argv=[HERE, "--serve", "on"])
    plain = BenchServer(data_dir=audited.data_dir, argv=[HERE, "--serve", "off"])
    results: dict[tuple[str, bool], list[float]] = {}
    try:
        token = audited.token()
        db = await asyncpg.connect(audited.db_url())
        pools = {
            enabled: [Connection(server.url, token) for _ in range(CONCURRENCY)]
            for enabled, server in ((True, audited), (False, plain))
        }
        store = json.dumps({"name": "audit_bench", "catalog_name": "main", "schema_name": "default"}).encode()
        status, answer = await pools[True][0].request("POST", f"{UC}/memory-stores", store)
        assert status == 200, answer
        for enabled, connections in pools.items():  # warm both: connections, caches, statements
            await rate(connections, writes(f"warm-{int(enabled)}", 300))
            await rate(connections, reads(f"warm-{int(enabled)}", 300))
        for round_ in range(args.rounds):
            order = (True, False) if round_ % 2 == 0 else (False, True)  # cancel drift
            for op, requests in (("write", writes), ("get", reads)):
                for enabled in order:
                    await settle(db)
                    rates = results.setdefault((op, enabled), [])
                    tag = f"{round_}-{int(enabled)}"
                    rates.append(await rate(pools[enabled], requests(tag, args.requests)))
            print(
                f"round {round_ + 1}/{args.rounds}: "
                + ", ".join(
                    f"{op} {'on' if on else 'off'} {rates[-1]:.0f}/s" for (op, on), rates in results.items()
                ),
                file=sys.stderr,
                flush=True,
            )
        for connections in pools.values():
            for conn in connections:
                await conn.close()
        await db.close()
    finally:
        plain.stop()
        audited.stop()
    print(
        f"audit cost: {args.requests} requests per measurement, {CONCURRENCY} keep-alive HTTP connections, "
        f"two server processes on one embedded PostgreSQL, median of {args.rounds} rounds\n"
    )
    print("| operation | audited (req/s) | not audited (req/s) | cost |")
    print("|---|---|---|---|")
    for op in ("get", "write"):
        on, off = statistics.median(results[(op, True)]), statistics.median(results[(op, False)])
        label = "entries:get" if op == "get" else "entries write"
        print(f"| {label} | {on:.0f} | {off:.0f} | {(1 - on / off) * 100:.1f}% |")


def main() -> int:
    parser = argparse.ArgumentParser(description="audit cost")
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--serve", choices=("on", "off"), help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.port, args.serve == "on")
    asyncio.run(measure(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
