"""What each part of the request path costs, by switching it off: server CPU per request with the
whole path, and with one part at a time made a no-op (in this benchmark's server only).

A sampling profiler names the innermost frame, so a part's round trip to PostgreSQL, its task
switches and the database's own work land in other stages (asyncpg, the event loop, PostgreSQL);
switching the part off measures all of it at once. The parts:

- `audit`: the request's audit event is not appended (the audit writer's own switch, as
  `bench/audit.py` uses it): the event's encoding, its pseudonyms, the batch's statement and the
  wait for its commit, and PostgreSQL's side of the append;
- `log`: no request log line (the `catalog.request` logger disabled);
- `telemetry`: the request's span and duration histogram (`telemetry.http_server`) left out;
- `keys`: the audit writer's keys in memory (`KeyCache`): each event that names a scope reads
  its subject's key with a statement of its own, as a change's event does.

Each configuration is a fresh `catalog serve` (the real model) with one store of 200 short
entries in one scope (`bench/request_floor.py`'s), loaded by two client processes over two
keep-alive connections each (`bench/load.py`); the configurations alternate, round after round,
so that the machine's drift weighs on each alike. Printed: the median of the rounds.

Run: .venv/bin/python bench/parts.py [--count 3000] [--rounds 2] [--off audit log telemetry all]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from bench.live import BenchServer
from bench.load import cpu_of_postgres, cpu_of_server, load, load_average
from bench.request_floor import DETAILS, prepared, searches

HERE = str(Path(__file__).resolve())
PARTS = ("audit", "log", "telemetry", "keys")
ALL = ("audit", "log", "telemetry")  # `all`: every part (the keys are the audit's)


def serve(port: int, off: set[str]) -> int:
    """`catalog serve` with the parts in `off` switched off."""
    from catalog.app import create_app
    from catalog.cli import serve_app
    from catalog.settings import Settings
    from catalog.web.middleware import RequestMiddleware

    if "keys" in off:  # the writer finds no key in memory: every keyed event reads its keys
        from catalog.recorder.pseudonyms import KeyCache

        KeyCache.get = lambda self, subjects: None  # type: ignore[method-assign]
    if "telemetry" in off:  # the seam's wrapper around the middleware's __call__
        RequestMiddleware.__call__ = RequestMiddleware.__call__.__wrapped__  # type: ignore[attr-defined,method-assign]
    app = create_app(Settings.from_env(None, port=port))

    def switch() -> None:
        if "audit" in off:
            app.state.runtime.audit.enabled = False
        if "log" in off:
            logging.getLogger("catalog.request").disabled = True

    return 0 if serve_app(app, "127.0.0.1", port, on_started=switch) else 1


async def measure(off: set[str], count: int) -> dict[str, tuple[float, float]]:
    """(server, PostgreSQL) CPU ms per request of each case, on a fresh server."""
    argv = [HERE, "--serve", ",".join(sorted(off)) or "none"]
    server = BenchServer(argv=argv)
    try:
        token = await prepared(server)
        cases = {"details": DETAILS, "keyword": searches("keyword")}
        figures = {}
        for case, requests in cases.items():
            await load([server.url], token, requests, processes=2, connections=2, count=100)
            pgdata = server.data_dir / "postgres"
            served, postgres = cpu_of_server(server.process.pid), cpu_of_postgres(pgdata)
            report = await load([server.url], token, requests, processes=2, connections=2, count=count)
            served, postgres = cpu_of_server(server.process.pid) - served, cpu_of_postgres(pgdata) - postgres
            assert report.errors == 0, report.first_error
            figures[case] = (served * 1000 / report.requests, postgres * 1000 / report.requests)
        return figures
    finally:
        server.stop()


async def run(count: int, rounds: int, configurations: list[str]) -> None:
    offs = [set[str]()] + [set(ALL) if c == "all" else {c} for c in configurations]
    results: list[list[dict[str, tuple[float, float]]]] = [[] for _ in offs]
    print(
        f"{count} requests a case, two client processes x two keep-alive connections, one worker; "
        f"{rounds} rounds, load average {load_average()} at the start\n",
        flush=True,
    )
    for round_ in range(rounds):
        order = range(len(offs)) if round_ % 2 == 0 else reversed(range(len(offs)))
        for k in order:
            results[k].append(await measure(offs[k], count))
        print(f"round {round_ + 1}/{rounds} done, load average {load_average()}", file=sys.stderr, flush=True)

    def median(k: int, case: str, side: int) -> float:
        return statistics.median(r[case][side] for r in results[k])

    print(
        "| switched off | details: server | PostgreSQL | together | keyword: server | PostgreSQL | together |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for k, off in enumerate(offs):
        label = "nothing (as shipped)" if not off else " + ".join(sorted(off))
        cells = []
        for case in ("details", "keyword"):
            server, postgres = median(k, case, 0), median(k, case, 1)
            together = server + postgres
            base = median(0, case, 0) + median(0, case, 1)
            change = "" if k == 0 else f" ({together - base:+.2f})"
            cells += [f"{server:.2f} ms", f"{postgres:.2f} ms", f"{together:.2f} ms{change}"]
        print(f"| {label} | " + " | ".join(cells) + " |")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=3000, help="requests per case and configuration")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--off",
        nargs="*",
        default=["audit", "log", "telemetry", "keys", "all"],
        choices=[*PARTS, "all"],
        help="the configurations beside the whole path: one part off, or all of them",
    )
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        return serve(args.port, set(args.serve.split(",")) - {"none"})
    asyncio.run(run(args.count, args.rounds, args.off))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
