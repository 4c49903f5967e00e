"""A rolling restart fails no request: on SIGTERM `catalog serve` answers `/healthz` 503
`draining` at once while it goes on serving (each answer with `Connection: close`), for
`CATALOG_DRAIN_SECONDS`; then it closes its listening socket, finishes the requests in progress,
lets go of its background work (a last full-text index commit, its embedding claims) and exits 0.

The load balancer is played by the test: a thread checks `/healthz` of the node being stopped on
a fresh connection every `CHECK` seconds and takes it out of rotation after `FALL` failed checks
(as HAProxy's `inter` and `fall` do); the writers send each request to the node in rotation, and
a refused connection is sent again to the other node (HAProxy's `option redispatch`).

And `/healthz` reports a full-text index that is behind its change log, without failing for it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from rest import UC

from catalog.db import running_url
from catalog.runtime import EMBEDDED_DATABASE
from catalog.search.indexer import WATERMARK_FILE

STORE = "main.default.drain"
ENTRIES = f"{UC}/memory-stores/{STORE}/entries"
WRITERS = 4
DRAIN_SECONDS = 4.0  # of the node stopped: many times what the checks below take to see it
CHECK = 0.2  # seconds between two health checks
FALL = 3  # failed checks in a row that take a node out of rotation
WAIT = 60.0  # a bound for each wait of the test, not a speed claim


def wait_until(condition: Any, what: str, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


class Balancer:
    """Health checks of one node (`watched`) and the rotation: `pick()` is that node while it is
    in rotation, else the other one."""

    def __init__(self, watched: str, other: str) -> None:
        self.watched, self.other = watched, other
        self.in_rotation = True
        self.checks: list[tuple[int | None, dict[str, Any]]] = []  # (status or None: refused, body)
        self.draining_seen = threading.Event()  # a check answered 503 "draining"
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        failed = 0
        while not self.stop.is_set():
            try:
                r = httpx.get(f"{self.watched}/healthz", timeout=5)  # a connection of its own
                check: tuple[int | None, dict[str, Any]] = (r.status_code, r.json())
            except httpx.TransportError:
                check = (None, {})
            self.checks.append(check)
            if check[0] == 503 and check[1].get("status") == "draining":
                self.draining_seen.set()
            failed = failed + 1 if check[0] != 200 else 0
            if failed >= FALL:
                self.in_rotation = False
            self.stop.wait(CHECK)

    def pick(self) -> str:
        return self.watched if self.in_rotation else self.other


class Writers:
    """WRITERS threads writing distinct entries through the balancer over keep-alive connections
    (one client per node each) until stopped."""

    def __init__(self, balancer: Balancer, token: str) -> None:
        self.balancer = balancer
        self.headers = {"Authorization": f"Bearer {token}"}
        self.acked: list[tuple[str, str, str]] = []  # scope, path, contents of each 2xx
        self.answered: Counter[str] = Counter()  # "<node> <status>"
        self.redispatched = 0  # requests whose connection the drained node refused, sent again
        self.failures: list[str] = []  # a reset, a timeout, a 5xx, anything but a 2xx or a refusal
        # the `Connection` header of each answer of the drained node to a request sent after a
        # check had seen it draining
        self.closing: list[str | None] = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(n,), daemon=True) for n in range(WRITERS)]

    def __enter__(self) -> Writers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)

    def run(self, n: int) -> None:
        nodes = (self.balancer.watched, self.balancer.other)
        clients = {url: httpx.Client(base_url=url, headers=self.headers, timeout=30) for url in nodes}
        scope = f"writer-{n}"
        i = 0
        try:
            while not self.stop.is_set():
                path, contents = f"/w{n}/e{i}.md", f"Writer {n} entry {i}: the drain keeps zq{n}x{i}k."
                i += 1
                node = self.balancer.pick()
                after_drain = self.balancer.draining_seen.is_set()
                body = {"path": path, "contents": contents, "write_mode": "OVERWRITE"}
                try:
                    try:
                        r = clients[node].post(ENTRIES, params={"scope": scope}, json=body)
                    except httpx.ConnectError:  # refused before anything was sent: the other node
                        with self.lock:
                            self.redispatched += 1
                        node = nodes[1] if node == nodes[0] else nodes[0]
                        r = clients[node].post(ENTRIES, params={"scope": scope}, json=body)
                except httpx.TransportError as exc:
                    with self.lock:
                        self.failures.append(f"{node}: {type(exc).__name__}: {exc}")
                    continue
                with self.lock:
                    self.answered[f"{node} {r.status_code}"] += 1
                    if r.is_success:
                        self.acked.append((scope, path, contents))
                    else:
                        self.failures.append(f"{node}: {r.status_code} {r.text[:200]}")
                    if node == nodes[0] and after_drain:
                        self.closing.append(r.headers.get("connection"))
        finally:
            for client in clients.values():
                client.close()

    def count(self) -> int:
        with self.lock:
            return len(self.acked)


class SlowRequest:
    """A write whose body arrives in two parts, on a raw connection: in progress while the
    server's listening socket closes."""

    def __init__(self, port: int, token: str, scope: str, path: str, contents: str) -> None:
        body = json.dumps({"path": path, "contents": contents, "write_mode": "OVERWRITE"}).encode()
        head = (
            f"POST {ENTRIES}?scope={scope} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        self.rest = body[10:]
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        self.sock.sendall(head + body[:10])

    def finish(self) -> tuple[int, dict[str, str], bytes]:
        """Send the rest of the body; (status, headers, body) of the answer, read until the server
        closes the connection."""
        self.sock.sendall(self.rest)
        raw = b""
        while chunk := self.sock.recv(65536):
            raw += chunk
        self.sock.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:])
        return int(lines[0].split()[1]), headers, body


