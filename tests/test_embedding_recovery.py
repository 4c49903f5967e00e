"""A failing embedding model marks nothing embedded: the rows stay stale, `/healthz` reports the
backlog and the reason, and the worker catches up by itself once the model works again."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence

import asyncpg
import numpy as np
from fake_embedder import HashEncoder
from litestar.testing import TestClient
from rest import UC

from catalog.app import create_app
from catalog.auth import mint_dev_token

STORE = f"{UC}/memory-stores/main.default.emb"


class FlakyEncoder(HashEncoder):
    """The test embedder, raising while `broken` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.broken = False

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if self.broken:
            raise RuntimeError("the model fell over")
        return super().encode(texts)


def unembedded(url: str) -> list[str]:
    async def run() -> list[str]:
        conn = await asyncpg.connect(url)
        try:
            rows = await conn.fetch(
                "SELECT path FROM entries WHERE embedded_version IS DISTINCT FROM version "
                "OR embedding IS NULL ORDER BY path"
            )
            return [r["path"] for r in rows]
        finally:
            await conn.close()

    return asyncio.run(run())


def wait_for(predicate, what: str, within: float = 60.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)
    return value


def test_a_failing_model_leaves_rows_stale_reports_them_and_catches_up(settings, database_url, caplog):
    caplog.set_level(logging.INFO, logger="catalog.search")
    encoder = FlakyEncoder()
    headers = {"Authorization": f"Bearer {mint_dev_token(settings, 'admin')}"}
    with TestClient(create_app(settings, encoder=encoder), raise_server_exceptions=False) as c:
        body = {"name": "emb", "catalog_name": "main", "schema_name": "default"}
        assert c.post(f"{UC}/memory-stores", headers=headers, json=body).status_code == 200
        search = c.app.state.runtime.context.search
        assert c.get("/healthz").json() == {"status": "ok"}

        encoder.broken = True
        for name, text in [("a", "platypus eggs"), ("b", "echidna spines"), ("c", "kiwi feathers")]:
            r = c.post(
                f"{STORE}/entries",
                headers=headers,
                params={"scope": "u"},
                json={"path": f"/{name}.md", "contents": text},
            )
            assert r.status_code == 200, r.text  # the write does not wait for its vector

        wait_for(lambda: search.embedding_health.failures_total >= 3, "three failed embedding passes")
        health = c.get("/healthz")
        assert health.status_code == 200
        report = health.json()
        assert report["status"] == "degraded", report
        assert report["reasons"] == ["embeddings: embedding entries: RuntimeError: the model fell over"], (
            report
        )
        assert report["embedding_backlog_entries"] == 3 and report["index_lag_changes"] == 0, report
        assert unembedded(database_url) == ["/a.md", "/b.md", "/c.md"]  # none marked embedded
        # keyword search is unaffected and answers at once
        r = c.post(
            f"{STORE}/entries:search",
            headers=headers,
            json={"scope": "u", "query": "echidna", "mode": "keyword"},
        )
        assert [x["memory_entry"]["path"] for x in r.json()["results"]] == ["/b.md"]
        assert "degraded" not in r.json()  # the keyword leg is complete
        # a hybrid search answers with the keyword leg and says that the semantic one is missing
        r = c.post(f"{STORE}/entries:search", headers=headers, json={"scope": "u", "query": "echidna"})
        assert r.status_code == 200, r.text
        assert [x["memory_entry"]["path"] for x in r.json()["results"]] == ["/b.md"]
        assert r.json()["degraded"] == ["semantic"], r.text

        encoder.broken = False  # no restart
        wait_for(lambda: c.get("/healthz").json() == {"status": "ok"}, "healthz to be ok again")
        wait_for(lambda: unembedded(database_url) == [], "every entry to have its vector")
        r = c.post(
            f"{STORE}/entries:search",
            headers=headers,
            json={"scope": "u", "query": "kiwi feathers", "mode": "semantic", "top_k": 1},
        )
        assert r.status_code == 200, r.text
        assert r.json()["results"][0]["memory_entry"]["path"] == "/c.md"
        assert "degraded" not in r.json()

    records = [r for r in caplog.records if r.name == "catalog.search" and "embeddings" in r.getMessage()]
    messages = [r.getMessage() for r in records]
    assert len([m for m in messages if m.startswith("embeddings: failing")]) == 1, messages
    assert len([m for m in messages if m.startswith("embeddings: recovered")]) == 1, messages
    # an unexpected error: its trace, but only once a minute however often it is retried
    assert len([r for r in records if r.exc_info]) == 1, messages


