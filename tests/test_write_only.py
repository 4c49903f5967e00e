"""A principal that may write a store but not read it learns nothing of what the store holds:
writes are acknowledged without contents, and edits whose outcome depends on the text need READ
too (so success or failure is no oracle)."""

from __future__ import annotations

import pytest
from rest import UC

AGENTS = "/api/2.0/agents/memory-stores"
STORE = "main.default.dropbox"
ENTRIES = f"{UC}/memory-stores/{STORE}/entries"
SECRET = "The vault code is 4711.\nShip on Friday."


@pytest.fixture(scope="module")
def dropbox(client, token):  # type: ignore[no-untyped-def]
    """A store where `writer` holds WRITE only and `editor` READ and WRITE; one entry in it."""
    r = client.post(
        f"{UC}/memory-stores",
        headers=token(),
        json={"name": "dropbox", "catalog_name": "main", "schema_name": "default"},
    )
    assert r.status_code == 200, r.text
    r = client.patch(
        f"{UC}/permissions/memory_store/{STORE}",
        headers=token(),
        json={
            "changes": [
                {"principal": "writer", "add": ["WRITE_MEMORY_STORE"]},
                {"principal": "editor", "add": ["READ_MEMORY_STORE", "WRITE_MEMORY_STORE"]},
            ]
        },
    )
    assert r.status_code == 200, r.text
    r = client.post(
        ENTRIES,
        headers=token(),
        params={"scope": "ops"},
        json={"path": "/secret.md", "contents": SECRET, "description": "codes"},
    )
    assert r.status_code == 200, r.text
    return STORE


def _read(client, token, path: str) -> dict:  # type: ignore[no-untyped-def, type-arg]
    return client.get(f"{ENTRIES}:get", headers=token(), params={"scope": "ops", "path": path}).json()


ACK = {"scope", "path", "created_at", "created_by", "updated_at", "updated_by", "etag", "state", "provenance"}


def test_a_write_only_create_is_acknowledged_without_contents(client, token, dropbox):
    r = client.post(
        ENTRIES,
        headers=token("writer"),
        params={"scope": "ops"},
        json={
            "path": "/new.md",
            "contents": "fresh",
            "description": "d",
            "source_type": "s",
            "creation_reason": "CREATION_REASON_AGENT_INFERRED",
            "creation_source": "CREATION_SOURCE_ONLINE_AGENT",
        },
    )
    assert r.status_code == 200, r.text
    assert set(r.json()) == ACK and r.headers["etag"] == f'"{r.json()["etag"]}"'
    assert (
        client.get(
            f"{ENTRIES}:get", headers=token("writer"), params={"scope": "ops", "path": "/new.md"}
        ).status_code
        == 403
    )


def test_a_write_only_append_always_appends_and_shows_nothing(client, token, dropbox):
    before = client.get(
        f"{ENTRIES}:get", headers=token(), params={"scope": "ops", "path": "/secret.md"}
    ).json()
    r = client.post(
        ENTRIES,
        headers=token("writer"),
        params={"scope": "ops"},
        json={"path": "/secret.md", "contents": "Ship on Friday.", "write_mode": "APPEND"},
    )
    assert r.status_code == 200 and set(r.json()) == ACK
    # the line was already there, but a write-only caller's append is not deduplicated: the new
    # etag says nothing about what the entry held
    assert int(r.json()["etag"]) == int(before["etag"]) + 1
    after = client.get(
        f"{ENTRIES}:get", headers=token(), params={"scope": "ops", "path": "/secret.md"}
    ).json()
    assert after["contents"].endswith("Ship on Friday.\nShip on Friday.")
    # for a reader the same append is a no-op (idempotent retries)
    r = client.post(
        ENTRIES,
        headers=token("editor"),
        params={"scope": "ops"},
        json={"path": "/secret.md", "contents": "Ship on Friday.", "write_mode": "APPEND"},
    )
    assert r.json()["etag"] == after["etag"] and r.json()["contents"] == after["contents"]


@pytest.mark.parametrize(
    "edit",
    [
        {"str_replace": {"old_str": "4711", "new_str": "0000"}},  # present
        {"str_replace": {"old_str": "not in there", "new_str": "x"}},  # absent
        {"insert": {"insert_line": 1, "insert_text": "x"}},
        {"insert": {"insert_line": 99, "insert_text": "x"}},
    ],
)
def test_text_dependent_edits_need_read_and_answer_alike(client, token, dropbox, edit):
    r = client.patch(ENTRIES, headers=token("writer"), json={"scope": "ops", "path": "/secret.md", **edit})
    assert r.status_code == 403
    op = next(iter(edit))
    assert r.json()["message"] == (
        f"{op} reads the entry's text: writer may not read or search a memory store's entries: "
        f"requires READ_MEMORY_STORE on memory store {STORE}"
    )
    events = client.get(f"{UC}/system/audit", headers=token(), params={"principal": "writer"}).json()
    event = next(e for e in events["events"] if e["request_id"] == r.headers["x-request-id"])
    assert (event["decision"], event["privilege"], event["status_code"]) == ("deny", "READ_MEMORY_STORE", 403)


def test_write_only_edits_that_do_not_read_are_acknowledged_without_contents(client, token, dropbox):
    r = client.post(
        ENTRIES,
        headers=token(),
        params={"scope": "ops"},
        json={"path": "/edited.md", "contents": "old text", "write_mode": "OVERWRITE"},
    )
    assert r.status_code == 200
    for edit in (
        {"replace_all": {"contents": "replaced"}},
        {"description": "new"},
        {"append": {"text": "x"}},
        {"insert": {"insert_text": "y"}},  # no line: at the end, whatever the text holds
    ):
        body = {"scope": "ops", "path": "/edited.md", **edit}
        r = client.patch(ENTRIES, headers=token("writer"), json=body)
        assert r.status_code == 200, r.text
        assert set(r.json()) == ACK
    body = {"scope": "ops", "path": "/edited.md", "description": "seen"}
    r = client.patch(ENTRIES, headers=token("editor"), json=body)
    assert r.json()["contents"] == "replaced\nx\ny" and r.json()["description"] == "seen"


def test_the_agent_dialect_acknowledges_write_only_writes_without_content(client, token, dropbox):
    r = client.post(
        f"{AGENTS}/dropbox/entries",
        headers=token("writer"),
        json={"actor_id": "ops", "path": "/agent.md", "content": "agent secret", "description": "d"},
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert "content" not in body and "description" not in body and body["path"] == "/agent.md"
    r = client.patch(
        f"{AGENTS}/dropbox/{body['name'].removeprefix('memory-stores/dropbox/')}",
        headers=token("writer"),
        params={"update_mask": "description"},
        json={"description": "new"},
    )
    assert r.status_code == 200, r.text
    assert "content" not in r.json() and "description" not in r.json()
