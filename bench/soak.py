"""Soak: concurrent clients run a mix of writes, gets, lists and searches against a real server for
minutes; errors (goal: none), latency per operation, and the memory of the server and of
PostgreSQL at the start (after a warm-up), the middle and the end (goal: flat after the warm-up).

The server is `catalog serve` on a fresh data dir with its embedded PostgreSQL and the real ONNX
model. The benchmark creates a store, seeds entries over many scopes, then each client sends one
request after another on its own keep-alive connection (a lean HTTP/1.1 client): writes (create,
overwrite, append, edit by str_replace), gets, lists (one scope or three) and searches (hybrid,
keyword and semantic; one scope or three). A client writes only the entries it created, so it
always knows their contents and every request should succeed; reads go to anybody's entries.

Memory, sampled every few seconds (/proc, so Linux only): the server process's RSS and its private
(anonymous) part, and PostgreSQL's processes (the postmaster and all its children). A plain sum
of their RSS is misleading: every process counts each page of the shared memory segment
(shared_buffers and the rest, mapped by all of them) that it has touched, so the sum grows towards
(number of processes) x (shared memory in use) without any memory being added. The table shows
that naive sum and its shared-memory part, then the honest figure: the sum of PSS (each page
divided among the processes mapping it, so the shared segment counts once), split into shared
memory (resident, once) and private memory (heaps: caches, plans, sort memory), where a leak in a
backend would show. Below it, the connections that lived from the first sample to the last:
their private RSS beside their memory as PostgreSQL itself accounts it (all memory contexts, and
the caches among them: catalog and relation caches, prepared statements' plans; dumped to its log
by pg_log_backend_memory_contexts), and the shared memory their RSS counts.

Run: .venv/bin/python bench/soak.py [--duration 300] [--warmup 30] [--clients 32] [--env NAME=VALUE]
`make soak` runs it with the defaults (5 minutes measured); `make bench` runs a smoke check,
`bench/soak.py --duration 30 --warmup 10`. The exit status is 1 if any request failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shlex
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg
import psutil

from bench.audit import Connection
from bench.live import BenchServer
from bench.search import WORDS, pct

UC = "/api/2.1/unity-catalog"
STORE_NAME = "soak"
STORE = f"{UC}/memory-stores/main.default.{STORE_NAME}"
MB = 1024 * 1024
MAX_CONTENTS = 3000  # an entry grown past this by appends is overwritten (bounded entry sizes)

# operation -> weight in the mix: about 30% writes, 30% gets, 10% lists, 30% searches
MIX = {
    "create": 8,
    "overwrite": 7,
    "append": 7,
    "edit": 8,
    "get": 30,
    "list": 10,
    "search hybrid": 10,
    "search keyword": 10,
    "search semantic": 10,
}


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 24)))


@dataclass
class Owned:
    """An entry as its only writer knows it: the contents start with a `status: sN;` line that
    edits replace (str_replace needs exactly one occurrence)."""

    scope: str
    path: str
    status: int
    body: str

    @property
    def contents(self) -> str:
        return f"status: s{self.status};\n{self.body}"


@dataclass
class Stats:
    latencies: dict[str, list[float]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    total: int = 0

    def record(self, op: str, seconds: float, status: int, answer: bytes) -> None:
        self.total += 1
        self.latencies.setdefault(op, []).append(seconds * 1000)
        if status != 200:
            try:
                code = json.loads(answer).get("error_code", "?")
            except ValueError:
                code = "not JSON"
            key = f"{op}: {status} {code}"
            self.errors[key] += 1
            self.examples.setdefault(key, answer[:300].decode(errors="replace"))

    def failed(self, op: str, exc: BaseException) -> None:
        self.total += 1
        key = f"{op}: {type(exc).__name__}"
        self.errors[key] += 1
        self.examples.setdefault(key, str(exc)[:300])


class Client:
    def __init__(self, number: int, conn: Connection, scopes: list[str], shared: list[tuple[str, str]]):
        self.number = number
        self.conn = conn
        self.scopes = scopes
        self.shared = shared  # (scope, path) of every entry written so far, for reads
        self.owned: list[Owned] = []
        self.rng = random.Random(number)
        self.created = 0

    async def call(self, stats: Stats | None, op: str, method: str, target: str, body: object = None) -> int:
        data = None if body is None else json.dumps(body).encode()
        started = time.perf_counter()
        try:
            status, answer = await self.conn.request(method, target, data)
        except Exception as exc:  # refused, reset, or an answer the lean client cannot read: a failure
            if stats is not None:
                stats.failed(op, exc)
            await self.conn.close()
            return 0
        if stats is not None:
            stats.record(op, time.perf_counter() - started, status, answer)
        return status

    async def create(self, stats: Stats | None) -> None:
        entry = Owned(
            self.rng.choice(self.scopes), f"/c{self.number}/n{self.created}.md", 0, sentence(self.rng)
        )
        self.created += 1
        body = {"path": entry.path, "contents": entry.contents, "description": sentence(self.rng)[:60]}
        if await self.call(stats, "create", "POST", f"{STORE}/entries?scope={entry.scope}", body) == 200:
            self.owned.append(entry)
            self.shared.append((entry.scope, entry.path))

    async def step(self, stats: Stats) -> None:
        op = self.rng.choices(list(MIX), weights=list(MIX.values()))[0]
        if op in ("overwrite", "append", "edit") and not self.owned:
            op = "create"
        if op == "create":
            await self.create(stats)
        elif op in ("overwrite", "append", "edit"):
            # appends keep growing the entry written last until it is too long, then overwrite
            # it (entries stay under MAX_CONTENTS); the other writes pick any entry of this client
            entry = self.owned[-1] if op == "append" else self.rng.choice(self.owned)
            if op == "append" and len(entry.contents) > MAX_CONTENTS:
                op = "overwrite"
            await self.write(stats, op, entry)
        elif op == "get":
            scope, path = self.rng.choice(self.shared)
            await self.call(stats, op, "GET", f"{STORE}/entries:get?scope={scope}&path={quote(path)}")
        elif op == "list":
            await self.call(stats, op, "GET", f"{STORE}/entries?{self.scope_query()}&page_size=20")
        else:
            body: dict[str, object] = {
                "query": " ".join(self.rng.sample(WORDS, 3)),
                "mode": op.split()[1],
                "top_k": 10,
            }
            scopes = self.pick_scopes()
            body.update({"scope": scopes[0]} if len(scopes) == 1 else {"scopes": scopes})
            await self.call(stats, op, "POST", f"{STORE}/entries:search", body)

    async def write(self, stats: Stats, op: str, entry: Owned) -> None:
        """Write one of this client's entries; what it knows of the entry changes only with a 200."""
        target = f"{STORE}/entries?scope={entry.scope}"
        if op == "overwrite":
            fresh = Owned(entry.scope, entry.path, entry.status + 1, sentence(self.rng))
            body: dict[str, object] = {
                "path": entry.path,
                "contents": fresh.contents,
                "write_mode": "OVERWRITE",
            }
            if await self.call(stats, op, "POST", target, body) == 200:
                entry.status, entry.body = fresh.status, fresh.body
        elif op == "append":
            line = sentence(self.rng)
            body = {"path": entry.path, "contents": line, "write_mode": "APPEND"}
            if await self.call(stats, op, "POST", target, body) == 200:
                entry.body += "\n" + line
        else:
            old = f"status: s{entry.status};"
            body = {
                "scope": entry.scope,
                "path": entry.path,
                "str_replace": {"old_str": old, "new_str": f"status: s{entry.status + 1};"},
            }
            if await self.call(stats, op, "PATCH", f"{STORE}/entries", body) == 200:
                entry.status += 1
        self.owned.remove(entry)  # the entry written last goes to the end
        self.owned.append(entry)

    def pick_scopes(self) -> list[str]:
        return self.rng.sample(self.scopes, 3) if self.rng.random() < 0.25 else [self.rng.choice(self.scopes)]

    def scope_query(self) -> str:
        scopes = self.pick_scopes()
        if len(scopes) == 1:
            return f"scope={scopes[0]}"
        return "&".join(f"scopes={s}" for s in scopes)


