"""Entry history over HTTP: every version of an entry is kept (create, each change, its deletion,
a restore), readable newest first with READ, restorable with WRITE (and READ), bounded by the
store's properties, and erased with its scope."""

from __future__ import annotations

from rest import UC
from stores import make_store


def history(client, headers, store: str, scope: str, path: str) -> list[dict]:
    r = client.get(f"{store}/entries:history", headers=headers, params={"scope": scope, "path": path})
    assert r.status_code == 200, r.text
    return r.json()["versions"]


def test_every_version_is_kept_and_a_deleted_entry_can_be_restored(client, token):
    store = make_store(client, token, "hist")
    r = client.patch(
        f"{UC}/permissions/memory_store/main.default.hist",
        headers=token(),
        json={"changes": [{"principal": "bob", "add": ["READ_MEMORY_STORE", "WRITE_MEMORY_STORE"]}]},
    )
    assert r.status_code == 200, r.text
    write = {"scope": "ann"}
    assert (
        client.post(
            f"{store}/entries", headers=token(), params=write, json={"path": "/a.md", "contents": "one"}
        ).status_code
        == 200
    )
    client.post(
        f"{store}/entries",
        headers=token("bob"),
        params=write,
        json={"path": "/a.md", "contents": "two", "description": "second", "write_mode": "OVERWRITE"},
    )
    r = client.patch(
        f"{store}/entries",
        headers=token(),
        json={"scope": "ann", "path": "/a.md", "str_replace": {"old_str": "two", "new_str": "three"}},
    )
    assert r.status_code == 200, r.text
    versions = history(client, token(), store, "ann", "/a.md")
    assert [(v["etag"], v["operation"], v.get("contents"), v["updated_by"]) for v in versions] == [
        ("3", "update", "three", "admin"),
        ("2", "update", "two", "bob"),
        ("1", "create", "one", "admin"),
    ]
    assert versions[1]["description"] == "second" and versions[0]["updated_at"] >= versions[1]["updated_at"]

    # the deletion is a version too (who deleted it), and the history outlives the entry
    r = client.delete(f"{store}/entries", headers=token("bob"), params={"scope": "ann", "path": "/a.md"})
    assert r.status_code == 200, r.text
    versions = history(client, token(), store, "ann", "/a.md")
    assert (versions[0]["etag"], versions[0]["operation"], versions[0]["updated_by"]) == (
        "4",
        "delete",
        "bob",
    )
    assert "contents" not in versions[0]

    r = client.post(
        f"{store}/entries:restore", headers=token(), json={"scope": "ann", "path": "/a.md", "etag": '"2"'}
    )
    assert r.status_code == 200, r.text
    assert r.json()["contents"] == "two" and r.json()["description"] == "second"
    got = client.get(f"{store}/entries:get", headers=token(), params={"scope": "ann", "path": "/a.md"})
    assert got.json()["contents"] == "two"
    assert history(client, token(), store, "ann", "/a.md")[0]["operation"] == "restore"

    # restoring over an existing entry makes a new version with the old text
    r = client.post(
        f"{store}/entries:restore", headers=token(), json={"scope": "ann", "path": "/a.md", "etag": "3"}
    )
    assert r.status_code == 200 and r.json()["contents"] == "three" and r.headers["etag"] == '"2"'
    r = client.post(
        f"{store}/entries:restore", headers=token(), json={"scope": "ann", "path": "/a.md", "etag": "99"}
    )
    assert r.status_code == 404 and r.json()["error_code"] == "NOT_FOUND"
    r = client.post(
        f"{store}/entries:restore", headers=token(), json={"scope": "ann", "path": "/a.md", "etag": "x"}
    )
    assert r.status_code == 400 and "etag" in r.json()["message"]
    r = client.get(f"{store}/entries:history", headers=token(), params={"scope": "ann", "path": "/never.md"})
    assert r.status_code == 404


def test_history_is_governed(client, token):
    store = make_store(client, token, "hist-acl")
    client.post(
        f"{store}/entries", headers=token(), params={"scope": "s"}, json={"path": "/x.md", "contents": "x"}
    )
    grants = [("reader", ["READ_MEMORY_STORE"]), ("writer", ["WRITE_MEMORY_STORE"])]
    for principal, privileges in grants:
        r = client.patch(
            f"{UC}/permissions/memory_store/main.default.hist-acl",
            headers=token(),
            json={"changes": [{"principal": principal, "add": privileges}]},
        )
        assert r.status_code == 200, r.text
    assert len(history(client, token("reader"), store, "s", "/x.md")) == 1
    restore = {"scope": "s", "path": "/x.md", "etag": "1"}
    assert client.post(f"{store}/entries:restore", headers=token("reader"), json=restore).status_code == 403
    # WRITE alone does not read a version's text
    assert client.post(f"{store}/entries:restore", headers=token("writer"), json=restore).status_code == 403
    r = client.get(
        f"{store}/entries:history", headers=token("stranger"), params={"scope": "s", "path": "/x.md"}
    )
    assert r.status_code == 403


def test_the_store_bounds_the_history_and_erasure_removes_it(client, token):
    store = make_store(client, token, "hist-bound", **{"history.max_versions": "3"})
    for n in range(30):
        r = client.post(
            f"{store}/entries",
            headers=token(),
            params={"scope": "erin"},
            json={"path": "/b.md", "contents": f"v{n}", "write_mode": "OVERWRITE"},
        )
        assert r.status_code == 200, r.text
    kept = history(client, token(), store, "erin", "/b.md")
    assert [v["etag"] for v in kept] == ["30", "29", "28"]  # pruned at every tenth version
    client.post(
        f"{store}/entries", headers=token(), params={"scope": "keep"}, json={"path": "/b.md", "contents": "k"}
    )
    r = client.post(f"{UC}/system/erase-scope", headers=token(), json={"scope": "erin"})
    assert r.status_code == 200, r.text
    r = client.get(f"{store}/entries:history", headers=token(), params={"scope": "erin", "path": "/b.md"})
    assert r.status_code == 404  # no version of an erased scope is left
    assert len(history(client, token(), store, "keep", "/b.md")) == 1
    client.delete(f"{store}/entries", headers=token(), params={"scope": "keep", "all": "true"})
    r = client.get(f"{store}/entries:history", headers=token(), params={"scope": "keep", "path": "/b.md"})
    assert r.status_code == 404


def test_deleting_a_store_deletes_its_entries_history(client, token, settings):
    import asyncio

    import asyncpg

    store = make_store(client, token, "hist-gone")
    client.post(
        f"{store}/entries", headers=token(), params={"scope": "z"}, json={"path": "/g.md", "contents": "g"}
    )
    assert client.delete(f"{UC}/memory-stores/main.default.hist-gone", headers=token()).status_code == 200

    async def left() -> int:
        conn = await asyncpg.connect(settings.database_url)
        try:
            return int(
                await conn.fetchval(
                    "SELECT count(*) FROM entry_versions WHERE path = '/g.md' AND scope = 'z'"
                )
            )
        finally:
            await conn.close()

    assert asyncio.run(left()) == 0
