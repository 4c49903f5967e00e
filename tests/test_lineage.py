"""Entry provenance (`derived_from`) and the lineage API: checks on write, transitive walks both
ways, deleted sources shown as deleted, READ_AUDIT to read it."""

from __future__ import annotations

import pytest
from rest import UC

LINEAGE = f"{UC}/system/lineage"


def write(client, token, store, scope, path, contents, sources=None, who="admin"):  # type: ignore[no-untyped-def]
    body = {"path": path, "contents": contents, **({"derived_from": sources} if sources else {})}
    return client.post(
        f"{UC}/memory-stores/main.default.{store}/entries",
        headers=token(who),
        params={"scope": scope},
        json=body,
    )


def ref(store, scope, path):  # type: ignore[no-untyped-def]
    return {"memory_store": f"main.default.{store}", "scope": scope, "path": path}


def create_store(client, token, name):  # type: ignore[no-untyped-def]
    r = client.post(
        f"{UC}/memory-stores",
        headers=token(),
        json={"name": name, "catalog_name": "main", "schema_name": "default"},
    )
    assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def stores(client, token):  # type: ignore[no-untyped-def]
    """Three empty stores: raw → facts → summary."""
    for name in ("raw", "facts", "summary"):
        create_store(client, token, name)


def test_provenance_is_checked_and_walked(client, token, stores):
    assert write(client, token, "raw", "u", "/chat/1.md", "User said they moved to Lyon").status_code == 200
    assert write(client, token, "raw", "u", "/chat/2.md", "User works nights").status_code == 200
    r = write(client, token, "facts", "u", "/city.md", "Lives in Lyon", [ref("raw", "u", "/chat/1.md")])
    assert r.status_code == 200, r.text
    r = write(
        client,
        token,
        "summary",
        "u",
        "/profile.md",
        "Night worker in Lyon",
        [ref("facts", "u", "/city.md"), ref("raw", "u", "/chat/2.md")],
    )
    assert r.status_code == 200, r.text

    # a source that does not exist is 400 (naming it), one the caller may not read is 403; nothing is written
    r = write(client, token, "summary", "u", "/bad.md", "x", [ref("raw", "u", "/nope.md")])
    assert r.status_code == 400 and "derived_from[0]" in r.json()["message"]
    r = client.patch(
        f"{UC}/permissions/memory_store/main.default.summary",
        headers=token(),
        json={"changes": [{"principal": "writer", "add": ["WRITE_MEMORY_STORE"]}]},
    )
    assert r.status_code == 200, r.text
    r = write(client, token, "summary", "u", "/bad.md", "x", [ref("raw", "u", "/chat/1.md")], who="writer")
    assert r.status_code == 403 and "READ_MEMORY_STORE" in r.json()["message"]
    assert (
        client.get(
            f"{UC}/memory-stores/main.default.summary/entries:get",
            headers=token(),
            params={"scope": "u", "path": "/bad.md"},
        ).status_code
        == 404
    )

    # upstream of the summary entry: transitive to the raw chat line
    r = client.get(
        LINEAGE,
        headers=token(),
        params={
            "securable_full_name": "main.default.summary",
            "scope": "u",
            "path": "/profile.md",
            "direction": "upstream",
        },
    )
    assert r.status_code == 200, r.text
    edges = [
        (e["source"]["memory_store"], e["source"]["path"], e["target"]["path"], e["depth"])
        for e in r.json()["edges"]
    ]
    assert ("main.default.facts", "/city.md", "/profile.md", 1) in edges
    assert ("main.default.raw", "/chat/2.md", "/profile.md", 1) in edges
    assert ("main.default.raw", "/chat/1.md", "/city.md", 2) in edges

    # downstream of the raw store: everything derived from it, at any depth
    r = client.get(
        LINEAGE,
        headers=token(),
        params={"securable_full_name": "main.default.raw", "direction": "downstream"},
    )
    targets = {(e["target"]["memory_store"], e["target"]["path"]) for e in r.json()["edges"]}
    assert targets == {("main.default.facts", "/city.md"), ("main.default.summary", "/profile.md")}

    # a deleted source stays, marked deleted; edges survive changes to the entries
    r = client.delete(
        f"{UC}/memory-stores/main.default.raw/entries",
        headers=token(),
        params={"scope": "u", "path": "/chat/1.md"},
    )
    assert r.status_code == 200, r.text
    r = client.get(
        LINEAGE,
        headers=token(),
        params={
            "securable_full_name": "main.default.facts",
            "scope": "u",
            "path": "/city.md",
            "direction": "upstream",
        },
    )
    (edge,) = r.json()["edges"]
    assert edge["source"]["path"] == "/chat/1.md" and edge["source"]["deleted"] is True
    assert edge["target"]["deleted"] is False


def test_lineage_needs_read_audit_and_valid_parameters(client, token, stores):
    params = {"securable_full_name": "main.default.raw"}
    assert client.get(LINEAGE, headers=token("someone"), params=params).status_code == 403
    r = client.get(LINEAGE, headers=token(), params=params)
    assert r.status_code == 200 and isinstance(r.json()["edges"], list)
    assert client.get(LINEAGE, headers=token(), params={**params, "direction": "sideways"}).status_code == 400
    assert client.get(LINEAGE, headers=token(), params={**params, "depth": 99}).status_code == 400
    assert (
        client.get(LINEAGE, headers=token(), params={"securable_full_name": "main.default.gone"}).status_code
        == 404
    )


def test_request_lineage_as_openlineage_run_events(client, token):
    create_store(client, token, "ol")
    assert write(client, token, "ol", "u2", "/x.md", "a note").status_code == 200
    r = client.get(f"{UC}/memory-stores/main.default.ol/entries", headers=token(), params={"scope": "u2"})
    assert r.status_code == 200
    r = client.get(f"{LINEAGE}/openlineage", headers=token(), params={"page_size": 1000})
    assert r.status_code == 200
    events = r.json()["events"]
    writes = [
        e for e in events if e["outputs"] == [{"namespace": "memory-catalog", "name": "main.default.ol"}]
    ]
    reads = [e for e in events if e["inputs"] == [{"namespace": "memory-catalog", "name": "main.default.ol"}]]
    assert len(writes) == 1 and len(reads) == 1
    (event,) = writes
    assert event["eventType"] == "COMPLETE" and event["job"]["name"] == "entries.write"
    assert event["run"]["facets"]["catalog"]["principal"] == "admin" and event["eventTime"].endswith("Z")
    assert client.get(f"{LINEAGE}/openlineage", headers=token("someone")).status_code == 403