# --- memory -------------------------------------------------------------------------------------


def _proc_kb(pid: int, name: str, keys: tuple[str, ...]) -> dict[str, int]:
    """Fields in kB from /proc/<pid>/status or /proc/<pid>/smaps_rollup, as bytes."""
    values = {}
    with open(f"/proc/{pid}/{name}") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in keys:
                values[key] = int(rest.split()[0]) * 1024
    return values


@dataclass
class ProcessMemory:
    """Bytes. `rss_anon`: private memory (heap, stacks); `rss_shmem`: pages of shared memory this
    process has touched; the `pss` figures divide each page among the processes mapping it."""

    pid: int
    kind: str
    rss: int
    rss_anon: int
    rss_shmem: int
    pss: int
    pss_anon: int
    pss_shmem: int


def measure_process(pid: int, kind: str) -> ProcessMemory | None:
    try:
        status = _proc_kb(pid, "status", ("VmRSS", "RssAnon", "RssShmem"))
        rollup = _proc_kb(pid, "smaps_rollup", ("Pss", "Pss_Anon", "Pss_Shmem"))
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None  # ended meanwhile (an autovacuum worker, say)
    return ProcessMemory(
        pid,
        kind,
        status["VmRSS"],
        status["RssAnon"],
        status["RssShmem"],
        rollup["Pss"],
        rollup["Pss_Anon"],
        rollup["Pss_Shmem"],
    )