def refuses_connections(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def query(url: str, sql: str) -> Any:
    async def run() -> Any:
        conn = await asyncpg.connect(url)
        try:
            return await conn.fetchval(sql)
        finally:
            await conn.close()

    return asyncio.run(run())


# claims on entries whose claiming session is gone (or unknown): what a node that stopped without
# letting go of its claims would leave
LEFT_CLAIMS = (
    "SELECT count(*) FROM entries WHERE embedding_claim IS NOT NULL AND (embedding_claimer IS NULL "
    "OR NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = embedding_claimer "
    "AND a.backend_start = embedding_claimer_start))"
)


@pytest.fixture
def node_dir() -> Iterator[Path]:  # a short path: PostgreSQL's socket lives in the data dir
    root = Path(tempfile.mkdtemp(prefix="drn"))
    yield root / "d"
    if not os.environ.get("CATALOG_TEST_KEEP"):
        shutil.rmtree(root, ignore_errors=True)


def test_a_node_stopped_under_writers_fails_no_request(live_server, node_dir):
    """Two nodes on one data dir (the embedded PostgreSQL, which the first starts); writers through
    the balancer; SIGTERM to the first node; then it is started again (a rolling restart)."""
    env = {"CATALOG_DRAIN_SECONDS": f"{DRAIN_SECONDS:g}"}
    first = live_server(node_dir, env)
    servers = [first]
    try:
        second = live_server(node_dir, env)  # joins the first one's PostgreSQL
        servers.append(second)
        token = first.cli("token", "--sub", "admin").stdout.strip()
        auth = {"Authorization": f"Bearer {token}"}
        r = httpx.post(
            f"{first.url}{UC}/memory-stores",
            headers=auth,
            json={"name": "drain", "catalog_name": "main", "schema_name": "default"},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        database = second.cli("db-url").stdout.strip()

        balancer = Balancer(first.url, second.url)
        balancer.thread.start()
        wait_until(lambda: balancer.checks and balancer.checks[-1][0] == 200, "a healthy check")
        with Writers(balancer, token) as writers:
            wait_until(lambda: writers.count() >= 20, "20 acknowledged writes")
            slow = SlowRequest(first.port, token, "slow", "/in-flight.md", "sent across the stop")
            first.process.send_signal(signal.SIGTERM)

            # at once: /healthz says draining, and the node still serves (a fresh connection)
            wait_until(balancer.draining_seen.is_set, "/healthz to answer 503 draining")
            r = httpx.post(
                f"{first.url}{ENTRIES}",
                headers=auth,
                params={"scope": "drain"},
                json={"path": "/during-drain.md", "contents": "written while draining"},
                timeout=30,
            )
            assert r.status_code == 200, r.text
            assert r.headers["connection"] == "close"
            wait_until(lambda: not balancer.in_rotation, "the node to leave the rotation")
            # then the listening socket closes while the slow request is still in progress
            wait_until(lambda: refuses_connections(first.port), "the node to refuse connections")
        balancer.stop.set()
        status, headers, body = slow.finish()
        assert status == 200, body
        assert headers["connection"] == "close"
        assert first.process.wait(30) == 0, first.problems()

        assert not writers.failures, (writers.failures[:5], writers.answered)
        # (the writers' requests sent to it between the first 503 and its leaving the rotation)
        assert all(value == "close" for value in writers.closing), writers.closing
        draining = [body for status, body in balancer.checks if status == 503]
        assert draining and all(body["status"] == "draining" for body in draining), draining
        # the stopped node let go of every embedding claim it held: none is left to its sessions
        assert query(database, LEFT_CLAIMS) == 0
        # and its last index commit holds every change committed before it stopped
        watermark = json.loads((node_dir / "index" / "slot-0" / WATERMARK_FILE).read_text())["seq"]
        assert watermark == query(database, "SELECT max(seq) FROM entry_changes")

        again = live_server(node_dir, env)  # the rolling restart: the first node back
        servers.append(again)
        expected = {(scope, path): contents for scope, path, contents in writers.acked}
        expected[("drain", "/during-drain.md")] = "written while draining"
        expected[("slow", "/in-flight.md")] = "sent across the stop"
        lost = []
        with httpx.Client(base_url=again.url, headers=auth, timeout=30) as http:
            for (scope, path), contents in expected.items():
                r = http.get(f"{ENTRIES}:get", params={"scope": scope, "path": path})
                if r.status_code != 200 or r.json()["contents"] != contents:
                    lost.append(f"{scope} {path}: {r.status_code}")
        assert not lost, f"{len(lost)} of {len(expected)} acknowledged writes lost: {lost[:10]}"
    finally:
        codes = {}
        for server in reversed(servers):  # SIGINT drains like SIGTERM (and exits 0 too)
            if server.process.poll() is None:
                server.process.send_signal(signal.SIGINT)
            codes[server.url] = server.stop()
    assert set(codes.values()) == {0}, codes
    # the last node to stop stopped the embedded PostgreSQL
    assert running_url(node_dir / "postgres", EMBEDDED_DATABASE) is None


def test_healthz_reports_how_far_the_index_is_behind(client, token, database_url):
    """An indexer held up (here by a lock on the prune marks, which each pass reads) leaves the
    node serving and healthy, and `/healthz` says by how many changes its index is behind."""
    r = client.post(
        f"{UC}/memory-stores",
        headers=token(),
        json={"name": "behind", "catalog_name": "main", "schema_name": "default"},
    )
    assert r.status_code == 200, r.text
    entries = f"{UC}/memory-stores/main.default.behind/entries"

    def write(n: int) -> None:
        r = client.post(
            entries, headers=token(), params={"scope": "s"}, json={"path": f"/{n}.md", "contents": "x"}
        )
        assert r.status_code == 200, r.text

    write(0)
    assert wait_until(lambda: client.get("/healthz").json() == {"status": "ok"}, "the index to catch up")

    async def held_up() -> dict[str, Any]:
        conn = await asyncpg.connect(database_url)
        try:
            async with conn.transaction():
                await conn.execute("LOCK TABLE change_log_pruned IN ACCESS EXCLUSIVE MODE")
                before = await conn.fetchval("SELECT max(seq) FROM entry_changes")
                for n in range(1, 4):  # the writes commit; the indexer's next pass waits for the lock
                    await asyncio.to_thread(write, n)
                latest = await conn.fetchval("SELECT max(seq) FROM entry_changes")
                health = await asyncio.to_thread(client.get, "/healthz")
                return {
                    "before": before,
                    "latest": latest,
                    "code": health.status_code,
                    "body": health.json(),
                }
        finally:
            await conn.close()

    seen = asyncio.run(held_up())
    assert seen["code"] == 200 and seen["body"]["status"] == "ok", seen
    assert seen["latest"] - seen["before"] >= 3
    assert seen["body"]["index"] == {
        "behind": seen["latest"] - seen["before"],
        "watermark": seen["before"],
        "latest": seen["latest"],
    }
    # the lock is gone: the index catches up and the answer is the status alone again
    assert wait_until(lambda: client.get("/healthz").json() == {"status": "ok"}, "the index to catch up")


def test_the_drain_waits_for_a_health_checker_only_and_a_second_signal_ends_it(
    live_server, database_url, tmp_path
):
    """With a drain far longer than the test's bounds: a node whose `/healthz` nobody has asked
    stops at the first SIGTERM, and a watched one, draining, stops at the second."""
    env = {"CATALOG_DATABASE_URL": database_url, "CATALOG_DRAIN_SECONDS": "3600"}
    unwatched = live_server(tmp_path / "unwatched", env)
    unwatched.process.send_signal(signal.SIGTERM)
    assert unwatched.process.wait(WAIT) == 0, unwatched.problems()
    unwatched.stop()

    watched = live_server(tmp_path / "watched", env)
    try:
        assert httpx.get(f"{watched.url}/healthz", timeout=10).status_code == 200
        watched.process.send_signal(signal.SIGTERM)
        health = wait_until(
            lambda: (r := httpx.get(f"{watched.url}/healthz", timeout=10)).status_code == 503 and r,
            "/healthz to answer 503",
        )
        assert health.json()["status"] == "draining" and health.json()["seconds_left"] > 60
        watched.process.send_signal(signal.SIGTERM)
        assert watched.process.wait(WAIT) == 0, watched.problems()
    finally:
        watched.stop()
