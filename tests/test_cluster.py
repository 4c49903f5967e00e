"""Several nodes on one database, for real: three `catalog serve` processes behind HAProxy, on a
PostgreSQL primary with a synchronous standby under Patroni, verifying an external issuer's tokens
(see tests/cluster.py for the topology, docs/operations/cluster.md for the settings).

- what one node acknowledged, every other node answers at once: reads, lists, every search mode
  (each node keeps a full-text index of its own), an erasure, an expiry, a legal hold;
- kill -9 of a node under load costs only the requests it had in flight, and HAProxy routes
  around it; a rolling restart (SIGTERM, one node after the other) costs none, nor does adding a
  node at run time and removing it;
- a node whose full-text index falls behind says so in `/healthz` and stays in service;
- kill -9 of the primary's PostgreSQL under eight writers: Patroni promotes the synchronous
  standby with no command from anyone, HAProxy finds it through Patroni's health checks, no
  acknowledged write is lost, writes come back within 10 s, and the old primary rejoins as the
  standby; the same after the loss of the new primary's whole machine (its Patroni too), once
  its leader key has expired;
- with Patroni's strict synchronous mode and the standby away, requests are answered 504 and
  `/healthz` says why.

The tests share one cluster (the module's), which the fixture `cluster` brings back to every node
running and in HAProxy's rotation before each test; the database tests have clusters of their own.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import jwt
import pytest
from cluster import (
    AUDIENCE,
    DRAIN_SECONDS,
    ISSUER,
    REPO,
    Cluster,
    Node,
    etcd_binary,
    haproxy_binary,
    wait_until,
)
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from rest import UC

pytestmark = pytest.mark.skipif(
    haproxy_binary() is None or etcd_binary() is None or importlib.util.find_spec("patroni") is None,
    reason="haproxy, etcd (Debian's etcd-server) or Patroni is not installed",
)

WRITERS = 4
FAILOVER_WRITERS = 8
FAILOVER_BOUND = 10.0  # seconds from the primary's crash to the next acknowledged write
PAUSE = 0.05  # seconds between two writes of a writer: load, without starving the nodes' start


@pytest.fixture(scope="module")
def shared() -> Iterator[Cluster]:
    with Cluster(3) as c:
        yield c


@pytest.fixture
def cluster(shared: Cluster) -> Iterator[Cluster]:
    """The module's cluster with every node running and UP in HAProxy (a test that stopped or
    killed a node and failed before starting it again leaves it to this)."""
    for node in shared.nodes:
        if node.process is not None and (node.signalled or not node.running()):
            node.stop()  # stopping, or exited: waited for
        if node.process is None:
            node.start()
    shared.wait_all_up()
    yield shared
    for node in shared.nodes:
        if node.running():
            node.limit_file_size(None)


def headers(c: Cluster, sub: str = "admin") -> dict[str, str]:
    return c.issuer.headers(sub)


def make_store(c: Cluster, name: str) -> str:
    r = httpx.post(
        f"{c.url}{UC}/memory-stores",
        headers=headers(c),
        json={"name": name, "catalog_name": "main", "schema_name": "default"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return f"main.default.{name}"


def unique(prefix: str) -> str:
    return f"{prefix}{os.urandom(4).hex()}"


class Api:
    """The entries routes of one store, on one node (or on HAProxy)."""

    def __init__(self, c: Cluster, base: str, store: str) -> None:
        self.http = httpx.Client(base_url=base, headers=headers(c), timeout=30)
        self.store = f"{UC}/memory-stores/{store}"

    def write(self, scope: str, path: str, contents: str, **extra: Any) -> httpx.Response:
        return self.http.post(
            f"{self.store}/entries",
            params={"scope": scope},
            json={"path": path, "contents": contents, "write_mode": "OVERWRITE", **extra},
        )

    def get(self, scope: str, path: str) -> httpx.Response:
        return self.http.get(f"{self.store}/entries:get", params={"scope": scope, "path": path})

    def delete(self, scope: str, path: str) -> httpx.Response:
        return self.http.delete(f"{self.store}/entries", params={"scope": scope, "path": path})

    def paths(self, scope: str) -> list[str]:
        r = self.http.get(f"{self.store}/entries", params={"scope": scope, "page_size": 100})
        assert r.status_code == 200, r.text
        return sorted(e["path"] for e in r.json()["entries"])

    def all_paths(self, scope: str) -> list[str]:
        """Every path of the scope, page after page."""
        paths: list[str] = []
        token = None
        while True:
            params = {"scope": scope, "page_size": 1000, **({"page_token": token} if token else {})}
            r = self.http.get(f"{self.store}/entries", params=params)
            assert r.status_code == 200, r.text
            paths.extend(e["path"] for e in r.json()["entries"])
            token = r.json().get("next_page_token")
            if not token:
                return paths

    def search(self, scope: str, query: str, mode: str, **extra: Any) -> list[str]:
        r = self.http.post(
            f"{self.store}/entries:search",
            json={"scope": scope, "query": query, "mode": mode, "top_k": 10, **extra},
        )
        assert r.status_code == 200, r.text
        return [hit["memory_entry"]["path"] for hit in r.json()["results"]]

    def found_everywhere(self, scope: str, path: str, word: str, contents: str) -> list[str]:
        """What is missing of the entry: read, listed, found by keyword, semantic and hybrid search."""
        missing = []
        r = self.get(scope, path)
        if r.status_code != 200 or r.json()["contents"] != contents:
            missing.append(f"get {r.status_code}")
        if path not in self.paths(scope):
            missing.append("list")
        if path not in self.search(scope, word, "keyword"):
            missing.append("keyword")
        if self.search(scope, contents, "semantic", top_k=1, path_prefix=path) != [path]:
            missing.append("semantic")
        if path not in self.search(scope, word, "hybrid"):
            missing.append("hybrid")
        return missing

    def close(self) -> None:
        self.http.close()


def apis(c: Cluster, store: str) -> dict[str, Api]:
    return {node.name: Api(c, node.url, store) for node in c.nodes}


def code(r: httpx.Response) -> str:
    try:
        return str(r.json().get("error_code"))
    except ValueError:
        return "not JSON"


def test_every_node_verifies_the_external_issuers_tokens_and_nothing_else(cluster: Cluster) -> None:
    now = int(time.time())
    claims = {"sub": "admin", "iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 600}
    forged = jwt.encode(claims, Ed25519PrivateKey.generate(), algorithm="EdDSA")  # not the issuer's key
    for node in cluster.nodes:
        r = httpx.get(f"{node.url}{UC}/catalogs", headers=headers(cluster), timeout=10)
        assert r.status_code == 200, (node.name, r.text)
        r = httpx.get(f"{node.url}{UC}/catalogs", headers={"Authorization": f"Bearer {forged}"}, timeout=10)
        assert r.status_code == 401, (node.name, r.text)
        assert r.json()["error_code"] == "UNAUTHENTICATED"


def test_a_write_acknowledged_by_one_node_is_read_listed_and_found_by_every_other_at_once(
    cluster: Cluster,
) -> None:
    store = make_store(cluster, unique("ryw"))
    nodes = apis(cluster, store)
    try:
        for writer_name, writer in nodes.items():
            scope = unique("u")
            word = unique("zq")
            path = f"/notes/{writer_name}.md"
            contents = f"The harbour crane {word} was inspected by {writer_name} on a windy morning."
            r = writer.write(scope, path, contents)
            assert r.status_code == 200, r.text
            for reader_name, reader in nodes.items():
                if reader_name != writer_name:
                    missing = reader.found_everywhere(scope, path, word, contents)
                    assert not missing, f"written on {writer_name}, on {reader_name}: {missing} missing"
            # an overwrite on another node replaces it everywhere at once, in the index too
            other = next(n for n in nodes if n != writer_name)
            word2 = unique("zq")
            contents2 = f"The lighthouse keeper {word2} logged a storm, written through {other}."
            assert nodes[other].write(scope, path, contents2).status_code == 200
            for reader_name, reader in nodes.items():
                missing = reader.found_everywhere(scope, path, word2, contents2)
                assert not missing, f"overwritten on {other}, on {reader_name}: {missing} missing"
                assert path not in reader.search(scope, word, "keyword"), reader_name
            # and a deletion on the writer is gone from every node at once
            assert writer.delete(scope, path).status_code == 200
            for reader_name, reader in nodes.items():
                assert reader.get(scope, path).status_code == 404, reader_name
                assert reader.paths(scope) == [], reader_name
                for mode in ("keyword", "hybrid"):
                    assert reader.search(scope, word2, mode) == [], (reader_name, mode)
                assert reader.search(scope, contents2, "semantic") == [], reader_name
    finally:
        for api in nodes.values():
            api.close()


def test_erase_subject_on_one_node_leaves_nothing_of_the_subject_on_the_others(cluster: Cluster) -> None:
    stores = [make_store(cluster, unique("era")), make_store(cluster, unique("erb"))]
    subject, other = unique("alice"), unique("bob")
    written: list[tuple[str, str, str, str, str]] = []  # store, scope, path, word, contents
    for store in stores:
        api = Api(cluster, cluster.nodes[1].url, store)
        for scope in (subject, f"{subject}:proj", other):
            word = unique("zq")
            path = f"/facts/{word}.md"
            contents = f"Prefers green tea {word} and meetings after ten in the morning."
            assert api.write(scope, path, contents).status_code == 200
            written.append((store, scope, path, word, contents))
        api.close()
    # every node has indexed them (found there) before the erasure
    for node in cluster.nodes:
        for store, scope, path, word, _ in written:
            api = Api(cluster, node.url, store)
            assert path in api.search(scope, word, "keyword"), node.name
            api.close()
    r = httpx.post(
        f"{cluster.nodes[0].url}{UC}/system/erase-subject",
        headers=headers(cluster),
        json={"subject": subject},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    assert sorted(r.json()["erased"]) == sorted(stores), r.text
    # the audit key is gone: no node ties an event to the subject any more (asked first, since
    # the reads below are new events naming the subject, under a new key)
    for node in cluster.nodes[1:]:
        r = httpx.get(
            f"{node.url}{UC}/system/audit",
            headers=headers(cluster),
            params={"scope": subject, "page_size": 50},
            timeout=30,
        )
        assert r.status_code == 200 and r.json()["events"] == [], (node.name, r.text[:500])
    for node in cluster.nodes[1:]:
        for store, scope, path, word, contents in written:
            api = Api(cluster, node.url, store)
            try:
                if scope == other:  # the other subject keeps everything
                    assert not api.found_everywhere(scope, path, word, contents), (node.name, scope)
                    continue
                assert api.get(scope, path).status_code == 404, (node.name, scope, path)
                assert api.paths(scope) == [], (node.name, scope)
                assert api.search(scope, word, "keyword") == [], (node.name, scope)
                assert api.search(scope, word, "hybrid") == [], (node.name, scope)
                assert api.search(scope, contents, "semantic") == [], (node.name, scope)
            finally:
                api.close()


def test_an_expiry_set_on_one_node_is_in_force_on_every_node(cluster: Cluster) -> None:
    store = make_store(cluster, unique("exp"))
    nodes = apis(cluster, store)
    first, second, third = nodes.values()
    try:
        scope, word = unique("u"), unique("zq")
        path, contents = "/short.md", f"A parking permit {word} valid for a short while."
        r = first.write(scope, path, contents, ttl_seconds=3600)
        assert r.status_code == 200, r.text
        assert second.get(scope, path).json()["expires_at"] == r.json()["expires_at"]
        # renewed to one second on the second node: the third answers the new expiry at once
        r = second.http.patch(
            f"{second.store}/entries", json={"scope": scope, "path": path, "ttl_seconds": 1}
        )
        assert r.status_code == 200, r.text
        expires_at = r.json()["expires_at"]
        assert third.get(scope, path).json()["expires_at"] == expires_at
        time.sleep(max(0.0, expires_at / 1000 - time.time()) + 0.2)
        for name, api in nodes.items():
            assert api.get(scope, path).status_code == 404, name
            assert api.paths(scope) == [], name
            for mode in ("keyword", "hybrid"):
                assert api.search(scope, word, mode) == [], (name, mode)
            assert api.search(scope, contents, "semantic") == [], name
        # its path can be written afresh, on any node
        assert third.write(scope, path, "again").status_code == 200
        assert first.get(scope, path).json()["contents"] == "again"
    finally:
        for api in nodes.values():
            api.close()


def test_a_legal_hold_set_on_one_node_is_in_force_on_every_node_before_the_answer(
    cluster: Cluster,
) -> None:
    name = unique("hold")
    store = make_store(cluster, name)
    nodes = apis(cluster, store)
    first, second, third = nodes.values()
    try:
        scope = unique("u")
        for i in range(3):
            assert first.write(scope, f"/kept{i}.md", f"evidence {i}").status_code == 200
        assert (
            first.write(scope, "/expiring.md", "evidence with a deadline", ttl_seconds=1).status_code == 200
        )
        r = first.http.patch(f"{UC}/memory-stores/{store}", json={"legal_hold": True})
        assert r.status_code == 200 and r.json()["legal_hold"] is True, r.text
        # no node may delete or overwrite, from the moment the hold was answered
        for api in (second, third):
            r = api.delete(scope, "/kept0.md")
            assert r.status_code == 409 and code(r) == "RESOURCE_CONFLICT", r.text
            r = api.write(scope, "/kept1.md", "overwritten")
            assert r.status_code == 409 and code(r) == "RESOURCE_CONFLICT", r.text
            r = api.http.patch(
                f"{api.store}/entries", json={"scope": scope, "path": "/kept2.md", "append": {"text": "+"}}
            )
            assert r.status_code == 200, r.text  # adding text still works
        # the held store keeps its expired entry: its path cannot be written afresh anywhere
        time.sleep(1.2)
        for api_name, api in nodes.items():
            assert api.get(scope, "/expiring.md").status_code == 404, api_name
            r = api.write(scope, "/expiring.md", "a new entry")
            assert r.status_code == 409 and code(r) == "RESOURCE_CONFLICT", (api_name, r.text)
        # released on the third node: the second deletes at once
        r = third.http.patch(f"{UC}/memory-stores/{store}", json={"legal_hold": False})
        assert r.status_code == 200 and not r.json().get("legal_hold"), r.text
        assert second.delete(scope, "/kept0.md").status_code == 200
        assert first.get(scope, "/kept0.md").status_code == 404
    finally:
        for api in nodes.values():
            api.close()


class Writers:
    """WRITERS threads writing distinct entries through HAProxy until stopped; what was
    acknowledged (200) is kept, with every other outcome and when it happened."""

    def __init__(self, c: Cluster, store: str, count: int = WRITERS, pause: float = PAUSE) -> None:
        self.url = c.url
        self.headers = headers(c)
        self.store = store
        self.pause = pause
        self.acked: list[tuple[str, str, str]] = []  # scope, path, contents
        self.failures: list[tuple[float, str]] = []  # when, what
        self.statuses: Counter[str] = Counter()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.prefix = unique("w")
        self.threads = [threading.Thread(target=self.run, args=(n,), daemon=True) for n in range(count)]

    def __enter__(self) -> Writers:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)

    def run(self, n: int) -> None:
        scope = f"{self.prefix}-{n}"
        with httpx.Client(base_url=self.url, headers=self.headers, timeout=60) as http:
            i = 0
            while not self.stop.is_set():
                path = f"/w{n}/n{i}.md"
                contents = f"Entry {i} of writer {n}: token zq{n}x{i}k {self.prefix} remembers the notes."
                try:
                    r = http.post(
                        f"{UC}/memory-stores/{self.store}/entries",
                        params={"scope": scope},
                        json={"path": path, "contents": contents, "write_mode": "OVERWRITE"},
                    )
                    outcome = "200" if r.status_code == 200 else f"{r.status_code} {code(r)}"
                except httpx.TransportError as exc:
                    outcome = type(exc).__name__
                with self.lock:
                    self.statuses[outcome] += 1
                    if outcome == "200":
                        self.acked.append((scope, path, contents))
                    else:
                        self.failures.append((time.monotonic(), outcome))
                time.sleep(self.pause)
                i += 1

    def count(self) -> int:
        with self.lock:
            return len(self.acked)

    def wait_for(self, n: int, timeout: float = 60) -> None:
        wait_until(lambda: self.count() >= n, timeout, f"{n} acknowledged writes ({self.statuses})", 0.02)


def unreadable(c: Cluster, node: Node, store: str, acked: list[tuple[str, str, str]]) -> list[str]:
    """The acknowledged writes that `node` does not list, or (the last ones of each writer) read
    back with their contents or find by keyword."""
    missing = []
    api = Api(c, node.url, store)
    try:
        by_scope: dict[str, list[tuple[str, str]]] = {}
        for scope, path, contents in acked:
            by_scope.setdefault(scope, []).append((path, contents))
        for scope, entries in by_scope.items():
            listed = set(api.all_paths(scope))
            missing.extend(f"list {scope}{path}" for path, _ in entries if path not in listed)
            for path, contents in entries[-3:]:
                r = api.get(scope, path)
                if r.status_code != 200 or r.json()["contents"] != contents:
                    missing.append(f"get {scope}{path}: {r.status_code}")
                word = contents.split("token ")[1].split()[0]
                if path not in api.search(scope, word, "keyword"):
                    missing.append(f"keyword {scope}{path}")
    finally:
        api.close()
    return missing


def test_kill_9_of_a_node_under_load_costs_only_its_requests_in_flight(cluster: Cluster) -> None:
    store = make_store(cluster, unique("kill"))
    victim = cluster.nodes[1]
    with Writers(cluster, store) as writers:
        writers.wait_for(20)
        killed_at = time.monotonic()
        victim.kill()
        cluster.haproxy.wait_state(victim.name, "DOWN", 10)  # type: ignore[union-attr]
        down_at = time.monotonic()
        writers.wait_for(writers.count() + 30)
    assert len(writers.failures) <= WRITERS, writers.statuses  # one in flight per writer, at most
    late = [f for f in writers.failures if not killed_at <= f[0] <= down_at + 0.5]
    assert not late, f"failures outside the kill's window: {late}"
    survivors = [n for n in cluster.nodes if n is not victim]
    for node in survivors:
        assert not unreadable(cluster, node, store, writers.acked), node.name
    # started again, it catches up (its index too) and HAProxy sends it requests again
    victim.start()
    cluster.haproxy.wait_state(victim.name, "UP", 30)  # type: ignore[union-attr]
    assert not unreadable(cluster, victim, store, writers.acked)


def test_a_rolling_restart_under_load_fails_no_request(cluster: Cluster) -> None:
    store = make_store(cluster, unique("roll"))
    with Writers(cluster, store) as writers:
        writers.wait_for(10)
        for node in cluster.nodes:
            node.terminate()
            # draining: /healthz answers 503 "draining" while the node still serves
            health = wait_until(
                lambda n=node: (h := n.health_or_none()) is not None and h.status_code == 503 and h,
                2,
                f"{node.name}'s /healthz to answer 503 after SIGTERM",
                0.05,
            )
            assert health.json().get("status") == "draining", health.text
            r = httpx.get(f"{node.url}{UC}/catalogs", headers=headers(cluster), timeout=10)
            assert r.status_code == 200, r.text
            cluster.haproxy.wait_state(node.name, "DOWN", DRAIN_SECONDS)  # type: ignore[union-attr]
            assert node.running(), f"{node.name} exited before HAProxy took it out of rotation"
            assert node.wait(60) == 0
            node.start()
            cluster.haproxy.wait_state(node.name, "UP", 30)  # type: ignore[union-attr]
            writers.wait_for(writers.count() + 10)

    assert not writers.failures, writers.statuses
    for node in cluster.nodes:
        assert not unreadable(cluster, node, store, writers.acked), node.name


def test_a_node_whose_index_is_behind_says_so_in_healthz_and_stays_in_rotation(cluster: Cluster) -> None:
    store = make_store(cluster, unique("lag"))
    lagging, writer = cluster.nodes[2], Api(cluster, cluster.nodes[0].url, store)
    reader = Api(cluster, lagging.url, store)
    scope, word = unique("u"), unique("zq")
    try:
        assert lagging.health().json()["status"] == "ok"
        lagging.limit_file_size(0)  # its index cannot grow a file: as a full disk
        for i in range(5):
            assert writer.write(scope, f"/n{i}.md", f"{word} note {i}").status_code == 200
        reader.search(scope, word, "keyword")  # wakes its indexer, which fails to commit

        def behind() -> dict[str, Any] | None:
            body = lagging.health().json()
            return body if body.get("index", {}).get("behind", 0) >= 5 else None

        body = wait_until(behind, 30, f"{lagging.name}'s /healthz to report its index behind")
        assert body["index"]["latest"] - body["index"]["watermark"] >= 5, body
        assert body["status"] == "degraded", body  # its indexer fails: a reason of its own
        assert lagging.health().status_code == 200, body  # degraded, not out of service
        assert cluster.haproxy.states()[lagging.name] == "UP"  # type: ignore[union-attr]
        # the other nodes are unaffected
        for node in cluster.nodes[:2]:
            assert node.health().json()["status"] == "ok", node.name
        lagging.limit_file_size(None)  # space again: it catches up by itself
        wait_until(lambda: lagging.health().json() == {"status": "ok"}, 30, f"{lagging.name} to catch up")
        assert sorted(reader.search(scope, word, "keyword")) == [f"/n{i}.md" for i in range(5)]
    finally:
        writer.close()
        reader.close()


def test_a_node_added_at_run_time_serves_at_once_and_one_removed_costs_no_request(cluster: Cluster) -> None:
    store = make_store(cluster, unique("scale"))
    before = Api(cluster, cluster.nodes[0].url, store)
    scope, word = unique("u"), unique("zq")
    contents = f"Written before the node {word} existed."
    assert before.write(scope, "/before.md", contents).status_code == 200
    with Writers(cluster, store) as writers:
        writers.wait_for(5)
        added = cluster.add_node()
        try:
            # its index is built from PostgreSQL at start: it finds what was written before it
            api = Api(cluster, added.url, store)
            assert not api.found_everywhere(scope, "/before.md", word, contents)
            api.close()
            served = writers.count()
            writers.wait_for(served + 30)
            requests = [r for r in added.log_records() if r.get("message") == "request"]
            assert any(r.get("route", "").endswith("/entries") for r in requests), "HAProxy sent it nothing"
        finally:
            assert cluster.remove_node(added) == 0
        assert added.name not in cluster.haproxy.states()  # type: ignore[union-attr]
        writers.wait_for(writers.count() + 10)
    before.close()
    assert not writers.failures, writers.statuses
    for node in cluster.nodes:
        assert not unreadable(cluster, node, store, writers.acked), node.name


def _audit_verify(c: Cluster) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "catalog", "audit", "verify"],
        env=c.nodes[0].env,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )


def test_a_primary_that_dies_fails_over_by_itself_and_loses_no_acknowledged_write() -> None:
    """kill -9 of the primary's PostgreSQL under eight writers: Patroni promotes the synchronous
    standby with no command from anyone, HAProxy sends the nodes' connections to it (Patroni's
    `/primary` check), the nodes write again without a restart, and the old primary comes back as
    the new primary's synchronous standby (rewound by Patroni). Then the new primary's whole
    machine is lost (its Patroni too): once its leader key expires the other is promoted, and
    the lost one, started again, rejoins. No acknowledged write is lost in either, and the audit
    chain verifies."""
    with Cluster(2) as c:
        old = c.leader()
        standby = c.wait_synchronous()
        store = make_store(c, "failover")
        with Writers(c, store, count=FAILOVER_WRITERS) as writers:
            writers.wait_for(30)
            old.kill()  # PostgreSQL crashed: the postmaster and every backend at once
            killed_at = time.monotonic()
            writers.wait_for(writers.count() + 1, 60)
            resumed_in = time.monotonic() - killed_at
            writers.wait_for(writers.count() + 30)
        assert standby.is_leader() and standby.sql("SELECT pg_is_in_recovery()") == "f"
        assert c.wait_database() == standby.name  # HAProxy routes to the new primary alone
        # written back within 10 s (a liveness bound, generous: about 3 s on two busy cores)
        assert resumed_in < FAILOVER_BOUND, f"writes resumed {resumed_in:.1f} s after the kill"
        # the old primary rejoins as the new one's synchronous standby, by itself
        assert c.wait_synchronous(120) is old
        rejoined_in = time.monotonic() - killed_at
        kinds = {what for _, what in writers.failures}
        assert kinds <= {"503 TEMPORARILY_UNAVAILABLE", "503 not JSON", "502 not JSON"}, writers.statuses
        for node in c.nodes:
            assert not unreadable(c, node, store, writers.acked), node.name
            api = Api(c, node.url, store)
            assert api.write("after", f"/{node.name}.md", "written after the failover").status_code == 200
            api.close()

        # the new primary's machine is lost: PostgreSQL and its Patroni
        with Writers(c, store, count=FAILOVER_WRITERS) as writers2:
            writers2.wait_for(10)
            standby.kill(host=True)
            lost_at = time.monotonic()
            writers2.wait_for(writers2.count() + 1, 120)
            host_resumed_in = time.monotonic() - lost_at
            writers2.wait_for(writers2.count() + 10)
        assert old.is_leader() and c.wait_database() == old.name
        standby.start()  # the machine is back: its Patroni makes it a standby of the new primary
        assert c.wait_synchronous(120) is standby
        for node in c.nodes:
            assert not unreadable(c, node, store, writers.acked + writers2.acked), node.name
            # (its index may still count a lost transaction's sequence number as a gap, for up
            # to 30 s: `index.behind`, not a failure)
            assert node.health().status_code == 200, node.name
        verify = _audit_verify(c)
        assert verify.returncode == 0 and verify.stdout.startswith("ok "), verify.stdout + verify.stderr
        print(
            f"writes resumed {resumed_in:.1f} s after the primary's PostgreSQL was killed "
            f"({writers.statuses}; the old primary synchronous again after {rejoined_in:.1f} s), "
            f"{host_resumed_in:.1f} s after its machine was lost ({writers2.statuses})"
        )


def test_with_its_synchronous_standby_away_a_node_answers_504_and_says_why_in_healthz() -> None:
    """With Patroni's strict synchronous mode the primary waits for its synchronous standby to
    confirm every commit even while the standby is away (the default mode stops waiting instead:
    the failover test), so no audit event can be appended and no audited request can be answered:
    each is answered 504 at its deadline (not held until the standby is back), /healthz says the
    audit log waits for the database, and once the standby is back everything is answered again
    with the chain whole."""
    with Cluster(1, env={"CATALOG_REQUEST_TIMEOUT": "3"}, strict=True) as c:
        primary, standby = c.leader(), c.wait_synchronous()
        store = make_store(c, "sync_away")
        node = c.nodes[0]
        api = Api(c, node.url, store)
        assert api.write("u", "/before.md", "written while both servers confirm").status_code == 200
        standby.stop()  # its Patroni stops it, and leaves the cluster
        try:
            # a liveness bound, not a measurement: without the deadline this read never returns
            r = httpx.get(
                f"{node.url}{UC}/memory-stores/{store}/entries",
                headers=headers(c),
                params={"scope": "u"},
                timeout=60,
            )
            assert (r.status_code, r.json()["error_code"]) == (504, "DEADLINE_EXCEEDED"), r.text
            health = node.health().json()
            waited = time.monotonic() + 60
            while "audit_append_waiting_seconds" not in health and time.monotonic() < waited:
                time.sleep(0.5)  # until the append has waited more than 5 s
                health = node.health().json()
            assert health["status"] == "degraded"
            assert any(reason.startswith("audit log:") for reason in health["reasons"]), health
        finally:
            standby.start()
        assert c.wait_synchronous(120) is standby and primary.is_leader()
        deadline = time.monotonic() + 60
        while node.health().json()["status"] != "ok" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert node.health().json()["status"] == "ok"
        assert api.get("u", "/before.md").status_code == 200
        api.close()
        verify = _audit_verify(c)
        assert verify.returncode == 0, verify.stdout + verify.stderr
