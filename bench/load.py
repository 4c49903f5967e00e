"""Load from several client processes, and the CPU it costs on each side.

One Python process driving HTTP saturates at a few hundred requests per second (httpx at about
a hundred), so a load meant to find a server's ceiling comes from `processes` client processes,
each with its own event loop and `connections` keep-alive connections of a lean HTTP/1.1 client
(pre-encoded heads, no header parsing beyond the status, the length and `x-catalog-worker`). Each
connection sends its next request when the previous answer is in (a closed loop). The processes
start together (a shared start time) and run for the same seconds; each reports its requests,
its latencies and its own CPU time, so that the report can say whether the client was the limit
(a client process near one core is).

`cpu_of_server(pid)` is the CPU time of a server's process tree (`catalog serve`, its workers)
and `cpu_of_postgres(pgdata)` that of the PostgreSQL of a data dir (its postmaster and backends):
before and after a measurement, their difference over the requests answered is the server-side
CPU of a request.

Used by bench/request_floor.py (`--cpu`) and bench/cluster.py (`--load`).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

Request = tuple[str, str, bytes | None]  # method, target, body


class Connection:
    """A lean keep-alive HTTP/1.1 client connection."""

    def __init__(self, url: str, token: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.auth = f"Authorization: Bearer {token}\r\n" if token else ""
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self._heads: dict[tuple[str, str, int], bytes] = {}

    def _head(self, method: str, target: str, length: int) -> bytes:
        key = (method, target, length)
        head = self._heads.get(key)
        if head is None:
            head = (
                f"{method} {target} HTTP/1.1\r\nHost: {self.host}\r\n{self.auth}"
                "User-Agent: bench-load\r\nContent-Type: application/json\r\n"
                f"Content-Length: {length}\r\n\r\n"
            ).encode()
            if len(self._heads) < 10_000:
                self._heads[key] = head
        return head

    async def request(self, method: str, target: str, body: bytes | None) -> tuple[int, bytes, str]:
        """(status, body, the answering worker or '') of one request; reconnects once when the
        server closed the connection (idle, or `Connection: close` while draining)."""
        for _ in range(2):
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            answer = await self._exchange(method, target, body)
            if answer is not None:
                return answer
            await self.close()
        raise ConnectionError(f"{method} {target}: the server closed the connection")

    async def _exchange(self, method: str, target: str, body: bytes | None) -> tuple[int, bytes, str] | None:
        assert self.reader is not None and self.writer is not None
        payload = body or b""
        self.writer.write(self._head(method, target, len(payload)) + payload)
        try:
            status_line = await self.reader.readline()
        except ConnectionError:
            return None
        if not status_line:
            return None
        length, worker, closing = 0, "", False
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            name = name.lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"x-catalog-worker":
                worker = value.strip().decode()
            elif name == b"connection" and value.strip().lower() == b"close":
                closing = True
        data = await self.reader.readexactly(length)
        if closing:
            await self.close()
        return int(status_line.split()[1]), data, worker

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()
        self.reader = self.writer = None


@dataclass
class ClientReport:
    """What one client process did."""

    requests: int = 0
    errors: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    workers: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    wall_s: float = 0.0
    first_error: str = ""


@dataclass(frozen=True)
class Job:
    """What one client process sends: `requests` in turn (cycled), over `connections`
    connections, from `start_at` (time.time()) for `seconds`, or until `count` are answered."""

    urls: tuple[str, ...]  # connections are spread over these (nodes); one URL: one server
    token: str
    requests: tuple[Request, ...]
    connections: int
    start_at: float
    seconds: float = 0.0
    count: int = 0
    offset: int = 0  # where in `requests` this process starts


def _client(job: Job) -> ClientReport:
    return asyncio.run(_drive(job))


async def _drive(job: Job) -> ClientReport:
    report = ClientReport()
    conns = [Connection(job.urls[i % len(job.urls)], job.token) for i in range(job.connections)]
    total = len(job.requests)
    sent = 0
    deadline = 0.0

    async def one(conn: Connection) -> None:
        nonlocal sent
        while True:
            now = time.perf_counter()
            if job.seconds and now >= deadline:
                return
            if job.count and sent >= job.count:
                return
            method, target, body = job.requests[(job.offset + sent) % total]
            sent += 1
            try:
                status, data, worker = await conn.request(method, target, body)
            except (OSError, asyncio.IncompleteReadError) as exc:
                report.errors += 1
                report.first_error = report.first_error or f"{type(exc).__name__}: {exc}"
                await conn.close()
                continue
            report.latencies_ms.append((time.perf_counter() - now) * 1000)
            report.requests += 1
            report.statuses[status] += 1
            if worker:
                report.workers[worker] += 1
            if status >= 400:
                report.errors += 1
                report.first_error = report.first_error or f"{status} {data[:200]!r}"

    await asyncio.sleep(max(0.0, job.start_at - time.time()))
    cpu, wall = time.process_time(), time.perf_counter()
    deadline = wall + job.seconds
    await asyncio.gather(*(one(conn) for conn in conns))
    report.cpu_s, report.wall_s = time.process_time() - cpu, time.perf_counter() - wall
    for conn in conns:
        await conn.close()
    return report


@dataclass
class LoadReport:
    """What every client process did together."""

    processes: int
    connections: int
    requests: int
    errors: int
    seconds: float
    statuses: Counter[int]
    workers: Counter[str]
    latencies_ms: list[float]
    client_cpu_s: list[float]  # each process's
    first_error: str

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def pct(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0

    @property
    def busiest_client(self) -> float:
        """The busiest client process's CPU share of a core over the measurement (≥ 0.9: the client
        was likely the limit)."""
        return max(self.client_cpu_s) / self.seconds if self.seconds and self.client_cpu_s else 0.0


async def load(
    urls: Sequence[str],
    token: str,
    requests: Sequence[Request],
    *,
    processes: int,
    connections: int,
    seconds: float = 0.0,
    count: int = 0,
) -> LoadReport:
    """Run `requests` from `processes` client processes with `connections` connections each (for
    `seconds`, or `count` requests in all), all starting together; the reports summed."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(processes, mp_context=context) as pool:
        # the pool's processes start (and import this module) before the clock starts
        list(pool.map(_noop, range(processes)))
        start_at = time.time() + 0.5
        jobs = [
            Job(
                tuple(urls),
                token,
                tuple(requests),
                connections,
                start_at,
                seconds,
                (count + processes - 1) // processes if count else 0,
                offset=n * max(1, len(requests) // processes),
            )
            for n in range(processes)
        ]
        loop = asyncio.get_running_loop()
        reports = await asyncio.gather(*(loop.run_in_executor(pool, _client, job) for job in jobs))
    statuses: Counter[int] = Counter()
    workers: Counter[str] = Counter()
    for r in reports:
        statuses.update(r.statuses)
        workers.update(r.workers)
    return LoadReport(
        processes,
        connections,
        sum(r.requests for r in reports),
        sum(r.errors for r in reports),
        max(r.wall_s for r in reports),
        statuses,
        workers,
        [ms for r in reports for ms in r.latencies_ms],
        [r.cpu_s for r in reports],
        next((r.first_error for r in reports if r.first_error), ""),
    )


def _noop(_: int) -> None:
    return None


def cpu_of_server(pid: int) -> float:
    """User and system CPU seconds of a process and its descendants so far (live ones: the
    workers of `catalog serve --workers N`, each counted with its own threads)."""
    import psutil

    try:
        root = psutil.Process(pid)
        members = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for member in members:
        with contextlib.suppress(psutil.Error):
            if member.name().startswith("postgres"):
                continue  # an embedded PostgreSQL started by the server: counted by cpu_of_postgres
            times = member.cpu_times()
            total += times.user + times.system
    return total


def memory_of_server(pid: int) -> tuple[float, int]:
    """(MB of memory, processes) of a process and its descendants: each one's proportional set
    size (its private pages, and its share of those it shares, the model's file among them)."""
    import psutil

    try:
        root = psutil.Process(pid)
        members = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0, 0
    total, count = 0.0, 0
    for member in members:
        with contextlib.suppress(psutil.Error):
            if member.name().startswith("postgres"):
                continue
            total += member.memory_full_info().pss
            count += 1
    return total / 2**20, count


def cpu_of_postgres(pgdata: Path | None = None) -> float:
    """CPU seconds so far of the PostgreSQL running on `pgdata` (its postmaster and every backend),
    or of every PostgreSQL process on the machine when None (other work's too, if any runs)."""
    if pgdata is not None:
        import psutil

        try:
            postmaster = psutil.Process(int((pgdata / "postmaster.pid").read_text().split()[0]))
            members = [postmaster, *postmaster.children(recursive=True)]
        except (OSError, ValueError, IndexError, psutil.Error):
            return 0.0
        total = 0.0
        for member in members:
            with contextlib.suppress(psutil.Error):
                times = member.cpu_times()
                total += times.user + times.system
        return total
    total = 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if not comm.read_text().startswith("postgres"):
                continue
            fields = (comm.parent / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, ValueError):
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def load_average() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())
