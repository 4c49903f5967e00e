"""`catalog serve --workers N`: one port served by N processes on one data dir, sharing one
full-text index slot, with read-your-writes across them as across nodes.

First the shared slot itself, in process (two indexers on one slot, as two workers hold it): one
writes, the other reads what it commits and holds every earlier write when it searches; when the
writer is gone the reader takes its place; when the writer fails the reader says so. Then the
whole server: two workers answer on one port, a write answered by one is found by the other at
once, one index directory is used, a killed worker is replaced (the writer among them), and
SIGTERM drains both.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil
import pytest
from index_entries import insert
from rest import UC

from catalog import machine
from catalog.db import running_url
from catalog.runtime import EMBEDDED_DATABASE
from catalog.search import sharing
from catalog.search.indexer import WATERMARK_FILE, Indexer
from catalog.settings import Settings

WAIT = 60.0  # a bound for each wait of the test, not a speed claim
ENOSPC = "An IO error occurred: 'No space left on device (os error 28)'"


# --- one slot, two indexers ------------------------------------------------------------------------


async def found(pool: asyncpg.Pool, ix: Indexer, store: str, word: str) -> list[str]:
    """The paths of `store` whose entries the indexer's index finds for `word`."""
    store_id = str(await pool.fetchval("SELECT id FROM memory_stores WHERE name = $1", store))
    assert ix.index is not None
    hits, _ = await asyncio.to_thread(ix.index.search, store_id, ["u"], word, 100)
    ids = [doc for doc, _ in hits]
    rows = await pool.fetch("SELECT path FROM entries WHERE id = ANY($1::uuid[])", ids)
    return sorted(r["path"] for r in rows)


@pytest.fixture
async def pair(pool: asyncpg.Pool, tmp_path: Path) -> AsyncIterator[tuple[Indexer, Indexer]]:
    """Two indexers on slot 0 of one index root, started one after the other (the first takes
    the writer lock)."""
    first = Indexer(pool, tmp_path / "index", shared_slot=0)
    await first.start()
    second = Indexer(pool, tmp_path / "index", shared_slot=0)
    await second.start()
    try:
        yield first, second
    finally:
        await second.close()
        await first.close()


async def test_a_shared_slot_has_one_writer_and_its_readers_hold_every_earlier_write(pool, store, pair):
    writer, reader = pair
    assert not writer.reading and reader.reading
    assert writer.directory == reader.directory
    assert sorted(p.name for p in writer.directory.parent.iterdir() if p.name.startswith("slot")) == [
        "slot-0"
    ]
    for n in range(8):  # each write found by the reader's very next search, with no pause between
        await insert(pool, store, {f"/{n}.md": f"ocelot{n} in the reeds"})
        assert await reader.wait_fresh(WAIT) is True
        assert await found(pool, reader, store, f"ocelot{n}") == [f"/{n}.md"]
    # a burst of writes, then searches at once from the reader
    await insert(pool, store, {f"/burst/{n}.md": "marmot burst" for n in range(50)})
    assert all(await asyncio.gather(*(reader.wait_fresh(WAIT) for _ in range(10))))
    assert len(await found(pool, reader, store, "marmot")) == 50
    # the reader reports the writer's watermark
    position = await reader.position()
    assert position.behind == 0
    assert position.watermark == json.loads((writer.directory / WATERMARK_FILE).read_text())["seq"]


async def test_a_reader_takes_the_place_of_a_writer_that_is_gone(pool, store, pair):
    writer, reader = pair
    await insert(pool, store, {"/before.md": "pangolin before"})
    assert await reader.wait_fresh(WAIT)
    await writer.close()  # its lock is let go, as when its process dies
    await insert(pool, store, {"/after.md": "pangolin after"})
    # the next search finds no writer, takes its place and still holds the write
    assert await reader.wait_fresh(WAIT) is True
    assert not reader.reading
    assert await found(pool, reader, store, "pangolin") == ["/after.md", "/before.md"]
    await insert(pool, store, {"/later.md": "pangolin later"})
    assert await reader.wait_fresh(WAIT)
    assert await found(pool, reader, store, "pangolin") == ["/after.md", "/before.md", "/later.md"]


