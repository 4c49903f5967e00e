"""Redaction of a version (`entries:redact`, MANAGE): its contents and description are replaced in
the history by who redacted it, when and why, and, when it is the current version, the entry's
text leaves the entry and both indexes; later versions, lineage and the audit chain stay."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from rest import UC

NAME = "main.default.redacted"
STORE = f"{UC}/memory-stores/{NAME}"


@pytest.fixture(scope="module", autouse=True)
def store(client, token):  # type: ignore[no-untyped-def]
    body = {"name": "redacted", "catalog_name": "main", "schema_name": "default"}
    assert client.post(f"{UC}/memory-stores", headers=token(), json=body).status_code == 200
    r = client.patch(
        f"{UC}/permissions/memory_store/{NAME}",
        headers=token(),
        json={"changes": [{"principal": "writer", "add": ["READ_MEMORY_STORE", "WRITE_MEMORY_STORE"]}]},
    )
    assert r.status_code == 200, r.text


def write(client, token, path: str, text: str, **more) -> dict:  # type: ignore[no-untyped-def]
    body = {"path": path, "contents": text, "description": text, "write_mode": "OVERWRITE", **more}
    r = client.post(f"{STORE}/entries", headers=token(), params={"scope": "u"}, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def redact(client, token, path: str, etag: str, reason: str = "a secret", who: str = "admin"):  # type: ignore[no-untyped-def]
    body = {"scope": "u", "path": path, "etag": etag, "reason": reason}
    return client.post(f"{STORE}/entries:redact", headers=token(who), json=body)


def history(client, token, path: str) -> list[dict]:  # type: ignore[no-untyped-def]
    r = client.get(f"{STORE}/entries:history", headers=token(), params={"scope": "u", "path": path})
    assert r.status_code == 200, r.text
    return r.json()["versions"]


def found(client, token, query: str, mode: str) -> list[str]:  # type: ignore[no-untyped-def]
    r = client.post(
        f"{STORE}/entries:search", headers=token(), json={"scope": "u", "query": query, "mode": mode}
    )
    assert r.status_code == 200, r.text
    return [x["memory_entry"]["path"] for x in r.json()["results"]]


def stored_anywhere(url: str, text: str) -> list[str]:
    """The entries and history rows of any store whose contents or description hold `text`."""

    async def run() -> list[str]:
        conn = await asyncpg.connect(url)
        try:
            rows = await conn.fetch(
                "SELECT 'entries' AS t FROM entries WHERE contents LIKE $1 OR description LIKE $1 UNION ALL "
                "SELECT 'entry_versions' FROM entry_versions WHERE contents LIKE $1 OR description LIKE $1",
                f"%{text}%",
            )
            return [r["t"] for r in rows]
        finally:
            await conn.close()

    return asyncio.run(run())


def test_an_old_version_is_redacted_in_the_history(client, token, database_url):
    write(client, token, "/creds.md", "the wifi password is hunter2")
    write(client, token, "/creds.md", "the wifi password is on the fridge")
    r = redact(client, token, "/creds.md", '"1"', reason="a password")
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["etag"] == "1" and answer["current"] is False
    assert answer["redacted"]["redacted_by"] == "admin" and answer["redacted"]["reason"] == "a password"
    v2, v1 = history(client, token, "/creds.md")
    assert v1["etag"] == "1" and "contents" not in v1 and "description" not in v1
    assert v1["redacted"] == answer["redacted"] and v1["operation"] == "create"
    assert v2["contents"] == "the wifi password is on the fridge" and "redacted" not in v2
    assert stored_anywhere(database_url, "hunter2") == []
    # it cannot come back: no restore, no second redaction
    body = {"scope": "u", "path": "/creds.md", "etag": "1"}
    r = client.post(f"{STORE}/entries:restore", headers=token(), json=body)
    assert r.status_code == 409 and "redacted" in r.json()["message"], r.text
    assert redact(client, token, "/creds.md", "1").status_code == 409


def test_the_current_version_leaves_the_entry_and_both_indexes(client, token, database_url):
    write(client, token, "/key.md", "the deploy token is zebracorn42 for the api")
    derived = write(
        client,
        token,
        "/summary.md",
        "a deploy token exists",
        derived_from=[{"memory_store": NAME, "scope": "u", "path": "/key.md"}],
    )
    assert found(client, token, "zebracorn42", "keyword") == ["/key.md"]
    r = redact(client, token, "/key.md", "1")  # its first version, the current one
    assert r.status_code == 200 and r.json()["current"] is True, r.text
    entry = client.get(f"{STORE}/entries:get", headers=token(), params={"scope": "u", "path": "/key.md"})
    assert entry.status_code == 200 and entry.headers["etag"].strip('"') == "1"  # the same version
    assert "contents" not in entry.json() and "description" not in entry.json(), entry.json()
    assert found(client, token, "zebracorn42", "keyword") == []  # gone from the full-text index
    semantic = client.post(
        f"{STORE}/entries:search",
        headers=token(),
        json={
            "scope": "u",
            "query": "the deploy token is zebracorn42 for the api",
            "mode": "semantic",
            "explain": True,
        },
    ).json()
    key_hit = [x for x in semantic["results"] if x["memory_entry"]["path"] == "/key.md"]
    assert not key_hit or key_hit[0]["score_details"]["cosine"] < 0.5, key_hit  # not its old vector
    assert stored_anywhere(database_url, "zebracorn42") == []
    # the lineage edge stays
    r = client.get(
        f"{UC}/system/lineage",
        headers=token(),
        params={"securable_full_name": NAME, "scope": "u", "path": "/summary.md", "direction": "upstream"},
    )
    assert r.status_code == 200 and "/key.md" in r.text, r.text
    assert derived["path"] == "/summary.md"
    # and the audit chain still verifies
    assert client.get(f"{UC}/system/audit:verify", headers=token()).json()["ok"] is True


def test_redaction_needs_manage_and_a_reason(client, token):
    write(client, token, "/other.md", "nothing secret")
    r = redact(client, token, "/other.md", "1", who="writer")  # READ and WRITE, not MANAGE
    assert r.status_code == 403 and "MANAGE" in r.json()["message"], r.text
    assert redact(client, token, "/other.md", "1", reason="   ").status_code == 400
    r = redact(client, token, "/other.md", "9")
    assert r.status_code == 404, r.text
    r = redact(client, token, "/missing.md", "1")
    assert r.status_code == 404, r.text
