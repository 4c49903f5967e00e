"""Expiry: `ttl_seconds` on a write (or the store's `default_ttl_seconds`) sets `expires_at`; an
expired entry is gone at once from get, list and every search mode, its path can be written
afresh, and the background sweep deletes it from storage with a `system.expire` audit event,
except in a store under legal hold."""

from __future__ import annotations

import asyncio
import time

import asyncpg
from rest import UC
from stores import make_store


def wait_until(condition, seconds: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition did not come true in time"
        time.sleep(0.1)


def stored(url: str, path: str) -> int:
    async def count() -> int:
        conn = await asyncpg.connect(url)
        try:
            return int(await conn.fetchval("SELECT count(*) FROM entries WHERE path = $1", path))
        finally:
            await conn.close()

    return asyncio.run(count())


def test_an_expired_entry_is_gone_at_once_and_swept_after(client, token, settings):
    store = make_store(client, token, "ttl")
    r = client.post(
        f"{store}/entries",
        headers=token(),
        params={"scope": "t"},
        json={"path": "/brief.md", "contents": "the penguin password is fish", "ttl_seconds": 1},
    )
    assert r.status_code == 200, r.text
    assert r.json()["expires_at"] - r.json()["updated_at"] in range(900, 1600)
    client.post(
        f"{store}/entries",
        headers=token(),
        params={"scope": "t"},
        json={"path": "/stays.md", "contents": "penguin"},
    )
    get = {"scope": "t", "path": "/brief.md"}
    assert client.get(f"{store}/entries:get", headers=token(), params=get).status_code == 200

    wait_until(lambda: client.get(f"{store}/entries:get", headers=token(), params=get).status_code == 404)
    listed = client.get(f"{store}/entries", headers=token(), params={"scope": "t"}).json()["entries"]
    assert [e["path"] for e in listed] == ["/stays.md"]
    for mode in ("keyword", "semantic", "hybrid"):
        hits = client.post(
            f"{store}/entries:search",
            headers=token(),
            json={"scope": "t", "query": "penguin password fish", "mode": mode},
        ).json()["results"]
        assert [h["memory_entry"]["path"] for h in hits] == ["/stays.md"], mode

    wait_until(lambda: stored(settings.database_url, "/brief.md") == 0)  # the sweep deleted it
    events = client.get(
        f"{UC}/system/audit",
        headers=token(),
        params={"action_name": "system.expire", "securable_full_name": "main.default.ttl"},
    ).json()["events"]
    assert [(e["decision"], e["result_count"]) for e in events] == [("system", 1)]
    history = client.get(f"{store}/entries:history", headers=token(), params=get).json()["versions"]
    assert (history[0]["operation"], history[0]["updated_by"]) == ("delete", "system:expiry")
    # the path is free again
    r = client.post(
        f"{store}/entries",
        headers=token(),
        params={"scope": "t"},
        json={"path": "/brief.md", "contents": "new"},
    )
    assert r.status_code == 200 and "expires_at" not in r.json()


def test_a_store_default_and_a_held_store(client, token, settings):
    store = make_store(client, token, "ttl-default")
    r = client.patch(
        f"{UC}/memory-stores/main.default.ttl-default", headers=token(), json={"default_ttl_seconds": 3600}
    )
    assert r.status_code == 200 and r.json()["default_ttl_seconds"] == 3600
    r = client.post(
        f"{store}/entries", headers=token(), params={"scope": "d"}, json={"path": "/d.md", "contents": "d"}
    )
    assert r.json()["expires_at"] - r.json()["updated_at"] in range(3_599_000, 3_601_000)
    r = client.post(
        f"{store}/entries",
        headers=token(),
        params={"scope": "d"},
        json={"path": "/e.md", "contents": "e", "ttl_seconds": 60},
    )
    assert r.json()["expires_at"] - r.json()["updated_at"] in range(59_000, 61_000)  # the write's own wins
    client.patch(
        f"{UC}/memory-stores/main.default.ttl-default", headers=token(), json={"default_ttl_seconds": 0}
    )
    r = client.post(
        f"{store}/entries", headers=token(), params={"scope": "d"}, json={"path": "/f.md", "contents": "f"}
    )
    assert "expires_at" not in r.json()
    r = client.post(
        f"{store}/entries",
        headers=token(),
        params={"scope": "d"},
        json={"path": "/g.md", "contents": "g", "ttl_seconds": 0},
    )
    assert r.status_code == 400 and "ttl_seconds" in r.json()["message"]

    held = make_store(client, token, "ttl-held")
    client.patch(f"{UC}/memory-stores/main.default.ttl-held", headers=token(), json={"legal_hold": True})
    r = client.post(
        f"{held}/entries",
        headers=token(),
        params={"scope": "h"},
        json={"path": "/held.md", "contents": "h", "ttl_seconds": 1},
    )
    assert r.status_code == 200
    get = {"scope": "h", "path": "/held.md"}
    wait_until(lambda: client.get(f"{held}/entries:get", headers=token(), params=get).status_code == 404)
    # not readable, but kept in storage while the hold lasts
    other = make_store(client, token, "ttl-free")
    client.post(
        f"{other}/entries",
        headers=token(),
        params={"scope": "h"},
        json={"path": "/free.md", "contents": "f", "ttl_seconds": 1},
    )
    wait_until(lambda: stored(settings.database_url, "/free.md") == 0)
    assert stored(settings.database_url, "/held.md") == 1


def test_a_held_store_keeps_an_expired_entry_when_its_path_is_written_again(client, token, settings):
    held = make_store(client, token, "ttl-held-rewrite")
    client.patch(
        f"{UC}/memory-stores/main.default.ttl-held-rewrite", headers=token(), json={"legal_hold": True}
    )
    first = {"path": "/kept.md", "contents": "the first words", "ttl_seconds": 1}
    assert (
        client.post(f"{held}/entries", headers=token(), params={"scope": "k"}, json=first).status_code == 200
    )
    get = {"scope": "k", "path": "/kept.md"}
    wait_until(lambda: client.get(f"{held}/entries:get", headers=token(), params=get).status_code == 404)
    for mode in ("EXCLUSIVE", "OVERWRITE", "APPEND"):
        again = {"path": "/kept.md", "contents": "other words", "write_mode": mode}
        r = client.post(f"{held}/entries", headers=token(), params={"scope": "k"}, json=again)
        assert r.status_code == 409, (mode, r.text)
        assert r.json()["error_code"] == "RESOURCE_CONFLICT" and "legal hold" in r.json()["message"]
    body = {"entries": [{"path": "/kept.md", "contents": "batched", "write_mode": "OVERWRITE"}]}
    r = client.post(f"{held}/entries:batchCreate", headers=token(), params={"scope": "k"}, json=body)
    assert [(x["status"], x.get("error_code")) for x in r.json()["results"]] == [
        ("FAILED", "RESOURCE_CONFLICT")
    ]
    assert stored(settings.database_url, "/kept.md") == 1  # still in storage, as the hold requires
    # once the hold is lifted, the path is written afresh
    client.patch(
        f"{UC}/memory-stores/main.default.ttl-held-rewrite", headers=token(), json={"legal_hold": False}
    )
    r = client.post(
        f"{held}/entries",
        headers=token(),
        params={"scope": "k"},
        json={"path": "/kept.md", "contents": "new"},
    )
    assert r.status_code == 200 and r.json()["contents"] == "new"


def test_a_patch_with_ttl_seconds_renews_the_expiry_and_nothing_else(client, token):
    """`ttl_seconds` alone on PATCH moves `expires_at` from now and keeps the version (an If-Match
    taken before still holds, the history gains nothing); it needs WRITE; bad values are 400."""
    store = make_store(client, token, "ttl-renew")
    r = client.post(
        f"{store}/entries",
        headers=token(),
        params={"scope": "t"},
        json={"path": "/note.md", "contents": "renew me", "ttl_seconds": 60},
    )
    assert r.status_code == 200, r.text
    before = r.json()
    r = client.patch(
        f"{store}/entries",
        headers={**token(), "If-Match": f'"{before["etag"]}"'},
        json={"scope": "t", "path": "/note.md", "ttl_seconds": 3600},
    )
    assert r.status_code == 200, r.text
    renewed = r.json()
    assert renewed["etag"] == before["etag"] and renewed["contents"] == "renew me"
    assert renewed["expires_at"] - before["expires_at"] > 3000 * 1000
    assert r.headers["etag"] == f'"{before["etag"]}"'
    history = client.get(
        f"{store}/entries:history", headers=token(), params={"scope": "t", "path": "/note.md"}
    )
    assert len(history.json()["versions"]) == 1
    got = client.get(f"{store}/entries:get", headers=token(), params={"scope": "t", "path": "/note.md"})
    assert got.json()["expires_at"] == renewed["expires_at"]
    # with another change, in the same transaction (a new version)
    r = client.patch(
        f"{store}/entries",
        headers=token(),
        json={"scope": "t", "path": "/note.md", "append": {"text": "more"}, "ttl_seconds": 120},
    )
    assert r.status_code == 200 and r.json()["etag"] == str(int(before["etag"]) + 1), r.text
    assert r.json()["expires_at"] < renewed["expires_at"]
    # a stale If-Match is refused; a reader may not renew; the value is checked
    r = client.patch(
        f"{store}/entries",
        headers={**token(), "If-Match": f'"{before["etag"]}"'},
        json={"scope": "t", "path": "/note.md", "ttl_seconds": 60},
    )
    assert r.status_code == 409 and r.json()["error_code"] == "ABORTED"
    grant = {"changes": [{"principal": "reader", "add": ["READ_MEMORY_STORE"]}]}
    assert (
        client.patch(
            f"{UC}/permissions/memory_store/main.default.ttl-renew", headers=token(), json=grant
        ).status_code
        == 200
    )
    r = client.patch(
        f"{store}/entries",
        headers=token("reader"),
        json={"scope": "t", "path": "/note.md", "ttl_seconds": 60},
    )
    assert r.status_code == 403
    for bad in (0, -1, "60", 10**12):
        r = client.patch(
            f"{store}/entries", headers=token(), json={"scope": "t", "path": "/note.md", "ttl_seconds": bad}
        )
        assert r.status_code == 400 and "ttl_seconds" in r.json()["message"], (bad, r.text)