def postgres_kind(process: psutil.Process) -> str:
    """`connection` for a client backend (its title names the database and the socket), else the
    auxiliary process's title (checkpointer, walwriter, autovacuum worker...)."""
    try:
        title = " ".join(process.cmdline()).removeprefix("postgres: ").strip()
    except psutil.Error:
        return "gone"
    return "connection" if "[local]" in title else title


@dataclass
class Contexts:
    """A backend's memory as PostgreSQL accounts it (bytes): all its memory contexts, the
    CacheMemoryContext subtree (catalog and relation caches and saved plans: what a long-lived
    connection accumulates), and the prepared statements' plans within it."""

    total: int = 0
    caches: int = 0
    plans: int = 0
    statements: int = 0
    hidden: int = 0  # children of CacheMemoryContext summed up without names (plans among them)


_LOG_LINE = re.compile(r"\[(\d+)\] LOG:  (.*)")
_CONTEXT = re.compile(r"level: (\d+); (?:(.+?): |(\d+) more child contexts containing )(\d+) total in")
_GRAND_TOTAL = re.compile(r"Grand total: (\d+) bytes")
_PLAN_CONTEXTS = ("CachedPlanSource", "CachedPlanQuery", "CachedPlan")


def parse_contexts(text: str, pids: set[int]) -> dict[int, Contexts]:
    """`pg_log_backend_memory_contexts` output of these backends (interleaved lines, one context
    a line, depth-first; a parent lists at most 100 children, then one line at its own level
    summing up the others); only the backends whose dump is complete."""
    found: dict[int, Contexts] = {}
    partial: dict[int, tuple[Contexts, str]] = {}
    for line in text.splitlines():
        match = _LOG_LINE.search(line)
        if match is None or int(match[1]) not in pids:
            continue
        pid, message = int(match[1]), match[2]
        if message.startswith("logging memory contexts"):
            partial[pid] = (Contexts(), "")
            continue
        if pid not in partial:
            continue
        contexts, top = partial[pid]
        if grand := _GRAND_TOTAL.match(message):
            contexts.total = int(grand[1])
            found[pid] = contexts
            del partial[pid]
        elif context := _CONTEXT.match(message):
            level, name, size = int(context[1]), context[2] or "", int(context[4])
            if level == 1 and name:
                top = name
                partial[pid] = (contexts, top)
            if top == "CacheMemoryContext" and level >= 1:
                contexts.caches += size
                if name in _PLAN_CONTEXTS:
                    contexts.plans += size
                    contexts.statements += name == "CachedPlanSource"
                if level == 1 and context[3]:  # a summary stands at its parent's level
                    contexts.hidden += int(context[3])
    return found


