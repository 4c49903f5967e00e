"""Where a search's time goes, step by step: a span timeline of sequential searches.

    .venv/bin/python bench/locomo.py --data-dir D FILE.json ...        # once: a store of conversations
    .venv/bin/python bench/timeline.py --data-dir D [--mode hybrid] [--count 400] [FILE.json ...]

Serves the store in D (`bench/locomo.py`'s) twice. First without tracing: the searches' latency
over one keep-alive `http.client` connection (a lean client: httpx adds about half a millisecond
a request). Then with tracing on (OpenTelemetry's spans sent over OTLP/HTTP to a receiver in this
process, which keeps them): each step's start and end from its request's start, medians over the
searches (a step that runs more than once in a request is numbered). The spans cost time of their
own (the second latency printed), so the timeline says in what order the steps run and which wait
for which; the latency without tracing is the figure to compare. The questions are those of the
LoCoMo files given (by default ../shared/bench/locomo/*.json, where present), in their scopes.

With --against DIR, instead: what a change did to these searches. Two servers, another checkout's
(a git worktree of an earlier commit: `git worktree add /tmp/before <commit>`) on a copy of D and
this tree's on D, each sent every question in turn over one `http.client` connection, `--rounds`
rounds of one block each in alternating order; printed, for each: latency percentiles, and the CPU
of its server's processes and of its PostgreSQL per search, block by block.

    .venv/bin/python bench/timeline.py --data-dir D --against /tmp/before [--rounds 2] [--mode hybrid]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import locomo
from bench.live import REPO, BenchServer, Span, span_receiver
from bench.load import cpu_of_postgres, cpu_of_server, load_average

UC = "/api/2.1/unity-catalog"
WARMUP = 50


class Searcher:
    """One server's keep-alive `http.client` connection (made again when the server closed it
    while the other server had its turn)."""

    def __init__(self, server: BenchServer, mode: str) -> None:
        self.server = server
        self.mode = mode
        self.headers = {"Authorization": f"Bearer {server.token()}", "Content-Type": "application/json"}
        self.conn = http.client.HTTPConnection("127.0.0.1", server.port)

    def search(self, scope: str, query: str) -> float:
        """One search's latency (ms)."""
        body = json.dumps({"scope": scope, "query": query, "mode": self.mode, "top_k": 10})
        target = f"{UC}/memory-stores/{locomo.STORE}/entries:search"
        for attempt in range(2):
            try:
                started = time.perf_counter()
                self.conn.request("POST", target, body=body, headers=self.headers)
                response = self.conn.getresponse()
                break
            except (ConnectionError, http.client.RemoteDisconnected):  # idle too long: once more
                if attempt:
                    raise
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.server.port)
        response.read()
        if response.status != 200:
            raise RuntimeError(f"search answered {response.status}")
        return (time.perf_counter() - started) * 1000


def percentile(times: list[float], q: float) -> float:
    """The `q` quantile of `times` (the value at that share of them, sorted)."""
    ordered = sorted(times)
    return ordered[min(int(len(ordered) * q), len(ordered) - 1)]


def search(
    server: BenchServer, questions: list[tuple[str, str]], mode: str, count: int, spans: list[Span]
) -> list[float]:
    """Latency (ms) of `count` searches after WARMUP, one at a time over one connection; the
    warm-up's spans are dropped from `spans`."""
    searcher = Searcher(server, mode)
    times = []
    for i in range(WARMUP + count):
        if i == WARMUP:
            time.sleep(1)  # the warm-up's spans exported (every 200 ms), then forgotten
            spans.clear()
        took = searcher.search(*questions[i % len(questions)])
        if i >= WARMUP:
            times.append(took)
    searcher.conn.close()
    return times