async def test_a_readers_write_gathers_with_the_writers_but_its_search_is_served_at_once(
    pool, store, tmp_path
):
    """A reader's `poke` (it committed a write) lets writes gather for the writer's next commit;
    its `wake` (a search waits) is a pass now."""
    root = tmp_path / "index"
    writer = Indexer(pool, root, shared_slot=0, poll_interval=3600.0, commit_interval=3600.0)
    await writer.start()
    reader = Indexer(pool, root, shared_slot=0, poll_interval=3600.0, commit_interval=3600.0)
    await reader.start()
    try:
        await insert(pool, store, {"/first.md": "kowari first"})
        assert await reader.wait_fresh(WAIT) is True  # the first commit since the start
        commits, started = writer.commits, writer.passes.started

        await insert(pool, store, {"/gathered.md": "kowari gathered"})
        reader.notify()  # the reader's own write: a poke
        await asyncio.sleep(0.5)  # long enough for a pass that was not put off to have started
        assert writer.announcer is not None and len(writer.announcer.asked) == 1  # poked, unanswered
        assert writer.passes.started == started and writer.commits == commits

        assert await reader.wait_fresh(WAIT) is True  # a search: the writer's pass, now
        assert await found(pool, reader, store, "kowari") == ["/first.md", "/gathered.md"]
        assert writer.commits == commits + 1
    finally:
        await reader.close()
        await writer.close()


class FailingWriter:
    """tantivy's writer, whose commits fail as on a full disk."""

    def __init__(self, real: Any) -> None:
        self.real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def commit(self) -> int:
        raise ValueError(ENOSPC)


async def test_a_failing_writer_lets_its_readers_search_what_they_hold_and_say_why(pool, store, pair):
    writer, reader = pair
    assert writer.index is not None
    writer.index.writer = FailingWriter(writer.index.writer)
    await insert(pool, store, {"/lost.md": "wombat"})
    fresh = await reader.wait_fresh(WAIT)
    assert fresh is False  # the pass failed: the search is degraded, not held up
    status = await reader.status()
    assert not status.healthy and status.reason is not None and "No space left" in status.reason
    assert await reader.wait_fresh(WAIT) is False  # at once while the writer keeps failing


async def test_a_reader_that_knows_its_head_is_answered_by_the_writers_pass_in_progress(tmp_path: Path):
    """The writer tells every reader that asked of each pass it ends, with the watermark its
    commit holds: a search that knows its request's head is answered by a pass in progress that
    holds it; one that does not, by a pass started after it asked."""
    writer = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    writer.bind(sharing.address(tmp_path))  # stands in for the slot's writer
    reloads: list[None] = []
    reader = sharing.Follower(tmp_path, lambda: reloads.append(None))
    reader.open()
    try:
        before = time.monotonic()  # a pass in progress began before the searches asked
        knows = asyncio.create_task(reader.wait_fresh(WAIT, 7))
        plain = asyncio.create_task(reader.wait_fresh(WAIT))
        await asyncio.sleep(0)
        for _ in range(2):
            message, address = await asyncio.to_thread(writer.recvfrom, 64)
            assert message == sharing.WAKE
        writer.sendto(b"done %.9f c1 6" % before, address)  # it ended short of the head
        await asyncio.sleep(0.05)
        assert not knows.done() and not plain.done()
        writer.sendto(b"done %.9f c2 7" % before, address)  # it holds the head
        assert await asyncio.wait_for(knows, WAIT) is True
        await asyncio.sleep(0.05)
        assert not plain.done() and len(reloads) == 2
        writer.sendto(b"done %.9f c3 8" % time.monotonic(), address)  # one started after it asked
        assert await asyncio.wait_for(plain, WAIT) is True
    finally:
        reader.close()
        writer.close()