class Monitor:
    """The benchmark's own connection to PostgreSQL (left out of the figures): settings, the
    number of entries, and the connections' memory contexts (PostgreSQL writes them to its log)."""

    def __init__(self, conn: asyncpg.Connection, log: Path) -> None:
        self.conn = conn
        self.log = log
        self.pid = conn.get_server_pid()

    async def settings(self) -> dict[str, str]:
        return {
            name: str(await self.conn.fetchval(f"SHOW {name}"))
            for name in ("server_version", "shared_buffers", "shared_memory_size", "work_mem")
        }

    async def entries(self) -> tuple[int, int]:
        """Entries, and how many of them wait for their vector (searches in their scopes wait too)."""
        row = await self.conn.fetchrow(
            "SELECT count(*), count(*) FILTER (WHERE embedded_version IS DISTINCT FROM version) FROM entries"
        )
        return int(row[0]), int(row[1])

    async def contexts(self, pids: list[int]) -> dict[int, Contexts]:
        offset = self.log.stat().st_size
        await self.conn.execute(
            "SELECT pg_log_backend_memory_contexts(pid) FROM unnest($1::int[]) AS pid", pids
        )
        deadline = time.monotonic() + 5  # a backend logs at its next interrupt check: busy or idle, soon
        while True:
            with self.log.open("rb") as f:
                f.seek(offset)
                found = parse_contexts(f.read().decode(errors="replace"), set(pids))
            if len(found) == len(pids) or time.monotonic() > deadline:
                return found
            await asyncio.sleep(0.2)


@dataclass
class Sample:
    label: str
    elapsed: float
    requests: int
    server: ProcessMemory
    postgres: list[ProcessMemory]
    contexts: dict[int, Contexts] = field(default_factory=dict)

    def pg(self, attribute: str, kind: str | None = None, *, other: bool = False) -> int:
        """A sum over PostgreSQL's processes (of one kind, or all but that kind)."""
        return sum(getattr(p, attribute) for p in self.postgres if kind is None or (p.kind == kind) != other)

    def connections(self) -> list[ProcessMemory]:
        return [p for p in self.postgres if p.kind == "connection"]


def sample_memory(
    server_pid: int, postmaster: int, monitor_pid: int
) -> tuple[ProcessMemory, list[ProcessMemory]]:
    server = measure_process(server_pid, "server")
    assert server is not None, "the server process ended"
    children = [
        (child.pid, postgres_kind(child))
        for child in psutil.Process(postmaster).children()
        if child.pid != monitor_pid
    ]
    measured = [measure_process(pid, kind) for pid, kind in [(postmaster, "postmaster"), *children]]
    return server, [m for m in measured if m is not None]


async def take_sample(
    server: BenchServer, postmaster: int, monitor: Monitor, label: str, elapsed: float, requests: int
) -> Sample:
    server_memory, postgres = await asyncio.to_thread(
        sample_memory, server.process.pid, postmaster, monitor.pid
    )
    sample = Sample(label, elapsed, requests, server_memory, postgres)
    sample.contexts = await monitor.contexts([p.pid for p in sample.connections()])
    return sample


# --- the run ------------------------------------------------------------------------------------


@dataclass
class Run:
    stats: Stats
    samples: list[Sample]
    settings: dict[str, str]
    entries: tuple[tuple[int, int], tuple[int, int]]  # (entries, waiting for a vector) at start, end
    elapsed: float
    load: tuple[float, float]
    behind: int  # searches that could not embed their scopes' rows lacking vectors themselves (degraded)


async def seed(clients: list[Client], per_client: int) -> None:
    async def fill(client: Client) -> None:
        for _ in range(per_client):
            await client.create(None)

    await asyncio.gather(*(fill(client) for client in clients))


async def drive(clients: list[Client], stats: Stats, until: float) -> None:
    async def loop(client: Client) -> None:
        while time.monotonic() < until:
            await client.step(stats)

    await asyncio.gather(*(loop(client) for client in clients))


def progress(s: Sample, rate: float, errors: int) -> None:
    print(
        f"{s.elapsed:5.0f} s: {rate:4.0f} req/s, errors {errors}, server RSS {s.server.rss / MB:.0f} MB; "
        f"PostgreSQL {len(s.postgres)} processes: RSS sum {s.pg('rss') / MB:.0f} MB, PSS sum "
        f"{s.pg('pss') / MB:.0f} MB (shared once {s.pg('pss_shmem') / MB:.0f}, private "
        f"{s.pg('pss_anon') / MB:.0f}), connections' contexts "
        f"{sum(c.total for c in s.contexts.values()) / MB:.1f} MB",
        file=sys.stderr,
        flush=True,
    )