def timeline(spans: list[Span], requests: int) -> list[tuple[float, float, str, int]]:
    """Each step's median start and end (ms from its request's start), in order of start."""
    traces: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        traces[span[0]].append(span)
    steps: dict[str, tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for trace in traces.values():
        roots = [s for s in trace if not s[4]]
        if not roots:
            continue
        origin = roots[0][2]
        seen: dict[str, int] = defaultdict(int)
        for span in sorted(trace, key=lambda s: s[2]):
            seen[span[1]] += 1
            name = span[1] if seen[span[1]] == 1 else f"{span[1]} #{seen[span[1]]}"
            steps[name][0].append((span[2] - origin) / 1e6)
            steps[name][1].append((span[3] - origin) / 1e6)
    rows = [
        (statistics.median(starts), statistics.median(ends), name, len(starts))
        for name, (starts, ends) in steps.items()
        if len(starts) >= requests // 2  # steps of most requests, not of a few
    ]
    return sorted(rows)


def against(data_dir: Path, other: Path, questions: list[tuple[str, str]], mode: str, rounds: int) -> None:
    """The same searches on `other`'s server (a copy of the store) and this tree's, alternating."""
    copy = Path(tempfile.mkdtemp(prefix="cattimeline")) / "store"
    # `cp -a`: the embedded PostgreSQL's files keep their owner (a copy made as root would not)
    subprocess.run(["cp", "-a", str(data_dir), str(copy)], check=True)
    print(f"load average {load_average()} at the start")
    servers = {str(other): BenchServer(copy, repo=other), "this tree": BenchServer(data_dir)}
    try:
        searchers = {name: Searcher(server, mode) for name, server in servers.items()}
        for i in range(WARMUP):
            for searcher in searchers.values():
                searcher.search(*questions[i % len(questions)])
        times: dict[str, list[float]] = {name: [] for name in servers}
        cpu: dict[str, list[tuple[float, float]]] = {name: [] for name in servers}
        names = list(servers)
        for turn in range(rounds):
            for name in names if turn % 2 == 0 else names[::-1]:
                server = servers[name]
                pgdata = server.data_dir / "postgres"
                served, postgres = cpu_of_server(server.process.pid), cpu_of_postgres(pgdata)
                times[name] += [searchers[name].search(scope, query) for scope, query in questions]
                served = cpu_of_server(server.process.pid) - served
                postgres = cpu_of_postgres(pgdata) - postgres
                cpu[name].append((served * 1000 / len(questions), postgres * 1000 / len(questions)))
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(copy.parent, ignore_errors=True)
    print(f"\n{len(questions)} {mode} searches a block, {rounds} blocks each, alternating; "
          f"load average {load_average()} at the end\n")  # fmt: skip
    print("| server | p50 / p90 / p99 | server CPU per search, by block | PostgreSQL CPU per search |")
    print("|---|---|---|---|")
    for name in names:
        p50, p90, p99 = (percentile(times[name], q) for q in (0.5, 0.9, 0.99))
        served_ms = ", ".join(f"{s:.2f}" for s, _ in cpu[name])
        postgres_ms = ", ".join(f"{p:.2f}" for _, p in cpu[name])
        print(f"| {name} | {p50:.2f} / {p90:.2f} / {p99:.2f} ms | {served_ms} ms | {postgres_ms} ms |")


def main() -> None:
    parser = argparse.ArgumentParser(description="a search's span timeline")
    parser.add_argument("files", nargs="*", type=Path, help="LoCoMo JSON files (their questions)")
    parser.add_argument("--data-dir", type=Path, required=True, help="a store made by bench/locomo.py")
    parser.add_argument("--mode", default="hybrid", choices=["hybrid", "semantic", "keyword"])
    parser.add_argument("--count", type=int, default=400)
    parser.add_argument("--against", type=Path, help="another checkout's server beside this tree's")
    parser.add_argument("--rounds", type=int, default=2, help="with --against: blocks of searches each")
    args = parser.parse_args()
    files = args.files or sorted((REPO.parent / "shared/bench/locomo").glob("*.json"))
    if not files:
        print("timeline: no files given and ../shared/bench/locomo/ is not here; pass LoCoMo JSON paths")
        return
    questions = [(scope, q["query"]) for scope, _, qs in map(locomo.load, files) for q in qs]

    def percentiles(times: list[float]) -> str:
        return f"p50 {percentile(times, 0.5):.2f} ms, p99 {percentile(times, 0.99):.2f} ms"

    for name in [k for k in os.environ if k.startswith("OTEL_")]:
        del os.environ[name]  # BenchServer passes the environment on: untraced means no OTEL_ variable
    if args.against is not None:
        against(args.data_dir, args.against, questions, args.mode, args.rounds)
        return
    spans: list[Span] = []
    server = BenchServer(args.data_dir)
    try:
        plain = search(server, questions, args.mode, args.count, spans)
    finally:
        server.stop()
    with span_receiver(spans) as endpoint:
        server = BenchServer(
            args.data_dir, env={"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "OTEL_BSP_SCHEDULE_DELAY": "200"}
        )
        try:
            traced = search(server, questions, args.mode, args.count, spans)
            time.sleep(3)  # the last batch of spans exported
        finally:
            server.stop()
    print(f"{args.count} {args.mode} searches one after the other: {percentiles(plain)} without tracing,")
    print(f"{percentiles(traced)} with it\n")
    print("| step | start → end (ms from the request's start) | took (ms) | requests |")
    print("|---|---|---:|---:|")
    for start, end, name, n in timeline(spans, args.count):
        print(f"| {name} | {start:.2f} → {end:.2f} | {end - start:.2f} | {n} |")


if __name__ == "__main__":
    main()
