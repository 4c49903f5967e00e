"""`entries:batchCreate`: up to 100 entries of one scope in one request, one result each; a
failing entry (a conflict, a bad field) does not undo the others; the batch is searchable at once."""

from __future__ import annotations

from rest import UC
from stores import make_store


def test_a_batch_writes_each_entry_on_its_own(client, token):
    store = make_store(client, token, "batch")
    client.post(
        f"{store}/entries",
        headers=token(),
        params={"scope": "u"},
        json={"path": "/taken.md", "contents": "t"},
    )
    body = {
        "entries": [
            {"path": "/one.md", "contents": "the walrus sleeps on the ice", "description": "walrus"},
            {"path": "/taken.md", "contents": "again"},  # EXCLUSIVE: exists already
            {"path": "/long.md", "contents": "x", "description": "d" * 5000},  # over the limit: named
            {"path": "/taken.md", "contents": "more", "write_mode": "APPEND"},
            {"path": "/two.md", "contents": "the narwhal has a tusk"},
        ]
    }
    r = client.post(f"{store}/entries:batchCreate", headers=token(), params={"scope": "u"}, json=body)
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [(x["path"], x["status"], x.get("error_code")) for x in results] == [
        ("/one.md", "CREATED", None),
        ("/taken.md", "FAILED", "ALREADY_EXISTS"),
        ("/long.md", "FAILED", "PAYLOAD_TOO_LARGE"),
        ("/taken.md", "FAILED", "INVALID_PARAMETER_VALUE"),  # the same path twice in one batch
        ("/two.md", "CREATED", None),
    ]
    assert "entries[2].description" in results[2]["message"] and "twice" in results[3]["message"]
    get = client.get(f"{store}/entries:get", headers=token(), params={"scope": "u", "path": "/taken.md"})
    assert get.json()["contents"] == "t"  # the failed ones changed nothing
    hits = client.post(
        f"{store}/entries:search",
        headers=token(),
        json={"scope": "u", "query": "narwhal tusk", "mode": "keyword"},
    ).json()["results"]
    assert [h["memory_entry"]["path"] for h in hits] == ["/two.md"]  # searchable once answered

    # a batch-wide write mode; overwrites and appends report UPDATED, a repeated append UNCHANGED
    body = {
        "write_mode": "APPEND",
        "entries": [{"path": "/one.md", "contents": "it snores"}, {"path": "/three.md", "contents": "new"}],
    }
    r = client.post(f"{store}/entries:batchCreate", headers=token(), params={"scope": "u"}, json=body)
    assert [x["status"] for x in r.json()["results"]] == ["UPDATED", "CREATED"]
    r = client.post(f"{store}/entries:batchCreate", headers=token(), params={"scope": "u"}, json=body)
    assert [x["status"] for x in r.json()["results"]] == ["UNCHANGED", "UNCHANGED"]


def test_batch_limits_and_privileges(client, token):
    store = make_store(client, token, "batch-acl")
    too_many = {"entries": [{"path": f"/{i}.md", "contents": "x"} for i in range(101)]}
    r = client.post(f"{store}/entries:batchCreate", headers=token(), params={"scope": "u"}, json=too_many)
    assert r.status_code == 400 and "entries" in r.json()["message"]
    r = client.post(
        f"{store}/entries:batchCreate", headers=token(), params={"scope": "u"}, json={"entries": []}
    )
    assert r.status_code == 400
    one = {"entries": [{"path": "/a.md", "contents": "x"}]}
    r = client.post(
        f"{store}/entries:batchCreate", headers=token("stranger"), params={"scope": "u"}, json=one
    )
    assert r.status_code == 403
    r = client.post(f"{store}/entries:batchCreate", headers=token(), json=one)
    assert r.status_code == 400 and "scope" in r.json()["message"]
    # a batch that does not match the schema is refused whole, naming the field
    bad = {"entries": [{"path": "/ok.md"}, {"path": "not-a-path"}]}
    r = client.post(f"{store}/entries:batchCreate", headers=token(), params={"scope": "u"}, json=bad)
    assert r.status_code == 400 and r.json()["details"][0]["field"] == "entries[1].path"
    hundred = {"entries": [{"path": f"/n/{i}.md", "contents": f"note {i}"} for i in range(100)]}
    r = client.post(f"{store}/entries:batchCreate", headers=token(), params={"scope": "u"}, json=hundred)
    assert r.status_code == 200 and {x["status"] for x in r.json()["results"]} == {"CREATED"}
    events = client.get(
        f"{UC}/system/audit",
        headers=token(),
        params={
            "securable_full_name": "main.default.batch-acl",
            "action_name": "entries.write",
            "decision": "allow",
        },
    ).json()["events"]
    assert [e["result_count"] for e in events] == [100]  # one event for the batch, with its count
