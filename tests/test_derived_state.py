"""Derived state never silently diverges from PostgreSQL: a full index disk makes the server
report itself degraded (writes still succeed: PostgreSQL is elsewhere), and once space is back
the indexer catches up by itself, without a restart or a reindex."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from rest import UC

from catalog.auth import mint_dev_token
from catalog.search.fulltext import FullTextIndex, IndexedEntry
from catalog.settings import Settings

STORE = f"{UC}/memory-stores/main.default.disk"


@pytest.fixture
def index_on_small_disk(tmp_path: Path) -> Iterator[Path]:
    """A data dir whose `index` directory is a 4 MiB tmpfs (the rest, logs and keys, is on the
    ordinary disk; PostgreSQL is the test database)."""
    data_dir = tmp_path / "data"
    index_dir = data_dir / "index"
    index_dir.mkdir(parents=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(index_dir)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.fail(
            f"this test mounts a tmpfs on {index_dir} and needs root (or CAP_SYS_ADMIN): "
            f"{mounted.stderr.strip() or mounted.returncode}"
        )
    try:
        yield data_dir
    finally:
        if subprocess.run(["umount", str(index_dir)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(index_dir)], check=True)


def fill(directory: Path, leave: int) -> Path:
    """Write a filler file until only about `leave` bytes are free on the file system."""
    filler = directory / "filler.bin"
    with filler.open("ab", buffering=0) as f:
        chunk = 64 * 1024
        while chunk >= 4096:
            free = os.statvfs(directory).f_bavail * os.statvfs(directory).f_frsize
            if free - chunk < leave:
                chunk //= 2
                continue
            try:
                f.write(b"\0" * chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                chunk //= 2
    return filler


def words(i: int) -> str:
    # words of its own for every entry, so that each entry adds postings to the index
    return " ".join(f"w{i}x{k}y{(i * 7919 + k * 104729) % 1000003}" for k in range(60))


def marker(i: int) -> str:
    return f"marker{i}"


def healthz(http: httpx.Client) -> dict[str, object]:
    r = http.get("/healthz")
    assert r.status_code == 200, r.text  # degraded still serves
    body: dict[str, object] = r.json()
    return body


def wait_for(predicate, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.2)


def found(http: httpx.Client, numbers: list[int]) -> set[str]:
    """The paths keyword search finds for these entries' markers (in groups of 50)."""
    paths: set[str] = set()
    for start in range(0, len(numbers), 50):
        group = numbers[start : start + 50]
        r = http.post(
            f"{STORE}/entries:search",
            json={
                "scope": "u",
                "query": " ".join(marker(i) for i in group),
                "mode": "keyword",
                "top_k": 100,
            },
        )
        assert r.status_code == 200, r.text
        paths |= {x["memory_entry"]["path"] for x in r.json()["results"]}
    return paths


def test_a_commit_that_fails_on_a_full_disk_is_rolled_back_and_retried_in_full(index_on_small_disk: Path):
    # tantivy's own behaviour, which FullTextIndex.apply() guards against: after a failed commit
    # its writer is killed, and without the rollback later commits fail or lose documents
    index_dir = index_on_small_disk / "index"
    index = FullTextIndex(index_dir / "slot-0", heap_bytes=15_000_000)
    try:

        def entries(numbers: range) -> list[IndexedEntry]:
            return [
                IndexedEntry(f"id{i}", "s", "u", "", f"/e/{i}.md", f"{marker(i)} {words(i)}", "")
                for i in numbers
            ]

        index.apply([], entries(range(20)))
        filler = fill(index_dir, leave=0)
        with pytest.raises(ValueError, match=r"No space left on device|index writer was killed"):
            index.apply([], entries(range(20, 60)))
        assert index.num_docs() == 20  # the last commit stands
        with pytest.raises(ValueError):  # still full: the retry fails the same way
            index.apply([], entries(range(20, 60)))
        filler.unlink()
        index.apply([], entries(range(20, 60)))  # the same rows again, on a writer that works
        index.apply(["id0"], entries(range(60, 70)))
        assert index.num_docs() == 69
        store_hits = index.search("s", ["u"], " ".join(marker(i) for i in range(70)), 100)[0]
        assert sorted(doc for doc, _ in store_hits) == sorted(f"id{i}" for i in range(1, 70))
    finally:
        index.close()