def test_workers_default_to_the_cores_this_process_may_use(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(machine, "ROOT", tmp_path)  # no control group limits it (those: test_machine)
    assert Settings(workers=3).workers_for(machine.limits()) == 3
    assert Settings(workers=0).workers_for(machine.limits()) == len(os.sched_getaffinity(0))


# --- the whole server ------------------------------------------------------------------------------


@pytest.fixture
def node_dir() -> Iterator[Path]:  # a short path: PostgreSQL's socket lives in the data dir
    root = Path(tempfile.mkdtemp(prefix="wrk"))
    yield root / "d"
    if not os.environ.get("CATALOG_TEST_KEEP"):
        shutil.rmtree(root, ignore_errors=True)


def wait_until(condition: Any, what: str, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return value


def workers_of(pid: int) -> list[int]:
    """The pids of a supervisor's worker processes (its children running `catalog serve`)."""
    pids = []
    for child in psutil.Process(pid).children():
        try:
            if "--worker" in child.cmdline():
                pids.append(child.pid)
        except psutil.Error:  # a worker that just died (a zombie until the supervisor reaps it)
            continue
    return sorted(pids)


def answered_by(
    url: str, method: str, path: str, token: str, worker: str | None = None, **kw: Any
) -> httpx.Response:
    """A request on a connection of its own (the kernel gives it to either worker); with
    `worker`, sent again until that worker answers."""
    headers = {"Authorization": f"Bearer {token}"}
    for _ in range(400):
        r = httpx.request(method, f"{url}{path}", headers=headers, timeout=30, **kw)
        if worker is None or r.headers.get("x-catalog-worker") == worker:
            return r
    raise AssertionError(f"worker {worker} answered none of 400 requests")


def test_two_workers_serve_one_port_share_one_index_and_stop_together(live_server, node_dir):
    env = {"CATALOG_WORKERS": "2", "CATALOG_DRAIN_SECONDS": "3"}
    server = live_server(node_dir, env)
    try:
        supervisor = server.process.pid
        pids = workers_of(supervisor)
        assert len(pids) == 2, pids
        token = server.cli("token", "--sub", "admin").stdout.strip()

        # one port, two processes: each worker answers some of the connections
        seen = set()
        for _ in range(400):
            seen.add(httpx.get(f"{server.url}/healthz", timeout=30).headers["x-catalog-worker"])
            if seen == {"0", "1"}:
                break
        assert seen == {"0", "1"}

        r = answered_by(
            server.url,
            "POST",
            f"{UC}/memory-stores",
            token,
            json={"name": "wrk", "catalog_name": "main", "schema_name": "default"},
        )
        assert r.status_code == 200, r.text
        entries = f"{UC}/memory-stores/main.default.wrk/entries"

        def write_then_find_elsewhere(n: int, mode: str) -> None:
            """A write answered by one worker is found by the other's next search."""
            word = f"quetzal{n}x"
            r = answered_by(
                server.url,
                "POST",
                entries,
                token,
                params={"scope": "s"},
                json={"path": f"/{n}.md", "contents": word},
            )
            assert r.status_code == 200, r.text
            other = "1" if r.headers["x-catalog-worker"] == "0" else "0"
            body = {"scope": "s", "query": word, "mode": mode}
            found = answered_by(server.url, "POST", f"{entries}:search", token, worker=other, json=body)
            assert found.status_code == 200, found.text
            paths = [hit["memory_entry"]["path"] for hit in found.json()["results"]]
            assert f"/{n}.md" in paths, (mode, found.json())
            assert "degraded" not in found.json(), found.json()

        for n in range(6):
            write_then_find_elsewhere(n, ("keyword", "hybrid", "semantic")[n % 3])

        # one index directory for both workers (and one for the transcripts), not one each
        index = node_dir / "index"
        assert sorted(p.name for p in index.iterdir() if p.name.startswith("slot")) == ["slot-0"]
        assert sorted(p.name for p in (index / "transcripts").iterdir() if p.name.startswith("slot")) == [
            "slot-0"
        ]

        # a killed worker is replaced, and the others carry on: each of the first two in turn (one
        # of them wrote the index)
        for k, victim in enumerate(pids):
            os.kill(victim, signal.SIGKILL)
            wait_until(
                lambda victim=victim: len(w := workers_of(supervisor)) == 2 and victim not in w,
                "the killed worker to be replaced",
            )
            for n in range(3):
                write_then_find_elsewhere(100 * (k + 1) + n, "keyword")
        now = workers_of(supervisor)

        # SIGTERM drains both: /healthz says draining from each worker while they still serve
        assert httpx.get(f"{server.url}/healthz", timeout=30).status_code == 200  # a balancer watches
        server.process.send_signal(signal.SIGTERM)
        draining = set()
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline and draining != {"0", "1"}:
            try:
                r = httpx.get(f"{server.url}/healthz", timeout=5)
            except httpx.TransportError:
                break
            if r.status_code == 503 and r.json()["status"] == "draining":
                draining.add(r.headers["x-catalog-worker"])
        assert draining == {"0", "1"}
        assert server.process.wait(WAIT) == 0, server.problems()
        assert not [pid for pid in now if psutil.pid_exists(pid)]
        # the supervisor left the embedded PostgreSQL last: nothing uses it, it stopped
        assert running_url(node_dir / "postgres", EMBEDDED_DATABASE) is None
    finally:
        if server.process.poll() is None:
            server.process.send_signal(signal.SIGTERM)
        server.stop()


def test_the_embedded_postgresql_makes_room_for_every_workers_connections(node_dir):
    """As made, the embedded PostgreSQL allows 100 connections; eight workers may hold 96 and the
    tools need some: the supervisor raises the limit (the server started again, as nobody else
    uses it yet), once."""
    from catalog.cli.workers import _embedded_database, _max_connections, connections_needed

    settings = Settings(data_dir=node_dir)
    embedded = _embedded_database(settings, 8)
    try:
        url = running_url(settings.postgres_dir, EMBEDDED_DATABASE)
        assert url is not None
        assert asyncio.run(_max_connections(url)) == connections_needed(8) > 100
    finally:
        embedded.stop()
    assert running_url(settings.postgres_dir, EMBEDDED_DATABASE) is None


def test_a_server_the_database_has_no_connection_left_for_says_why_and_what_to_do(live_server, node_dir):
    """Servers started one by one on one machine each make room for their own workers only; one
    that the database has no connection left for stops at its start, saying why and what to do
    (one `catalog serve --workers N`, or a higher max_connections), and leaves the embedded
    PostgreSQL to the process that started it."""
    from catalog.db import EmbeddedPostgres
    from catalog.runtime import NO_CONNECTION_LEFT

    embedded = EmbeddedPostgres(Settings(data_dir=node_dir).postgres_dir)
    loop = asyncio.new_event_loop()
    held: list[asyncpg.Connection] = []
    try:
        url = embedded.start()
        conn = loop.run_until_complete(asyncpg.connect(url))
        loop.run_until_complete(conn.execute("ALTER SYSTEM SET max_connections = 5"))
        loop.run_until_complete(conn.close())
        embedded.stop()
        url = embedded.start()  # again, with room for five connections
        held = [loop.run_until_complete(asyncpg.connect(url)) for _ in range(5)]
        with pytest.raises(asyncpg.TooManyConnectionsError):
            loop.run_until_complete(asyncpg.connect(url))  # none left, for anyone
        with pytest.raises(RuntimeError, match="server did not start") as refused:
            live_server(node_dir)
        assert NO_CONNECTION_LEFT in str(refused.value)
        assert embedded.alive()  # the refused server did not stop what it did not start
    finally:
        for conn in held:
            loop.run_until_complete(conn.close())
        loop.close()
        embedded.stop()