async def soak(args: argparse.Namespace) -> Run:
    server = BenchServer(env=dict(item.split("=", 1) for item in args.env))
    try:
        token = server.token()
        scopes = [f"user-{i}" for i in range(args.scopes)]
        shared: list[tuple[str, str]] = []
        clients = [Client(i, Connection(server.url, token), scopes, shared) for i in range(args.clients)]
        store = {"name": STORE_NAME, "catalog_name": "main", "schema_name": "default"}
        status = await clients[0].call(None, "store", "POST", f"{UC}/memory-stores", store)
        assert status == 200, f"creating the store answered {status}"
        await seed(clients, max(1, args.seed // args.clients))
        print(
            f"seeded {len(shared)} entries; warming up for {args.warmup:.0f} s", file=sys.stderr, flush=True
        )
        await drive(clients, Stats(), time.monotonic() + args.warmup)

        monitor = Monitor(await asyncpg.connect(server.db_url()), server.data_dir / "postgres" / "log")
        postmaster = int((server.data_dir / "postgres" / "postmaster.pid").read_text().split()[0])
        settings, first_entries = await monitor.settings(), await monitor.entries()
        stats = Stats()
        samples: list[Sample] = []
        load_before = os.getloadavg()[0]
        server_log = server.data_dir / "server.log"
        log_offset = server_log.stat().st_size
        started = time.monotonic()
        until = started + args.duration

        async def sampler() -> None:
            while True:
                elapsed = time.monotonic() - started
                label = "start" if not samples else ("end" if elapsed >= args.duration - 0.1 else "")
                sample = await take_sample(server, postmaster, monitor, label, elapsed, stats.total)
                rate = (
                    (sample.requests - samples[-1].requests) / (elapsed - samples[-1].elapsed)
                    if samples
                    else 0
                )
                samples.append(sample)
                progress(sample, rate, sum(stats.errors.values()))
                if label == "end":
                    return
                await asyncio.sleep(min(args.sample_every, max(0.0, until - time.monotonic())))

        sampling = asyncio.create_task(sampler())
        await drive(clients, stats, until)
        elapsed = time.monotonic() - started
        await sampling
        load_after = os.getloadavg()[0]
        last_entries = await monitor.entries()
        await monitor.conn.close()
        for client in clients:
            await client.conn.close()
        with server_log.open("rb") as f:
            f.seek(log_offset)
            behind = (
                f.read()
                .decode(errors="replace")
                .count("rows without vectors could not be embedded by the search")
            )
    finally:
        server.stop()
    entries = (first_entries, last_entries)
    return Run(stats, samples, settings, entries, elapsed, (load_before, load_after), behind)


# --- the report ---------------------------------------------------------------------------------


def middle(samples: list[Sample]) -> Sample:
    half = samples[-1].elapsed / 2
    chosen = min(samples[1:-1] or samples, key=lambda s: abs(s.elapsed - half))
    chosen.label = "middle"
    return chosen


def mb(value: float) -> str:
    return f"{value / MB:.0f}"


def report(args: argparse.Namespace, run: Run) -> None:
    stats, samples, pg = run.stats, run.samples, run.settings
    first, last = run.entries
    print(f"command: {shlex.join(['.venv/bin/python', 'bench/soak.py', *sys.argv[1:]])}\n")
    print(
        f"{args.clients} clients, one keep-alive connection each, {run.elapsed:.0f} s after a "
        f"{args.warmup:.0f} s warm-up; {args.scopes} scopes; entries (waiting for their vector) "
        f"{first[0]:,} ({first[1]:,}) at the start, {last[0]:,} ({last[1]:,}) at the end; real ONNX model; "
        f"PostgreSQL {pg['server_version'].split()[0]}, "
        f"shared_buffers {pg['shared_buffers']} (shared memory {pg['shared_memory_size']}), work_mem "
        f"{pg['work_mem']}; {os.cpu_count()} cores, load average {run.load[0]:.1f} at the start and "
        f"{run.load[1]:.1f} at the end"
        + (f"; server environment {' '.join(args.env)}" if args.env else "")
        + "\n"
    )
    errors = ", ".join(f"{key} x{n}" for key, n in stats.errors.most_common()) or "none"
    print(
        f"{stats.total:,} requests, {stats.total / run.elapsed:.0f} req/s; errors: {errors}; searches that "
        "could not embed the rows of their scopes still lacking vectors (and searched those there were): "
        f"{run.behind:,}\n"
    )
    for key, example in stats.examples.items():
        print(f"    {key}: {example}", file=sys.stderr)
    print("| operation | requests | errors | p50 (ms) | p99 (ms) |")
    print("|---|---|---|---|---|")
    for op in MIX:
        values = stats.latencies.get(op, [])
        failed = sum(n for key, n in stats.errors.items() if key.startswith(f"{op}:"))
        if values:
            p50, p99 = statistics.median(values), pct(values, 0.99)
            print(f"| {op} | {len(values):,} | {failed} | {p50:.1f} | {p99:.1f} |")
    every = [v for values in stats.latencies.values() for v in values]
    p50, p99 = statistics.median(every), pct(every, 0.99)
    print(f"| all | {len(every):,} | {sum(stats.errors.values())} | {p50:.1f} | {p99:.1f} |\n")

    chosen = [samples[0], middle(samples), samples[-1]]
    print(
        "Memory (MB). PostgreSQL: the postmaster and all its processes. Naive: their RSS summed, which\n"
        "counts a page of shared memory once for every process that touched it. Honest: their PSS\n"
        "summed (shared memory once), then split into shared memory and private memory.\n"
    )
    print(
        "| when | server RSS | server private | PG processes | PG RSS sum (naive) | of which shared memory "
        "| PG PSS sum (honest) | shared memory | private, connections | private, others |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for s in chosen:
        print(
            f"| {s.label} ({s.elapsed:.0f} s) | {mb(s.server.rss)} | {mb(s.server.rss_anon)} "
            f"| {len(s.postgres)} ({len(s.connections())} connections) | {mb(s.pg('rss'))} "
            f"| {mb(s.pg('rss_shmem'))} | {mb(s.pg('pss'))} | {mb(s.pg('pss_shmem'))} "
            f"| {mb(s.pg('pss_anon', 'connection'))} | {mb(s.pg('pss_anon', 'connection', other=True))} |"
        )

    # connections measured at the three samples (the pool keeps them unless one fails or idles)
    lasting = {p.pid for p in samples[0].connections()} & {p.pid for p in samples[-1].connections()}
    for s in chosen:
        lasting &= set(s.contexts)
    if not lasting:
        return
    print(
        f"\nThe {len(lasting)} PostgreSQL connections that lived from the start to the end (MB; memory "
        "contexts as PostgreSQL accounts them, pg_log_backend_memory_contexts):\n"
    )
    print(
        "| when | private RSS | memory contexts | of which caches (CacheMemoryContext) | of which plans "
        "(prepared statements) | shared memory in their RSS |"
    )
    print("|---|---|---|---|---|---|")
    for s in chosen:
        mine = [p for p in s.connections() if p.pid in lasting]
        contexts = [s.contexts[pid] for pid in lasting]
        print(
            f"| {s.label} | {mb(sum(p.rss_anon for p in mine))} "
            f"| {sum(c.total for c in contexts) / MB:.1f} | {sum(c.caches for c in contexts) / MB:.1f} "
            f"| {'≥ ' if any(c.hidden for c in contexts) else ''}{sum(c.plans for c in contexts) / MB:.1f} "
            f"({sum(c.statements for c in contexts)}) "
            f"| {mb(sum(p.rss_shmem for p in mine))} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description="soak: a mixed load for minutes; errors, latency, memory")
    parser.add_argument("--duration", type=float, default=300, help="seconds measured (default 300)")
    parser.add_argument("--warmup", type=float, default=30, help="seconds of load before the first sample")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--scopes", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1000, help="entries written before the warm-up")
    parser.add_argument("--sample-every", type=float, default=10, help="seconds between memory samples")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for the server (and its PostgreSQL), e.g. MALLOC_ARENA_MAX=2",
    )
    args = parser.parse_args()
    if not sys.platform.startswith("linux"):
        parser.error("memory is read from /proc: Linux only")
    if min(args.duration, args.clients, args.sample_every) <= 0 or args.warmup < 0 or args.scopes < 3:
        parser.error("--duration, --clients and --sample-every must be positive, --scopes at least 3")
    if any("=" not in item for item in args.env):
        parser.error("--env takes NAME=VALUE")
    run = asyncio.run(soak(args))
    report(args, run)
    return 1 if run.stats.errors else 0


if __name__ == "__main__":
    sys.exit(main())
