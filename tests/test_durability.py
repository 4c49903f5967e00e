"""Nothing answered 200 is lost: kill -9 of PostgreSQL, of the server, or of both, during
concurrent writes; every acknowledged write is then read back and found by keyword and semantic
search, and the audit chain verifies. While PostgreSQL is away the server answers 503 JSON, and
it brings PostgreSQL back by itself (embedded) or reconnects when it returns (external)."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest
from rest import UC

STORE = "main.default.durable"
WRITERS = 8  # acknowledged writes are counted in tens: enough to be in flight when killed
RECOVERY_DEADLINE = 120.0  # a bound for the test, not a speed claim (figures: docs/operations/durability.md)


def postmaster_pid(pgdata: Path) -> int:
    return int((pgdata / "postmaster.pid").read_text().splitlines()[0])


def kill_postmaster(pgdata: Path) -> int:
    pid = postmaster_pid(pgdata)
    os.kill(pid, signal.SIGKILL)
    return pid


class Writers:
    """WRITERS threads writing distinct entries until stopped; what was answered 200 is kept."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.headers = {"Authorization": f"Bearer {token}"}
        self.acked: list[tuple[str, str, str, float]] = []  # scope, path, contents, when
        self.statuses: Counter[str] = Counter()
        self.bad: list[str] = []  # answers that are neither 200 nor a JSON 503
        self.stop = threading.Event()
        self.lock = threading.Lock()
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
        scope = f"writer-{n}"
        with httpx.Client(base_url=self.url, headers=self.headers, timeout=30) as http:
            i = 0
            while not self.stop.is_set():
                path = f"/notes/w{n}/n{i}.md"
                contents = f"Entry {i} of writer {n}: token zq{n}x{i}k remembers the meeting notes."
                try:
                    r = http.post(
                        f"{UC}/memory-stores/{STORE}/entries",
                        params={"scope": scope},
                        json={"path": path, "contents": contents, "write_mode": "OVERWRITE"},
                    )
                except httpx.TransportError as exc:  # the server itself was killed
                    with self.lock:
                        self.statuses[type(exc).__name__] += 1
                    time.sleep(0.05)
                    i += 1
                    continue
                with self.lock:
                    if r.status_code == 200:
                        self.acked.append((scope, path, contents, time.monotonic()))
                        self.statuses["200"] += 1
                    else:
                        code = _code(r)
                        self.statuses[f"{r.status_code} {code}"] += 1
                        if not (r.status_code == 503 and code == "TEMPORARILY_UNAVAILABLE"):
                            self.bad.append(f"{r.status_code} {r.text[:200]}")
                        elif "retry-after" not in r.headers:
                            self.bad.append("503 without Retry-After")
                if r.status_code != 200:
                    time.sleep(0.05)
                i += 1

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def wait_for(self, n: int, deadline: float) -> None:
        end = time.monotonic() + deadline
        while self.count() < n:
            assert time.monotonic() < end, f"only {self.count()} writes acknowledged; {self.statuses}"
            time.sleep(0.05)


def _code(r: httpx.Response) -> str:
    try:
        return str(r.json().get("error_code"))
    except ValueError:
        return "not JSON"


def admin_token(server) -> str:  # type: ignore[no-untyped-def]
    return server.cli("token", "--sub", "admin", "--ttl", "3600").stdout.strip()


def create_store(url: str, token: str) -> None:
    r = httpx.post(
        f"{url}{UC}/memory-stores",
        headers={"Authorization": f"Bearer {token}"},
        json={"name": "durable", "catalog_name": "main", "schema_name": "default"},
        timeout=30,
    )
    assert r.status_code == 200, r.text  # each test starts on a data dir of its own


def _search(http: httpx.Client, body: dict[str, object]) -> tuple[list[str], int, list[str]]:
    """The paths a search answers, its status, and the legs it said may have missed rows. An
    answer that names its leg in `degraded` is asked again (for at most 30 s): the server says
    its derived state is still catching up (a search embeds at most a few rows itself, for at
    most a second), which is not a lost write; one that does not name it is final."""
    deadline = time.monotonic() + 30
    while True:
        r = http.post(f"{UC}/memory-stores/{STORE}/entries:search", json=body)
        answer = r.json() if r.status_code == 200 else {}
        paths = [hit["memory_entry"]["path"] for hit in answer.get("results", [])]
        degraded = list(answer.get("degraded", []))
        if body["mode"] not in degraded or time.monotonic() > deadline:
            return paths, r.status_code, degraded
        time.sleep(0.5)


def check_every_acknowledged_write(url: str, token: str, acked: list[tuple[str, str, str, float]]) -> None:
    """Read back, keyword search and semantic search: each acknowledged write, current contents."""
    latest: dict[tuple[str, str], str] = {(scope, path): contents for scope, path, contents, _ in acked}
    missing: list[str] = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        for (scope, path), contents in latest.items():
            r = http.get(f"{UC}/memory-stores/{STORE}/entries:get", params={"scope": scope, "path": path})
            if r.status_code != 200 or r.json()["contents"] != contents:
                missing.append(f"get {scope} {path}: {r.status_code}")
                continue
            word = contents.split("token ")[1].split()[0]
            paths, status, degraded = _search(
                http, {"scope": scope, "query": word, "mode": "keyword", "top_k": 5}
            )
            if path not in paths:
                missing.append(f"keyword {scope} {path}: {status} degraded={degraded}")
            paths, status, degraded = _search(
                http,
                {"scope": scope, "query": contents, "mode": "semantic", "top_k": 1, "path_prefix": path},
            )
            if paths != [path]:
                missing.append(f"semantic {scope} {path}: {status} degraded={degraded} found={paths}")
    assert not missing, f"{len(missing)} of {len(latest)} acknowledged writes lost: {missing[:10]}"


