"""Run every test alone: one pytest process per test (so no other test ran before it, and it gets
the module fixtures to itself), and print one line per test and a summary.

    .venv/bin/python tests/run_each_alone.py [-j JOBS] [pytest arguments that select tests...]

With no arguments it runs every test the suite collects. Exits 1 if any test failed alone.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider"]


def collect(selection: list[str]) -> list[str]:
    done = subprocess.run(
        [*PYTEST, "--collect-only", "-q", *selection], cwd=REPO, capture_output=True, text=True
    )
    if done.returncode != 0:
        sys.exit(f"collection failed:\n{done.stdout}{done.stderr}")
    return [line for line in done.stdout.splitlines() if "::" in line and not line.startswith(" ")]


def run(node_id: str) -> tuple[str, bool, float, str]:
    began = time.monotonic()
    done = subprocess.run([*PYTEST, "-q", node_id], cwd=REPO, capture_output=True, text=True)
    lines = done.stdout.strip().splitlines()
    passed = done.returncode == 0 and bool(lines) and " passed" in lines[-1] and "failed" not in lines[-1]
    return node_id, passed, time.monotonic() - began, done.stdout[-4000:] + done.stderr[-2000:]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-j", "--jobs", type=int, default=2, help="tests run at once (default 2)")
    parser.add_argument("selection", nargs="*", help="what to collect (default: the whole suite)")
    args = parser.parse_args()
    node_ids = collect(args.selection)
    print(f"{len(node_ids)} tests, each alone, {args.jobs} at a time", flush=True)
    began = time.monotonic()
    failed: list[tuple[str, str]] = []
    with ThreadPoolExecutor(args.jobs) as pool:
        for node_id, passed, seconds, output in pool.map(run, node_ids):
            print(f"{'PASS' if passed else 'FAIL'} {seconds:6.1f}s {node_id}", flush=True)
            if not passed:
                failed.append((node_id, output))
    for node_id, output in failed:
        print(f"\n=== {node_id}\n{output}")
    minutes = (time.monotonic() - began) / 60
    print(f"\n{len(node_ids) - len(failed)} passed alone, {len(failed)} failed alone, in {minutes:.1f} min")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
