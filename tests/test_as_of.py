"""As-of reads for auditors: `as_of` (epoch ms) on `entries:get` and the entries list answers the
store as it was then, from the kept history: later writes left out, entries deleted since
included; it needs READ_MEMORY_STORE and the time asked is in the request's audit event."""

from __future__ import annotations

import time

import pytest
from rest import UC

STORE = f"{UC}/memory-stores/main.default.asof"


def now_ms() -> int:
    time.sleep(0.02)  # the writes before and after are apart from the time taken
    at = int(time.time() * 1000)
    time.sleep(0.02)
    return at


def write(client, token, path: str, text: str, scope: str = "u") -> dict:  # type: ignore[no-untyped-def]
    body = {"path": path, "contents": text, "description": text, "write_mode": "OVERWRITE"}
    r = client.post(f"{STORE}/entries", headers=token(), params={"scope": scope}, json=body)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def times(client, token):  # type: ignore[no-untyped-def]
    body = {"name": "asof", "catalog_name": "main", "schema_name": "default"}
    assert client.post(f"{UC}/memory-stores", headers=token(), json=body).status_code == 200
    before = now_ms()
    write(client, token, "/a.md", "first text")
    write(client, token, "/gone.md", "soon deleted")
    t1 = now_ms()
    write(client, token, "/a.md", "second text")
    r = client.delete(f"{STORE}/entries", headers=token(), params={"scope": "u", "path": "/gone.md"})
    assert r.status_code == 200, r.text
    write(client, token, "/later.md", "written after")
    t2 = now_ms()
    return before, t1, t2


def get(client, token, path: str, at: int, who: str = "admin"):  # type: ignore[no-untyped-def]
    params = {"scope": "u", "path": path, "as_of": at}
    return client.get(f"{STORE}/entries:get", headers=token(who), params=params)


def listed(client, token, at: int, **params) -> dict[str, str]:  # type: ignore[no-untyped-def]
    r = client.get(f"{STORE}/entries", headers=token(), params={"scope": "u", "as_of": at, **params})
    assert r.status_code == 200, r.text
    return {e["path"]: e.get("description") for e in r.json()["entries"]}  # (a list has no contents)


def test_get_answers_the_version_alive_then(client, token, times):
    before, t1, t2 = times
    r = get(client, token, "/a.md", t1)
    assert r.status_code == 200, r.text
    assert r.json()["contents"] == "first text" and r.headers["etag"].strip('"') == "1"
    assert get(client, token, "/a.md", t2).json()["contents"] == "second text"
    assert get(client, token, "/gone.md", t1).json()["contents"] == "soon deleted"  # deleted since
    assert get(client, token, "/gone.md", t2).status_code == 404  # deleted by then
    assert get(client, token, "/later.md", t1).status_code == 404  # written after
    assert get(client, token, "/a.md", before).status_code == 404  # not yet written
    # the time the history gives a version finds it
    history = client.get(f"{STORE}/entries:history", headers=token(), params={"scope": "u", "path": "/a.md"})
    v2 = next(v for v in history.json()["versions"] if v["etag"] == "2")
    assert get(client, token, "/a.md", v2["updated_at"]).json()["contents"] == "second text"


def test_the_list_answers_the_store_as_it_was(client, token, times):
    before, t1, t2 = times
    assert listed(client, token, t1) == {"/a.md": "first text", "/gone.md": "soon deleted"}
    assert listed(client, token, t2) == {"/a.md": "second text", "/later.md": "written after"}
    assert listed(client, token, before) == {}
    # pages as usual, and a page token is good only for the same time
    r = client.get(f"{STORE}/entries", headers=token(), params={"scope": "u", "as_of": t1, "page_size": 1})
    page = r.json()
    assert [e["path"] for e in page["entries"]] == ["/a.md"] and page["next_page_token"]
    params = {"scope": "u", "as_of": t1, "page_size": 1, "page_token": page["next_page_token"]}
    r = client.get(f"{STORE}/entries", headers=token(), params=params)
    assert [e["path"] for e in r.json()["entries"]] == ["/gone.md"]
    params["as_of"] = t2
    assert client.get(f"{STORE}/entries", headers=token(), params=params).status_code == 400


def test_as_of_needs_read_and_is_audited(client, token, times):
    _, t1, _ = times
    r = get(client, token, "/a.md", t1, who="mallory")
    assert r.status_code == 403, r.text
    r = get(client, token, "/a.md", t1)
    assert r.status_code == 200, r.text
    events = client.get(f"{UC}/system/audit", headers=token(), params={"page_size": 50}).json()["events"]
    event = next(e for e in events if e["request_id"] == r.headers["x-request-id"])
    assert event["action_name"] == "entries.read" and event["request_params"]["as_of"] == str(t1), event


@pytest.mark.parametrize("value", [-1, "soon", 10**15])
def test_a_bad_as_of_is_400_naming_it(client, token, times, value):
    r = client.get(
        f"{STORE}/entries:get", headers=token(), params={"scope": "u", "path": "/a.md", "as_of": value}
    )
    assert r.status_code == 400 and "as_of" in r.text, r.text


def searched(client, token, at: int, query: str, mode: str = "hybrid", **more) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    body = {"scope": "u", "query": query, "mode": mode, "as_of": at, **more}
    r = client.post(f"{STORE}/entries:search", headers=token(), json=body)
    assert r.status_code == 200, r.text
    return [(x["memory_entry"]["path"], x["memory_entry"]["contents"]) for x in r.json()["results"]]


@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
def test_search_ranks_the_versions_alive_then(client, token, times, mode):
    before, t1, t2 = times
    then = searched(client, token, t1, "first text", mode)
    assert then[0] == ("/a.md", "first text"), then  # the version of then, not today's
    assert ("/later.md", "written after") not in then
    assert ("/gone.md", "soon deleted") in searched(client, token, t1, "soon deleted", mode)
    now = searched(client, token, t2, "soon deleted", mode)
    assert all(path != "/gone.md" for path, _ in now), now
    assert searched(client, token, before, "first text", mode) == []


def test_an_as_of_search_explains_and_keeps_min_score(client, token, times):
    _, t1, _ = times
    body = {"scope": "u", "query": "first text", "as_of": t1, "explain": True, "min_score": 0.5}
    r = client.post(f"{STORE}/entries:search", headers=token(), json=body)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert [x["memory_entry"]["path"] for x in answer["results"]] == ["/a.md"], answer
    (hit,) = answer["results"]
    assert hit["score_details"]["score"] == hit["score"] >= 0.5 and hit["score_details"]["coverage"] == 1.0
    assert [leg["leg"] for leg in answer["explain"]["legs"]] == ["keyword", "semantic"]
    events = client.get(f"{UC}/system/audit", headers=token(), params={"page_size": 50}).json()["events"]
    event = next(e for e in events if e["request_id"] == r.headers["x-request-id"])
    assert event["request_params"]["as_of"] == str(t1), event