def audit_chain_verifies(server) -> None:  # type: ignore[no-untyped-def]
    result = server.cli("audit", "verify")
    assert result.returncode == 0 and result.stdout.startswith("ok "), result.stdout + result.stderr


@pytest.fixture
def data_dir() -> Path:  # a short path: PostgreSQL's socket lives in the data dir
    root = Path(tempfile.mkdtemp(prefix="dur"))
    yield root / "d"
    if not os.environ.get("CATALOG_TEST_KEEP"):
        shutil.rmtree(root, ignore_errors=True)


def test_kill_postgres_during_writes_loses_nothing_and_service_resumes(live_server, data_dir):
    server = live_server(data_dir)
    try:
        token = admin_token(server)
        create_store(server.url, token)
        pgdata = data_dir / "postgres"
        with Writers(server.url, token) as writers:
            writers.wait_for(60, 60)
            old = kill_postmaster(pgdata)
            killed_at = time.monotonic()
            # the server brings PostgreSQL back by itself and writes are acknowledged again
            writers.wait_for(writers.count() + 1, RECOVERY_DEADLINE)
            while not [a for a in writers.acked if a[3] > killed_at + 0.5]:
                assert time.monotonic() < killed_at + RECOVERY_DEADLINE, writers.statuses
                time.sleep(0.1)
            writers.wait_for(writers.count() + 40, 60)
        assert postmaster_pid(pgdata) != old
        assert writers.statuses["503 TEMPORARILY_UNAVAILABLE"] > 0, writers.statuses
        assert not writers.bad, writers.bad[:5]
        health = httpx.get(f"{server.url}/healthz", timeout=10)
        assert health.status_code == 200 and health.json()["status"] == "ok", health.text
        check_every_acknowledged_write(server.url, token, writers.acked)
        log = server.log_path.read_text()
        assert log.count("database unreachable") == 1 and log.count("database is back") == 1
        traced = [line[:3000] for line in log.splitlines() if "Traceback" in line]
        assert not traced, traced[:3]
    finally:
        assert server.stop() == 0
    audit_chain_verifies(server)


@pytest.mark.parametrize("postgres_too", [False, True], ids=["server", "server-and-postgres"])
def test_kill_the_server_during_writes_loses_nothing(live_server, data_dir, postgres_too):
    server = live_server(data_dir)
    token = admin_token(server)
    create_store(server.url, token)
    pgdata = data_dir / "postgres"
    with Writers(server.url, token) as writers:
        writers.wait_for(60, 60)
        pid = postmaster_pid(pgdata)
        server.process.kill()
        if postgres_too:
            os.kill(pid, signal.SIGKILL)
        server.process.wait(30)
    server.stop()
    assert not writers.bad, writers.bad[:5]
    again = live_server(data_dir)  # starts PostgreSQL again if it is gone (crash recovery)
    try:
        assert (postmaster_pid(pgdata) != pid) == postgres_too
        check_every_acknowledged_write(again.url, token, writers.acked)
    finally:
        assert again.stop() == 0
    audit_chain_verifies(again)


def test_an_external_database_outage_is_503_and_the_pool_reconnects(live_server, data_dir):
    """Against an external PostgreSQL (here another embedded cluster the test owns): while it is
    down every request is a JSON 503 and /healthz says why; when it returns, requests succeed
    again without restarting the server."""
    import asyncio

    from catalog.db import EmbeddedPostgres
    from catalog.runtime import EMBEDDED_DATABASE, ensure_database

    external = EmbeddedPostgres(data_dir.parent / "ext")
    url = asyncio.run(ensure_database(external.start(), EMBEDDED_DATABASE))
    server = live_server(data_dir, env={"CATALOG_DATABASE_URL": url})
    try:
        token = admin_token(server)
        headers = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{server.url}{UC}/catalogs/main", headers=headers).status_code == 200
        kill_postmaster(data_dir.parent / "ext")
        deadline = time.monotonic() + 30
        while True:
            r = httpx.get(f"{server.url}{UC}/catalogs/main", headers=headers, timeout=30)
            if r.status_code == 503:
                break
            assert time.monotonic() < deadline, r.text
            time.sleep(0.1)
        assert r.json()["error_code"] == "TEMPORARILY_UNAVAILABLE" and int(r.headers["retry-after"]) >= 1
        health = httpx.get(f"{server.url}/healthz", timeout=30)
        assert health.status_code == 503
        assert health.json()["status"] == "unavailable" and health.json()["database"] == "unavailable"
        r = httpx.post(
            f"{server.url}{UC}/catalogs", headers=headers, json={"name": "during_outage"}, timeout=30
        )
        assert r.status_code == 503 and r.json()["error_code"] == "TEMPORARILY_UNAVAILABLE"
        deadline = time.monotonic() + 60
        while True:
            try:
                external.revive()
                break
            except Exception:
                assert time.monotonic() < deadline
                time.sleep(0.5)
        deadline = time.monotonic() + RECOVERY_DEADLINE
        while httpx.get(f"{server.url}{UC}/catalogs/main", headers=headers, timeout=30).status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert httpx.get(f"{server.url}/healthz", timeout=30).json()["status"] == "ok"
        # the refused requests' events were kept and appended once the database was back
        r = httpx.get(
            f"{server.url}{UC}/system/audit",
            headers=headers,
            params={"status_code": 503, "page_size": 100},
            timeout=30,
        )
        assert r.status_code == 200 and len(r.json()["events"]) >= 2
    finally:
        assert server.stop() == 0
        external.stop()
