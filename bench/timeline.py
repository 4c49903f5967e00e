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
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import locomo
from bench.live import REPO, BenchServer, Span, span_receiver

UC = "/api/2.1/unity-catalog"
WARMUP = 50


def search(
    server: BenchServer, questions: list[tuple[str, str]], mode: str, count: int, spans: list[Span]
) -> list[float]:
    """Latency (ms) of `count` searches after WARMUP, one at a time over one connection; the
    warm-up's spans are dropped from `spans`."""
    token = server.token()
    conn = http.client.HTTPConnection("127.0.0.1", server.port)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    times = []
    for i in range(WARMUP + count):
        if i == WARMUP:
            time.sleep(1)  # the warm-up's spans exported (every 200 ms), then forgotten
            spans.clear()
        scope, query = questions[i % len(questions)]
        body = json.dumps({"scope": scope, "query": query, "mode": mode, "top_k": 10})
        started = time.perf_counter()
        conn.request("POST", f"{UC}/memory-stores/{locomo.STORE}/entries:search", body=body, headers=headers)
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"search answered {response.status}")
        if i >= WARMUP:
            times.append((time.perf_counter() - started) * 1000)
    conn.close()
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


def main() -> None:
    parser = argparse.ArgumentParser(description="a search's span timeline")
    parser.add_argument("files", nargs="*", type=Path, help="LoCoMo JSON files (their questions)")
    parser.add_argument("--data-dir", type=Path, required=True, help="a store made by bench/locomo.py")
    parser.add_argument("--mode", default="hybrid", choices=["hybrid", "semantic", "keyword"])
    parser.add_argument("--count", type=int, default=400)
    args = parser.parse_args()
    files = args.files or sorted((REPO.parent / "shared/bench/locomo").glob("*.json"))
    if not files:
        print("timeline: no files given and ../shared/bench/locomo/ is not here; pass LoCoMo JSON paths")
        return
    questions = [(scope, q["query"]) for scope, _, qs in map(locomo.load, files) for q in qs]

    def percentiles(times: list[float]) -> str:
        times = sorted(times)
        return f"p50 {times[len(times) // 2]:.2f} ms, p99 {times[int(len(times) * 0.99)]:.2f} ms"

    for name in [k for k in os.environ if k.startswith("OTEL_")]:
        del os.environ[name]  # BenchServer passes the environment on: untraced means no OTEL_ variable
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
