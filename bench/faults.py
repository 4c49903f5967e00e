"""Faults under load: kill -9 of the server, of the embedded PostgreSQL, or of both, while 8
clients write entries; then every write that was answered 200 is looked for (read back, keyword
search, semantic search) and the audit chain is verified.

Per round it reports: writes acknowledged, acknowledged writes lost, what the clients saw
(503 JSON, connection errors, anything else), how long until writes were acknowledged again
after the fault, and how long a restarted server took to listen. It also counts PostgreSQL's WAL
flushes during sequential writes (each acknowledged change must have waited for one).

Run: .venv/bin/python bench/faults.py [--rounds N] [--faults server,postgres,both] [--seconds S]
(real ONNX model, a fresh data dir per round; about a minute per round).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import asyncpg
import httpx

from bench.live import BenchServer

UC = "/api/2.1/unity-catalog"
STORE = "main.default.faults"
WRITERS = 8


def postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "postgres" / "postmaster.pid").read_text().splitlines()[0])


class Load:
    """WRITERS threads writing distinct entries; what was answered 200 is kept, with its time."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token
        self.acked: list[tuple[str, str, str, float]] = []  # scope, path, contents, when it was sent
        self.last_failure = 0.0  # when the last write that failed was sent
        self.seen: Counter[str] = Counter()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(n,), daemon=True) for n in range(WRITERS)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def point_at(self, url: str) -> None:
        with self.lock:
            self.url = url

    def run(self, n: int) -> None:
        i = 0
        while not self.stop.is_set():
            with self.lock:
                url = self.url
            path = f"/w{n}/e{i}.md"
            contents = f"Writer {n} entry {i}: token qz{n}y{i}w about the quarterly planning meeting."
            sent = time.monotonic()
            try:
                r = httpx.post(
                    f"{url}{UC}/memory-stores/{STORE}/entries",
                    params={"scope": f"writer-{n}"},
                    json={"path": path, "contents": contents},
                    headers={"Authorization": f"Bearer {self.token}"},
                    timeout=30,
                )
            except httpx.TransportError as exc:
                with self.lock:
                    self.seen[f"connection error ({type(exc).__name__})"] += 1
                    self.last_failure = max(self.last_failure, sent)
                time.sleep(0.05)
                i += 1
                continue
            with self.lock:
                if r.status_code == 200:
                    self.acked.append((f"writer-{n}", path, contents, sent))
                else:
                    self.last_failure = max(self.last_failure, sent)
                    try:
                        code = r.json()["error_code"]
                    except (ValueError, KeyError):
                        code = "not JSON"
                    self.seen[f"{r.status_code} {code}"] += 1
            if r.status_code != 200:
                time.sleep(0.05)
            i += 1

    def count(self) -> int:
        with self.lock:
            return len(self.acked)


def lost_writes(url: str, token: str, acked: list[tuple[str, str, str, float]]) -> int:
    lost = 0
    reasons: Counter[str] = Counter()
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        for scope, path, contents, _ in acked:
            r = http.get(f"{UC}/memory-stores/{STORE}/entries:get", params={"scope": scope, "path": path})
            ok = r.status_code == 200 and r.json()["contents"] == contents
            if not ok:
                reasons[f"get {r.status_code}"] += 1
            word = contents.split("token ")[1].split()[0]
            r = http.post(
                f"{UC}/memory-stores/{STORE}/entries:search",
                json={"scope": scope, "query": word, "mode": "keyword", "top_k": 3},
            )
            if path not in [h["memory_entry"]["path"] for h in r.json()["results"]]:
                ok = False
                reasons["keyword"] += 1
            r = http.post(
                f"{UC}/memory-stores/{STORE}/entries:search",
                json={"scope": scope, "query": contents, "mode": "semantic", "top_k": 1, "path_prefix": path},
            )
            if [h["memory_entry"]["path"] for h in r.json()["results"]] != [path]:
                ok = False
                reasons["semantic"] += 1
            lost += not ok
    if reasons:
        print(f"  lost: {dict(reasons)}", file=sys.stderr)
    return lost


def wait_healthy(url: str, deadline: float) -> bool:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        try:
            if httpx.get(f"{url}/healthz", timeout=10).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    return False


def recovery_seconds(load: Load, faulted: float) -> float | None:
    """From the fault to the first acknowledged write sent after the last failed one."""
    with load.lock:
        after = [a[3] for a in load.acked if a[3] > max(load.last_failure, faulted)]
    return min(after) - faulted if after and load.last_failure >= faulted else None


def start_server(data_dir: Path) -> tuple[BenchServer, float]:
    began = time.monotonic()
    server = BenchServer(data_dir=data_dir)
    return server, time.monotonic() - began


