"""Entries over HTTP: write modes, versions, edits, validation, scope isolation, search
consistency (with the fast stand-in embedder; tests/test_search_quality.py uses the real model)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from rest import UC

STORE = f"{UC}/memory-stores/main.default.mem"
ENTRIES = f"{STORE}/entries"


@pytest.fixture(scope="module", autouse=True)
def store(client, token):
    r = client.post(
        f"{UC}/memory-stores",
        headers=token(),
        json={"name": "mem", "catalog_name": "main", "schema_name": "default"},
    )
    assert r.status_code == 200, r.text


def post(client, token, scope, body, who="admin"):
    return client.post(ENTRIES, headers=token(who), params={"scope": scope}, json=body)


def put(client, token, scope, body, who="admin"):
    """A write that must succeed; returns the entry."""
    r = post(client, token, scope, body, who)
    assert r.status_code == 200, r.text
    return r.json()


def search(client, token, body, who="admin"):
    r = client.post(f"{STORE}/entries:search", headers=token(who), json=body)
    assert r.status_code == 200, r.text
    return r.json()["results"]


def test_seed_flow(client, token):
    r = post(
        client,
        token,
        "user-123",
        {
            "path": "/memories/preferences.md",
            "contents": "Prefers email over phone calls. Wants short answers, no small talk.",
            "description": "Communication preferences",
        },
    )
    assert r.status_code == 200, r.text
    entry = r.json()
    assert entry["scope"] == "user-123" and entry["path"] == "/memories/preferences.md"
    assert entry["etag"] == "1" and r.headers["etag"] == '"1"'
    assert entry["created_by"] == "admin" and "session_id" not in entry
    put(
        client,
        token,
        "user-123",
        {"path": "/memories/food.md", "contents": "Likes sushi; allergic to peanuts"},
    )
    results = search(client, token, {"scope": "user-123", "query": "communication preferences"})
    assert results[0]["memory_entry"]["path"] == "/memories/preferences.md"
    assert results[0]["memory_entry"]["contents"].startswith("Prefers email")
    assert isinstance(results[0]["score"], float)


def test_exclusive_is_the_default_and_conflicts(client, token):
    assert post(client, token, "u-ex", {"path": "/a.md", "contents": "one"}).status_code == 200
    r = post(client, token, "u-ex", {"path": "/a.md", "contents": "two"})
    assert r.status_code == 409 and r.json()["error_code"] == "ALREADY_EXISTS"
    # another session is another key; so is another scope
    assert (
        post(client, token, "u-ex", {"path": "/a.md", "contents": "s", "session_id": "s1"}).status_code == 200
    )
    assert post(client, token, "u-ex2", {"path": "/a.md", "contents": "x"}).status_code == 200


def test_body_form_with_memory_entry(client, token):
    r = client.post(
        ENTRIES,
        headers=token(),
        json={
            "scope": "u-body",
            "memory_entry": {"path": "/b.md", "contents": "hello", "source_type": "agent"},
        },
    )
    assert r.status_code == 200, r.text
    assert r.json()["source_type"] == "agent"
    r = client.post(
        ENTRIES,
        headers=token(),
        params={"scope": "other"},
        json={"scope": "u-body", "memory_entry": {"path": "/c.md"}},
    )
    assert r.status_code == 400 and "scope" in r.json()["message"]


def test_overwrite_and_append(client, token):
    assert (
        put(client, token, "u-wm", {"path": "/w.md", "contents": "first", "write_mode": "OVERWRITE"})["etag"]
        == "1"
    )
    r = post(client, token, "u-wm", {"path": "/w.md", "contents": "second", "write_mode": "OVERWRITE"})
    assert r.json()["contents"] == "second" and r.json()["etag"] == "2"
    r = post(client, token, "u-wm", {"path": "/w.md", "contents": "line two", "write_mode": "APPEND"})
    assert r.json()["contents"] == "second\nline two" and r.json()["etag"] == "3"
    again = post(client, token, "u-wm", {"path": "/w.md", "contents": "line two", "write_mode": "APPEND"})
    assert (
        again.json()["contents"] == "second\nline two" and again.json()["etag"] == "3"
    )  # a retry changes nothing
    # lines already there with a new description: the description changes, the lines stay once
    body = {"path": "/w.md", "contents": "line two", "write_mode": "APPEND", "description": "notes"}
    described = post(client, token, "u-wm", body).json()
    assert (described["contents"], described["description"], described["etag"]) == (
        "second\nline two",
        "notes",
        "4",
    )
    r = post(client, token, "u-wm", {"path": "/new.md", "contents": "created", "write_mode": "APPEND"})
    assert r.json()["contents"] == "created" and r.json()["etag"] == "1"


def test_concurrent_appends_lose_nothing(client, token):
    def append(i: int) -> int:
        return post(
            client, token, "u-conc", {"path": "/log.md", "contents": f"event {i}", "write_mode": "APPEND"}
        ).status_code

    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(append, range(24))) == {200}
    contents = client.get(
        f"{STORE}/entries:get", headers=token(), params={"scope": "u-conc", "path": "/log.md"}
    ).json()["contents"]
    assert sorted(contents.split("\n")) == sorted(f"event {i}" for i in range(24))


def test_concurrent_exclusive_creates_one_winner(client, token):
    def create(i: int) -> int:
        return post(client, token, "u-race", {"path": "/once.md", "contents": f"writer {i}"}).status_code

    with ThreadPoolExecutor(6) as pool:
        statuses = list(pool.map(create, range(6)))
    assert statuses.count(200) == 1 and statuses.count(409) == 5


def test_get_and_list(client, token):
    for i in range(7):
        put(
            client,
            token,
            "u-list",
            {"path": f"/notes/{i:02d}.md", "contents": f"note {i}", "description": f"d{i}"},
        )
    put(client, token, "u-list", {"path": "/other/x.md", "description": "described only"})
    put(client, token, "u-list", {"path": "/notes/00.md", "contents": "session copy", "session_id": "s9"})
    r = client.get(
        f"{STORE}/entries:get", headers=token(), params={"scope": "u-list", "path": "/notes/03.md"}
    )
    assert r.json()["contents"] == "note 3"
    r = client.get(
        f"{STORE}/entries:get",
        headers=token(),
        params={"scope": "u-list", "path": "/notes/00.md", "session_id": "s9"},
    )
    assert r.json()["contents"] == "session copy" and r.json()["session_id"] == "s9"
    r = client.get(f"{STORE}/entries:get", headers=token(), params={"scope": "u-list", "path": "/nope.md"})
    assert r.status_code == 404
    seen, page_token = [], None
    while True:
        params = {
            "scope": "u-list",
            "path_prefix": "/notes/",
            "page_size": 3,
            **({"page_token": page_token} if page_token else {}),
        }
        body = client.get(ENTRIES, headers=token(), params=params).json()
        for e in body["entries"]:
            assert "contents" not in e and e["has_contents"] is True
        seen += [(e["path"], e.get("session_id")) for e in body["entries"]]
        page_token = body.get("next_page_token")
        if not page_token:
            break
    assert len(seen) == 8 and len(set(seen)) == 8  # 7 notes + the session copy
    body = client.get(ENTRIES, headers=token(), params={"scope": "u-list", "session_id": "s9"}).json()
    assert [e["path"] for e in body["entries"]] == ["/notes/00.md"]
    body = client.get(ENTRIES, headers=token(), params={"scope": "u-list", "path_prefix": "/other"}).json()
    assert (
        body["entries"][0]["has_contents"] is False and body["entries"][0]["description"] == "described only"
    )
    r = client.get(ENTRIES, headers=token(), params={"scope": "u-list", "page_size": -1})
    assert r.status_code == 400 and "page_size" in r.json()["message"]


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        ({"str_replace": {"old_str": "beta", "new_str": "BETA"}}, "alpha\nBETA\ngamma"),
        ({"insert": {"insert_text": "zero", "insert_line": 0}}, "zero\nalpha\nbeta\ngamma"),
        ({"insert": {"insert_text": "end", "insert_line": 3}}, "alpha\nbeta\ngamma\nend"),
        ({"insert": {"insert_text": "last"}}, "alpha\nbeta\ngamma\nlast"),  # no insert_line: at the end
        ({"replace_all": {"contents": "fresh"}}, "fresh"),
        ({"append": {"text": "delta"}}, "alpha\nbeta\ngamma\ndelta"),
    ],
)
def test_edit_operations(client, token, edit, expected, request):
    path = f"/edit/{request.node.callspec.id}.md"  # one entry per case
    put(client, token, "u-edit", {"path": path, "contents": "alpha\nbeta\ngamma"})
    r = client.patch(ENTRIES, headers=token(), json={"scope": "u-edit", "path": path, **edit})
    assert r.status_code == 200, r.text
    assert r.json()["contents"] == expected and r.json()["etag"] == "2"


def test_insert_without_a_line_adds_lines_at_the_end(client, token):
    """`insert_line` is optional (Databricks' update tool documents it so): absent, the text goes
    after the last line, as `append` adds it (a trailing newline is no line of its own)."""
    for contents, expected in [
        ("one\ntwo\n", "one\ntwo\nthree"),
        ("one", "one\nthree"),
        ("", "three"),
    ]:
        path = f"/insert-end/{len(contents)}.md"
        put(client, token, "u-insert", {"path": path, "contents": contents})
        r = client.patch(
            ENTRIES,
            headers=token(),
            json={"scope": "u-insert", "path": path, "insert": {"insert_text": "three"}},
        )
        assert r.status_code == 200, r.text
        assert r.json()["contents"] == expected
    r = client.patch(
        ENTRIES,
        headers=token(),
        json={
            "scope": "u-insert",
            "path": "/insert-end/3.md",
            "insert": {"insert_text": "x", "insert_line": None},
        },
    )
    assert r.status_code == 200 and r.json()["contents"] == "one\nthree\nx"


def test_creation_reason_and_source_are_stored_and_answered(client, token):
    provenance = {
        "creation_reason": "CREATION_REASON_AGENT_INFERRED",
        "creation_source": "CREATION_SOURCE_ONLINE_AGENT",
    }
    created = put(client, token, "u-prov", {"path": "/p.md", "contents": "likes tea", **provenance})
    assert {k: created[k] for k in provenance} == provenance
    key = {"scope": "u-prov", "path": "/p.md"}
    got = client.get(f"{STORE}/entries:get", headers=token(), params=key).json()
    assert {k: got[k] for k in provenance} == provenance
    edited = client.patch(ENTRIES, headers=token(), json={**key, "append": {"text": "and coffee"}}).json()
    assert {k: edited[k] for k in provenance} == provenance
    (hit,) = search(client, token, {"scope": "u-prov", "query": "tea"})
    assert {k: hit["memory_entry"][k] for k in provenance} == provenance
    # an overwrite that does not say keeps them (they tell where the entry came from; a client
    # that does not know them must not erase them), one that does replaces them
    kept = put(client, token, "u-prov", {"path": "/p.md", "contents": "tea", "write_mode": "OVERWRITE"})
    assert {k: kept[k] for k in provenance} == provenance and kept["etag"] == "3"
    appended = put(client, token, "u-prov", {"path": "/p.md", "contents": "milk", "write_mode": "APPEND"})
    assert {k: appended[k] for k in provenance} == provenance
    replaced = put(
        client,
        token,
        "u-prov",
        {"path": "/p.md", "contents": "tea", "write_mode": "OVERWRITE", "creation_reason": "USER_REQUEST"},
    )
    assert replaced["creation_reason"] == "USER_REQUEST"
    assert replaced["creation_source"] == "CREATION_SOURCE_ONLINE_AGENT"
    # the memory_entry form takes them too; an entry written without them has none
    r = client.post(
        ENTRIES,
        headers=token(),
        json={"scope": "u-prov", "memory_entry": {"path": "/q.md", "contents": "x", **provenance}},
    )
    assert r.status_code == 200 and r.json()["creation_source"] == "CREATION_SOURCE_ONLINE_AGENT"
    plain = put(client, token, "u-prov", {"path": "/plain.md", "contents": "x"})
    assert "creation_reason" not in plain and "creation_source" not in plain


@pytest.mark.parametrize("field", ["creation_reason", "creation_source"])
@pytest.mark.parametrize("value", ["", "x" * 65, 7])
def test_creation_fields_are_bounded_strings(client, token, field, value):
    r = post(client, token, "u-prov", {"path": "/bad.md", "contents": "x", field: value})
    assert r.status_code == 400, r.text
    assert r.json()["error_code"] == "INVALID_PARAMETER_VALUE" and field in r.json()["message"]
    assert r.json()["details"] == [{"@type": "field_violation", "field": field}]


def test_failed_edits_change_nothing(client, token):
    put(client, token, "u-edit", {"path": "/fixed.md", "contents": "a a b"})
    for edit, field in [
        ({"str_replace": {"old_str": "a", "new_str": "x"}}, "occurs 2 times"),
        ({"str_replace": {"old_str": "zzz", "new_str": "x"}}, "does not occur"),
        ({"insert": {"insert_text": "x", "insert_line": 5}}, "insert_line"),
        ({"append": {"text": "x"}, "replace_all": {"contents": "y"}}, "one of"),
        ({}, "nothing to change"),
    ]:
        r = client.patch(ENTRIES, headers=token(), json={"scope": "u-edit", "path": "/fixed.md", **edit})
        assert r.status_code == 400 and field in r.json()["message"], r.text
    r = client.get(f"{STORE}/entries:get", headers=token(), params={"scope": "u-edit", "path": "/fixed.md"})
    assert r.json()["contents"] == "a a b" and r.json()["etag"] == "1"


def test_a_delete_without_a_precondition_deletes_whatever_version_is_there(client, token):
    """Deletes without If-Match racing overwrites of the same path: each deletes the version it
    finds (200) or finds none (404), never 409 ABORTED, which only a precondition answers."""

    def overwrite(i: int) -> int:
        body = {"path": "/contended.md", "contents": f"version {i}", "write_mode": "OVERWRITE"}
        return post(client, token, "u-del-race", body).status_code

    def delete(_: int) -> tuple[int, str]:
        r = client.delete(ENTRIES, headers=token(), params={"scope": "u-del-race", "path": "/contended.md"})
        return r.status_code, r.text

    with ThreadPoolExecutor(8) as pool:
        writes = [pool.submit(overwrite, i) for i in range(60)]
        deletes = [pool.submit(delete, i) for i in range(60)]
        assert {w.result() for w in writes} == {200}
        answers = [d.result() for d in deletes]
    assert {status for status, _ in answers} <= {200, 404}, [a for a in answers if a[0] not in (200, 404)]
    assert any(status == 200 for status, _ in answers)


def test_if_match_guards_edits_and_deletes(client, token):
    put(client, token, "u-etag", {"path": "/e.md", "contents": "v1"})
    r = client.patch(
        ENTRIES,
        headers={**token(), "If-Match": '"1"'},
        json={"scope": "u-etag", "path": "/e.md", "replace_all": {"contents": "v2"}},
    )
    assert r.status_code == 200 and r.json()["etag"] == "2"
    r = client.patch(
        ENTRIES,
        headers={**token(), "If-Match": '"1"'},
        json={"scope": "u-etag", "path": "/e.md", "replace_all": {"contents": "lost"}},
    )
    assert r.status_code == 409 and r.json()["error_code"] == "ABORTED"
    r = client.delete(
        ENTRIES, headers={**token(), "If-Match": '"1"'}, params={"scope": "u-etag", "path": "/e.md"}
    )
    assert r.status_code == 409 and r.json()["error_code"] == "ABORTED"
    r = client.delete(
        ENTRIES, headers={**token(), "If-Match": '"2"'}, params={"scope": "u-etag", "path": "/e.md"}
    )
    assert r.status_code == 200 and r.json() == {}
    assert (
        client.delete(ENTRIES, headers=token(), params={"scope": "u-etag", "path": "/e.md"}).status_code
        == 404
    )


@pytest.mark.parametrize(
    ("scope", "body", "status", "field"),
    [
        ("u", {"path": "relative.md"}, 400, "path"),
        ("u", {"path": "/a/../b"}, 400, "path"),
        ("u", {"path": "/a//b"}, 400, "path"),
        ("u", {"path": "/a/./b"}, 400, "path"),
        ("u", {"path": "/trailing/"}, 400, "path"),
        ("u", {"path": "/" + "x" * 1024}, 400, "path"),
        ("", {"path": "/a"}, 400, "scope"),
        ("x" * 257, {"path": "/a"}, 400, "scope"),
        ("bad\u0007scope", {"path": "/a"}, 400, "scope"),
        ("u", {"path": "/a", "session_id": ""}, 400, "session_id"),
        ("u", {"path": "/a", "contents": "x" * (512 * 1024 + 1)}, 413, "contents"),
        ("u", {"path": "/a", "description": "x" * 4097}, 413, "description"),
        ("u", {"path": "/a", "owner": "me"}, 400, "owner"),
        ("u", {"path": "/a", "write_mode": "SOMETIMES"}, 400, "write_mode"),
        ("u", {"path": "/a", "write_mode": "APPEND"}, 400, "contents"),
    ],
)
def test_validation_names_the_field(client, token, scope, body, status, field):
    r = post(client, token, scope, body)
    assert r.status_code == status, r.text
    assert field in r.json()["message"]


@pytest.mark.parametrize("top_k", [0, 101, -1])
def test_top_k_bounds(client, token, top_k):
    r = client.post(
        f"{STORE}/entries:search", headers=token(), json={"scope": "u", "query": "x", "top_k": top_k}
    )
    assert r.status_code == 400 and "top_k" in r.json()["message"]


def test_search_needs_a_query_and_a_scope(client, token):
    r = client.post(f"{STORE}/entries:search", headers=token(), json={"scope": "u", "query": "   "})
    assert r.status_code == 400 and "query" in r.json()["message"]
    r = client.post(f"{STORE}/entries:search", headers=token(), json={"query": "x"})
    assert r.status_code == 400 and "scope" in r.json()["message"]


def test_scopes_never_cross(client, token):
    put(client, token, "alice", {"path": "/secret.md", "contents": "alice loves quantum chromodynamics"})
    put(client, token, "bob", {"path": "/secret.md", "contents": "bob loves quantum chromodynamics"})
    for mode in ("hybrid", "keyword", "semantic"):
        results = search(client, token, {"scope": "bob", "query": "quantum chromodynamics", "mode": mode})
        assert {r["memory_entry"]["scope"] for r in results} == {"bob"}, mode
    r = client.get(f"{STORE}/entries:get", headers=token(), params={"scope": "bob", "path": "/secret.md"})
    assert r.json()["contents"].startswith("bob")
    body = client.get(ENTRIES, headers=token(), params={"scope": "carol"}).json()
    assert body["entries"] == []


def test_read_your_writes_and_deletes_vanish_from_every_mode(client, token):
    for i in range(5):
        put(client, token, "u-ryw", {"path": f"/n{i}.md", "contents": f"ordinary note number {i}"})
        results = search(
            client, token, {"scope": "u-ryw", "query": f"ordinary note number {i}", "mode": "keyword"}
        )
        assert f"/n{i}.md" in [r["memory_entry"]["path"] for r in results]
    r = client.delete(ENTRIES, headers=token(), params={"scope": "u-ryw", "path": "/n2.md"})
    assert r.status_code == 200, r.text
    for mode in ("hybrid", "keyword", "semantic"):
        results = search(client, token, {"scope": "u-ryw", "query": "ordinary note number 2", "mode": mode})
        found = [r["memory_entry"]["path"] for r in results]
        assert "/n2.md" not in found and "/n3.md" in found, (mode, found)  # the others are still found
    # an edit is searchable by its new words at once, and not by the old ones
    r = client.patch(
        ENTRIES,
        headers=token(),
        json={"scope": "u-ryw", "path": "/n1.md", "replace_all": {"contents": "zebra migration"}},
    )
    assert r.status_code == 200, r.text
    assert (
        search(client, token, {"scope": "u-ryw", "query": "zebra", "mode": "keyword"})[0]["memory_entry"][
            "path"
        ]
        == "/n1.md"
    )
    stale = search(client, token, {"scope": "u-ryw", "query": "ordinary note number 1", "mode": "keyword"})
    found = [r["memory_entry"]["path"] for r in stale]
    assert "/n1.md" not in found and "/n0.md" in found, found


def test_search_filters(client, token):
    put(client, token, "u-filter", {"path": "/projects/a.md", "contents": "kayak trip planning"})
    put(client, token, "u-filter", {"path": "/journal/a.md", "contents": "kayak trip memories"})
    put(
        client,
        token,
        "u-filter",
        {"path": "/projects/b.md", "contents": "kayak trip budget", "session_id": "s1"},
    )
    for mode in ("hybrid", "keyword", "semantic"):
        results = search(
            client,
            token,
            {"scope": "u-filter", "query": "kayak trip", "path_prefix": "/projects/", "mode": mode},
        )
        assert {r["memory_entry"]["path"] for r in results} == {"/projects/a.md", "/projects/b.md"}, mode
        results = search(
            client, token, {"scope": "u-filter", "query": "kayak trip", "session_id": "s1", "mode": mode}
        )
        assert [r["memory_entry"]["path"] for r in results] == ["/projects/b.md"], mode
    # a keyword query of stopwords only has no term to match: nothing, not every entry
    results = search(client, token, {"scope": "u-filter", "query": "the of and", "mode": "keyword"})
    assert results == []
    results = search(client, token, {"scope": "u-filter", "query": "the kayak", "mode": "keyword"})
    assert len(results) == 3
    results = search(client, token, {"scope": "u-filter", "query": "kayak trip", "min_score": 2.0})
    assert results == []
    results = search(client, token, {"scope": "u-filter", "query": "kayak trip", "top_k": 1})
    assert len(results) == 1


def test_a_long_path_prefix_filters_every_mode_or_is_400(client, token):
    """A path prefix of up to 1,024 characters works in every mode, in any script (a prefix of
    four-byte characters is four times as many bytes); one over that is 400 naming the field."""
    deep = "/" + "\U0001d11e" * 300  # 300 four-byte characters: 1,201 bytes
    wanted = f"{deep}/kayak.md"
    put(client, token, "u-long", {"path": wanted, "contents": "kayak trip on the lake"})
    put(client, token, "u-long", {"path": f"{deep}x/kayak.md", "contents": "kayak trip elsewhere"})
    put(client, token, "u-long", {"path": "/kayak.md", "contents": "kayak trip at home"})
    shared = "/" + "\U0001d11e" * 250  # a prefix of both long paths
    for prefix, expected in [
        (wanted, {wanted}),
        (f"{deep}/", {wanted}),
        (shared, {wanted, f"{deep}x/kayak.md"}),
    ]:
        for mode in ("hybrid", "keyword", "semantic"):
            results = search(
                client, token, {"scope": "u-long", "query": "kayak trip", "path_prefix": prefix, "mode": mode}
            )
            assert {r["memory_entry"]["path"] for r in results} == expected, (mode, len(prefix))
        r = client.get(ENTRIES, headers=token(), params={"scope": "u-long", "path_prefix": prefix})
        assert r.status_code == 200, r.text
        assert {e["path"] for e in r.json()["entries"]} == expected
    too_long = "/" + "a" * 1024
    r = client.post(
        f"{STORE}/entries:search",
        headers=token(),
        json={"scope": "u-long", "query": "kayak", "path_prefix": too_long},
    )
    assert r.status_code == 400 and "path_prefix" in r.json()["message"], r.text
    r = client.get(ENTRIES, headers=token(), params={"scope": "u-long", "path_prefix": too_long})
    assert r.status_code == 400 and "path_prefix" in r.json()["message"], r.text


def test_entries_need_their_privileges(client, token):
    r = post(client, token, "u", {"path": "/x.md", "contents": "x"}, who="reader")
    assert r.status_code == 403 and "WRITE_MEMORY_STORE" in r.json()["message"]
    r = client.patch(
        f"{UC}/permissions/memory_store/main.default.mem",
        headers=token(),
        json={"changes": [{"principal": "reader", "add": ["READ_MEMORY_STORE"]}]},
    )
    assert r.status_code == 200, r.text
    assert (
        client.post(
            f"{STORE}/entries:search", headers=token("reader"), json={"scope": "user-123", "query": "email"}
        ).status_code
        == 200
    )
    assert client.get(ENTRIES, headers=token("reader"), params={"scope": "user-123"}).status_code == 200
    r = post(client, token, "u", {"path": "/x.md", "contents": "x"}, who="reader")
    assert r.status_code == 403
    r = client.patch(
        f"{UC}/permissions/memory_store/main.default.mem",
        headers=token(),
        json={"changes": [{"principal": "writer", "add": ["WRITE_MEMORY_STORE"]}]},
    )
    assert r.status_code == 200, r.text
    assert (
        post(client, token, "u-writer", {"path": "/x.md", "contents": "x"}, who="writer").status_code == 200
    )
    r = client.get(
        f"{STORE}/entries:get", headers=token("writer"), params={"scope": "u-writer", "path": "/x.md"}
    )
    assert r.status_code == 403  # writing gives no reading


def test_a_filtered_hnsw_search_never_loses_results(client, token, monkeypatch):
    from catalog.search import repo as vector_repo

    monkeypatch.setattr(vector_repo, "GRAPH_MIN", 0)  # every vector in the whole table's graph
    for i in range(40):
        put(client, token, "u-hnsw", {"path": f"/many/{i}.md", "contents": f"river delta sediment layer {i}"})
    # the session's entries share no word with the query: the HNSW index's few nearest candidates
    # are the other entries, so the filtered HNSW result comes up short
    for i in range(3):
        put(
            client,
            token,
            "u-hnsw",
            {"path": f"/rare/{i}.md", "contents": f"glacier moraine note {i}", "session_id": "s-rare"},
        )
    # force the HNSW path with a tiny candidate list: the session filter leaves too few, so the
    # exact scan must run after all
    monkeypatch.setattr(vector_repo, "EXACT_LIMIT", 5)
    monkeypatch.setattr(vector_repo, "MIN_CANDIDATES", 4)
    monkeypatch.setattr(vector_repo, "OVERSAMPLE", 1)
    vectors = client.app.state.runtime.context.search.vectors
    fallbacks = vectors.fallbacks
    results = search(
        client,
        token,
        {
            "scope": "u-hnsw",
            "query": "river delta sediment",
            "mode": "semantic",
            "session_id": "s-rare",
            "top_k": 3,
        },
    )
    assert sorted(r["memory_entry"]["path"] for r in results) == ["/rare/0.md", "/rare/1.md", "/rare/2.md"]
    assert vectors.fallbacks == fallbacks + 1  # the HNSW scan ran, came up short, the exact scan ran