class GatedEncoder(HashEncoder):
    """The test embedder, holding any batch that holds `marker` until `gate` is set."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker
        self.entered = threading.Event()
        self.gate = threading.Event()

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if any(self.marker in t for t in texts):
            self.entered.set()
            self.gate.wait(120)
        return super().encode(texts)


def test_a_write_does_not_wait_for_an_embedding_pass_of_its_entry(settings, database_url):
    """The embedding worker claims its rows with a lease, not with row locks held while the model
    runs: overwriting and deleting entries that a pass is embedding go through while the pass is
    still running; the vector of the old text is not stored, and the new text gets its own."""
    encoder = GatedEncoder("platypus")
    headers = {"Authorization": f"Bearer {mint_dev_token(settings, 'admin')}"}
    try:
        with TestClient(create_app(settings, encoder=encoder), raise_server_exceptions=False) as c:
            body = {"name": "emb-gate", "catalog_name": "main", "schema_name": "default"}
            assert c.post(f"{UC}/memory-stores", headers=headers, json=body).status_code == 200
            store = f"{UC}/memory-stores/main.default.emb-gate"
            for path, text in (("/a.md", "platypus eggs"), ("/b.md", "platypus bill")):
                r = c.post(
                    f"{store}/entries",
                    headers=headers,
                    params={"scope": "u"},
                    json={"path": path, "contents": text},
                )
                assert r.status_code == 200, r.text
            assert encoder.entered.wait(60), "the embedding pass never started"
            done: list[int] = []

            def change() -> None:
                r = c.post(
                    f"{store}/entries",
                    headers=headers,
                    params={"scope": "u"},
                    json={"path": "/a.md", "contents": "echidna spines", "write_mode": "OVERWRITE"},
                )
                done.append(r.status_code)
                r = c.delete(f"{store}/entries", headers=headers, params={"scope": "u", "path": "/b.md"})
                done.append(r.status_code)

            writer = threading.Thread(target=change)
            writer.start()
            writer.join(60)
            # both answered while the pass that holds their rows had not finished
            assert done == [200, 200] and not encoder.gate.is_set()
            encoder.gate.set()
            wait_for(lambda: unembedded(database_url) == [], "every entry to have its vector")
            r = c.post(
                f"{store}/entries:search",
                headers=headers,
                json={"scope": "u", "query": "echidna spines", "mode": "semantic", "top_k": 5},
            )
            hits = r.json()["results"]
            assert [h["memory_entry"]["path"] for h in hits] == ["/a.md"]
            assert hits[0]["score"] > 0.9  # the vector of the new text, not of "platypus eggs"
    finally:
        encoder.gate.set()


def test_rows_claimed_elsewhere_wait_for_the_claim_to_run_out(settings, database_url):
    """A row another process has claimed (or claimed before it died) is left to it until its lease
    runs out; then this process embeds it without being woken by a write."""
    headers = {"Authorization": f"Bearer {mint_dev_token(settings, 'admin')}"}

    def sql(statement: str, *args: object) -> list[asyncpg.Record]:
        async def run() -> list[asyncpg.Record]:
            conn = await asyncpg.connect(database_url)
            try:
                return await conn.fetch(statement, *args)
            finally:
                await conn.close()

        return asyncio.run(run())

    with TestClient(create_app(settings, encoder=HashEncoder()), raise_server_exceptions=False) as c:
        body = {"name": "emb-claim", "catalog_name": "main", "schema_name": "default"}
        assert c.post(f"{UC}/memory-stores", headers=headers, json=body).status_code == 200
        store_id = sql("SELECT id FROM memory_stores WHERE name = 'emb-claim'")[0]["id"]
        # written behind the server's back, already claimed by "another process" for 3 seconds
        sql(
            "INSERT INTO entries (store_id, scope, path, contents, created_by, updated_by, embedding_claim) "
            "VALUES ($1, 'u', '/claimed.md', 'wombat burrow', 'x', 'x', "
            "clock_timestamp() + interval '3 seconds')",
            store_id,
        )
        search = c.app.state.runtime.context.search
        before = search.passes.started
        search.written()  # a pass runs and must leave the row alone
        wait_for(lambda: search.passes.done > before, "an embedding pass after the insert", 30)
        assert sql("SELECT embedding IS NULL AS missing FROM entries WHERE path = '/claimed.md'")[0][
            "missing"
        ]
        # no write, no search: the worker looks again when the claim runs out
        wait_for(lambda: "/claimed.md" not in unembedded(database_url), "the claimed row to be embedded", 60)


def test_rows_claimed_by_a_session_that_ended_are_embedded_at_once(settings, database_url):
    """A claim holds while the database session that took it lives: a row claimed by a session
    still open is left alone, and once that session ends (its process died) the row is embedded
    without waiting for the claim's lease (ten minutes here) to run out."""
    import threading

    from catalog.search import repo as search_repo

    headers = {"Authorization": f"Bearer {mint_dev_token(settings, 'admin')}"}
    claimed, release = threading.Event(), threading.Event()

    def other_process(store_id: str) -> None:
        async def run() -> None:
            conn = await asyncpg.connect(database_url)
            try:
                async with conn.transaction():  # written and claimed at once: the worker never sees it free
                    await conn.execute(
                        "INSERT INTO entries (store_id, scope, path, contents, created_by, updated_by) "
                        "VALUES ($1, 'u', '/owned.md', 'numbat termites', 'x', 'x')",
                        store_id,
                    )
                    rows = await search_repo.claim_unembedded(conn, 100, lease=600)
                assert "numbat termites" in [r["contents"] for r in rows]
                claimed.set()
                await asyncio.to_thread(release.wait, 60)
            finally:
                await conn.close()  # the process dies: its session ends

        asyncio.run(run())

    with TestClient(create_app(settings, encoder=HashEncoder()), raise_server_exceptions=False) as c:
        body = {"name": "emb-dead", "catalog_name": "main", "schema_name": "default"}
        assert c.post(f"{UC}/memory-stores", headers=headers, json=body).status_code == 200
        search = c.app.state.runtime.context.search
        query = "SELECT id FROM memory_stores WHERE name = 'emb-dead'"
        store_id = asyncio.run(_fetchval(database_url, query))
        thread = threading.Thread(target=other_process, args=(store_id,))
        thread.start()
        try:
            assert claimed.wait(30)
            before = search.passes.done
            search.written()
            wait_for(lambda: search.passes.done > before, "an embedding pass", 30)
            assert "/owned.md" in unembedded(database_url)  # its claimer lives: left alone
        finally:
            release.set()
            thread.join(30)
        search.written()
        wait_for(lambda: "/owned.md" not in unembedded(database_url), "the row to be embedded", 30)


async def _fetchval(url: str, statement: str) -> object:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(statement)
    finally:
        await conn.close()