def one_round(fault: str, seconds: float) -> dict[str, object]:
    data_dir = Path(tempfile.mkdtemp(prefix="faults"))
    server, _ = start_server(data_dir)
    token = server.token()
    httpx.post(
        f"{server.url}{UC}/memory-stores",
        headers={"Authorization": f"Bearer {token}"},
        json={"name": "faults", "catalog_name": "main", "schema_name": "default"},
        timeout=30,
    ).raise_for_status()
    load = Load(server.url, token)
    load.start()
    time.sleep(seconds)
    restart = None
    pid = postmaster_pid(data_dir)
    faulted = time.monotonic()
    if fault in ("server", "both"):
        server.process.kill()
    if fault in ("postgres", "both"):
        os.kill(pid, signal.SIGKILL)
    if fault != "postgres":
        server.process.wait(30)
        server.log.close()
        server, restart = start_server(data_dir)
        load.point_at(server.url)
    healthy = wait_healthy(server.url, 120)
    time.sleep(seconds)
    load.finish()
    recovery = recovery_seconds(load, faulted) if healthy else None
    lost = lost_writes(server.url, token, load.acked)
    verify = server_cli(server, "audit", "verify")
    started = [line for line in (data_dir / "server.log").read_text().splitlines() if '"started"' in line]
    server.stop()
    if lost:
        print(f"  kept {data_dir} (writes were lost)", file=sys.stderr)
    else:
        shutil.rmtree(data_dir, ignore_errors=True)
    return {
        "fault": fault,
        "acked": len(load.acked),
        "lost": lost,
        "seen": dict(load.seen),
        "recovery": recovery,
        "restart": restart,
        "audit": verify.strip(),
        "start_up": started[-1] if started else None,
    }


def server_cli(server: BenchServer, *args: str) -> str:
    import subprocess

    out = subprocess.run(
        [sys.executable, "-m", "catalog", *args], env=server.env, capture_output=True, text=True, check=False
    )
    return out.stdout or out.stderr


async def wal_flushes_per_write(writes: int) -> tuple[float, float]:
    """(WAL flushes per acknowledged write, writes/s) for sequential writes on a fresh server."""
    server = BenchServer()
    try:
        token = server.token()
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=server.url, headers=headers, timeout=30) as http:
            await http.post(
                f"{UC}/memory-stores",
                json={"name": "faults", "catalog_name": "main", "schema_name": "default"},
            )
            db = await asyncpg.connect(server.db_url())
            try:
                await db.execute("SELECT pg_stat_reset_shared('wal')")
                await asyncio.sleep(1.2)
                before = await wal_flushes(db)
                began = time.monotonic()
                for i in range(writes):
                    r = await http.post(
                        f"{UC}/memory-stores/{STORE}/entries",
                        params={"scope": "seq"},
                        json={"path": f"/s{i}.md", "contents": f"sequential write {i}"},
                    )
                    r.raise_for_status()
                elapsed = time.monotonic() - began
                await asyncio.sleep(1.5)  # statistics are flushed about once a second
                after = await wal_flushes(db)
            finally:
                await db.close()
        return (after - before) / writes, writes / elapsed
    finally:
        server.stop()
        shutil.rmtree(server.data_dir, ignore_errors=True)


async def wal_flushes(db: asyncpg.Connection) -> int:
    """How many times PostgreSQL has flushed its WAL to disk: `pg_stat_wal.wal_sync` up to
    PostgreSQL 17, the WAL's fsyncs in `pg_stat_io` from 18 (which moved them there)."""
    if await db.fetchval("SELECT current_setting('server_version_num')::int") < 180000:
        return int(await db.fetchval("SELECT wal_sync FROM pg_stat_wal"))
    return int(await db.fetchval("SELECT coalesce(sum(fsyncs), 0) FROM pg_stat_io WHERE object = 'wal'"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1, help="rounds per fault (default 1)")
    parser.add_argument("--faults", default="server,postgres,both")
    parser.add_argument("--seconds", type=float, default=4.0, help="writing before and after the fault")
    parser.add_argument("--wal-writes", type=int, default=300)
    args = parser.parse_args()
    print(f"command: .venv/bin/python bench/faults.py {' '.join(sys.argv[1:])}".rstrip())
    rows = []
    for fault in args.faults.split(","):
        for _ in range(args.rounds):
            rows.append(one_round(fault.strip(), args.seconds))
            print(f"  {rows[-1]}", file=sys.stderr, flush=True)
    print()
    print(
        "| kill -9 of | writes acknowledged | acknowledged writes lost | clients saw besides 200 "
        "| writes acknowledged again after | restarted server listening after | audit chain |"
    )
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        seen = ", ".join(f"{n:,} x {k}" for k, n in sorted(row["seen"].items())) or "nothing"  # type: ignore[attr-defined]
        recovery = f"{row['recovery']:.1f} s" if row["recovery"] is not None else "no failure seen / never"
        restart = f"{row['restart']:.1f} s" if row["restart"] is not None else "(no restart)"
        print(
            f"| {row['fault']} | {row['acked']:,} | {row['lost']} | {seen} | {recovery} | {restart} "
            f"| {row['audit']} |"
        )
    flushes, rate = asyncio.run(wal_flushes_per_write(args.wal_writes))
    print()
    print(
        f"WAL flushes per acknowledged write, {args.wal_writes} sequential writes: {flushes:.2f} "
        f"({rate:.0f} writes/s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