def test_full_index_disk_degrades_then_catches_up_without_restart(
    index_on_small_disk: Path, database_url: str, live_server
):  # type: ignore[no-untyped-def]
    data_dir = index_on_small_disk
    index_dir = data_dir / "index"
    server = live_server(data_dir, env={"CATALOG_DATABASE_URL": database_url})
    try:
        token = mint_dev_token(Settings(data_dir=data_dir), "admin")
        http = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        assert healthz(http) == {"status": "ok"}
        r = http.post(
            f"{UC}/memory-stores", json={"name": "disk", "catalog_name": "main", "schema_name": "default"}
        )
        assert r.status_code == 200, r.text

        def write(i: int) -> None:
            r = http.post(
                f"{STORE}/entries",
                params={"scope": "u"},
                json={"path": f"/e/{i}.md", "contents": f"{marker(i)} {words(i)}"},
            )
            assert r.status_code == 200, (i, r.text)  # PostgreSQL holds it whatever the index disk does

        for i in range(20):
            write(i)
        assert found(http, list(range(20))) == {f"/e/{i}.md" for i in range(20)}

        filler = fill(index_dir, leave=256 * 1024)
        written = 20
        # write until the index disk is full and the server says so
        while healthz(http)["status"] == "ok":
            assert written < 2000, "the index disk never filled up"
            for i in range(written, written + 10):
                write(i)
            written += 10
        # from here on keep it full to the last page (a failed commit's files are removed again,
        # and a merge may end, which frees a little), and keep writing
        fill(index_dir, leave=0)
        for i in range(written, written + 40):
            write(i)
        written += 40

        def degraded() -> dict[str, object] | None:
            fill(index_dir, leave=0)
            health = healthz(http)
            return health if health["status"] == "degraded" else None

        health = wait_for(degraded, 60, "healthz to say degraded")
        reasons = health["reasons"]
        assert isinstance(reasons, list)
        assert any("full-text index" in str(r) and "No space left on device" in str(r) for r in reasons), (
            reasons,
            server.log_path.read_text()[-5000:],
        )
        assert not any(str(r).startswith("embeddings") for r in reasons), reasons  # PostgreSQL is fine
        assert isinstance(health["index_lag_changes"], int) and health["index_lag_changes"] > 0, health
        # a search while degraded still answers (with what the index holds), and says that it
        # may miss entries, in both dialects (the semantic leg may also be behind the writes)
        # (the disk is filled again before each: a failed commit's files are removed, a merge may
        # end, and a pass that fits in what they freed leaves the index current for a moment)
        assert "/e/0.md" in found(http, [0])

        def search_degraded(url: str, body: dict[str, object], legs: list[str] | None = None) -> bool:
            nonlocal written
            # a write the index must hold first: an index that holds every write of the store
            # answers complete without a pass, full disk or not (a merge may have freed room)
            write(written)
            written += 1
            fill(index_dir, leave=0)
            r = http.post(url, json=body)
            assert r.status_code == 200, r.text
            degraded = r.json()["degraded"]
            return degraded == legs if legs is not None else "keyword" in degraded

        keyword = {"scope": "u", "query": marker(0), "mode": "keyword"}
        wait_for(lambda: search_degraded(f"{STORE}/entries:search", keyword, ["keyword"]), 30, "keyword")
        hybrid = {"scope": "u", "query": marker(0), "mode": "hybrid"}
        wait_for(lambda: search_degraded(f"{STORE}/entries:search", hybrid), 30, "hybrid")
        agents = {"actor_id": "u", "query": marker(0)}
        wait_for(
            lambda: search_degraded("/api/2.0/agents/memory-stores/disk/entries:search", agents), 30, "agents"
        )

        def index_failures() -> float:
            metrics = http.get("/metrics")
            assert metrics.status_code == 200, metrics.text
            line = next(x for x in metrics.text.splitlines() if x.startswith("catalog_index_failures_total "))
            return float(line.split()[1])

        # the indexer keeps retrying while the disk stays full
        failing_lines = server.log_path.read_text().count("full-text index: failing")
        failures = index_failures()

        def retried() -> bool:
            fill(index_dir, leave=0)
            return index_failures() >= failures + 2

        wait_for(retried, 60, "two more failed index attempts")
        assert healthz(http)["status"] == "degraded"

        filler.unlink()  # space is back: no restart, no reindex
        wait_for(lambda: healthz(http) == {"status": "ok"}, 120, "healthz to be ok again")
        numbers = list(range(written))
        assert found(http, numbers) == {f"/e/{i}.md" for i in numbers}
        r = http.post(f"{STORE}/entries:search", json={"scope": "u", "query": marker(0), "mode": "keyword"})
        assert r.status_code == 200 and "degraded" not in r.json(), r.text  # complete again
        log = server.log_path.read_text()
        # one line when a failure starts, one when it is over, not one per retry; no trace for a
        # full disk
        assert log.count("full-text index: failing") - failing_lines <= 1, log[-3000:]
        assert log.count("full-text index: failing") == log.count("full-text index: recovered"), log[-3000:]
        assert "still failing" not in log and "Traceback" not in log, log[-3000:]
    finally:
        with contextlib.suppress(Exception):
            http.close()
        server.stop()


def _killed() -> ValueError:
    return ValueError(
        "An error occurred in a thread: 'An index writer was killed.. A worker thread encountered an error'"
    )


def test_a_writer_killed_on_a_full_disk_names_the_full_disk(tmp_path, monkeypatch):
    """Tantivy may report only that its writer was killed (the disk error died in the writer's
    thread): on a disk with next to nothing free, the reason says the disk is full; elsewhere it
    is the message as it came."""
    from catalog.search import health

    log = logging.getLogger("test.health")
    free = {"bytes": 0}
    monkeypatch.setattr(health.shutil, "disk_usage", lambda where: SimpleNamespace(free=free["bytes"]))
    full = health.Health("full-text index", log, where=str(tmp_path))
    full.failed(_killed(), "indexing changes")
    reason = full.reason or ""
    assert "No space left on device" in reason and str(tmp_path) in reason, reason

    free["bytes"] = 10**9
    roomy = health.Health("full-text index", log, where=str(tmp_path))
    roomy.failed(_killed(), "indexing changes")
    reason = roomy.reason or ""
    assert "No space left on device" not in reason and "writer was killed" in reason, reason
    # a cause seen first is kept over the consequence that follows it
    roomy.succeeded()
    roomy.failed(OSError(28, "No space left on device"), "indexing changes")
    roomy.failed(_killed(), "indexing changes")
    assert "No space left on device" in (roomy.reason or ""), roomy.reason
