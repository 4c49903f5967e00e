"""Metadata on entries and `filter` on list and search: kept with the entry and its history,
checked (400 naming the field), and filtered inside the Tantivy query and the pgvector scan, so a
filtered search still answers `top_k` hits when the best unfiltered candidates do not match."""

from __future__ import annotations

import json

import pytest
from stores import make_store


def _put(client, token, store, path, contents, metadata=None, **more):  # type: ignore[no-untyped-def]
    body = {"path": path, "contents": contents, **more}
    if metadata is not None:
        body["metadata"] = metadata
    r = client.post(f"{store}/entries", headers=token(), params={"scope": "u"}, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def _get(client, token, store, path):  # type: ignore[no-untyped-def]
    r = client.get(f"{store}/entries:get", headers=token(), params={"scope": "u", "path": path})
    assert r.status_code == 200, r.text
    return r.json()


def _listed(client, token, store, where, **params):  # type: ignore[no-untyped-def]
    r = client.get(
        f"{store}/entries", headers=token(), params={"scope": "u", "filter": json.dumps(where), **params}
    )
    assert r.status_code == 200, r.text
    return r.json()


def _search(client, token, store, query, where, mode, top_k=5):  # type: ignore[no-untyped-def]
    r = client.post(
        f"{store}/entries:search",
        headers=token(),
        json={"scope": "u", "query": query, "mode": mode, "top_k": top_k, "filter": where},
    )
    assert r.status_code == 200, r.text
    return [h["memory_entry"] for h in r.json()["results"]]


def test_metadata_is_kept_replaced_and_versioned(client, token):
    store = make_store(client, token, "meta-keep")
    meta = {"topic": "food", "rating": 4.5, "vegan": True}
    created = _put(client, token, store, "/a.md", "lentil soup", meta)
    assert created["metadata"] == meta and _get(client, token, store, "/a.md")["metadata"] == meta
    summary = client.get(f"{store}/entries", headers=token(), params={"scope": "u"}).json()["entries"]
    assert summary[0]["metadata"] == meta
    # an overwrite that does not send metadata keeps it; one that sends it replaces it
    _put(client, token, store, "/a.md", "lentil soup, spicy", write_mode="OVERWRITE")
    assert _get(client, token, store, "/a.md")["metadata"] == meta
    _put(client, token, store, "/a.md", "tomato soup", {"topic": "food"}, write_mode="OVERWRITE")
    assert _get(client, token, store, "/a.md")["metadata"] == {"topic": "food"}
    # PATCH replaces it alone (the contents stay); {} clears it
    r = client.patch(
        f"{store}/entries",
        headers=token(),
        json={"scope": "u", "path": "/a.md", "metadata": {"topic": "soup"}},
    )
    assert r.status_code == 200, r.text
    assert r.json()["metadata"] == {"topic": "soup"} and r.json()["contents"] == "tomato soup"
    r = client.patch(
        f"{store}/entries", headers=token(), json={"scope": "u", "path": "/a.md", "metadata": {}}
    )
    assert "metadata" not in r.json()
    # every version keeps its metadata, and a restore brings it back
    versions = client.get(
        f"{store}/entries:history", headers=token(), params={"scope": "u", "path": "/a.md"}
    ).json()["versions"]
    assert [v.get("metadata") for v in versions] == [None, {"topic": "soup"}, {"topic": "food"}, meta, meta]
    r = client.post(
        f"{store}/entries:restore",
        headers=token(),
        json={"scope": "u", "path": "/a.md", "etag": versions[-1]["etag"]},
    )
    assert r.status_code == 200, r.text
    assert _get(client, token, store, "/a.md")["metadata"] == meta
    # a batch takes metadata per entry
    r = client.post(
        f"{store}/entries:batchCreate",
        headers=token(),
        params={"scope": "u"},
        json={"entries": [{"path": "/b.md", "contents": "b", "metadata": {"topic": "batch"}}]},
    )
    assert r.json()["results"][0]["status"] == "CREATED"
    assert _get(client, token, store, "/b.md")["metadata"] == {"topic": "batch"}


def test_list_filters_by_every_pair_across_pages(client, token):
    store = make_store(client, token, "meta-list")
    for i in range(7):
        _put(
            client, token, store, f"/e{i}.md", f"entry {i}", {"team": "red" if i % 2 else "blue", "n": i % 3}
        )
    _put(client, token, store, "/plain.md", "no metadata")
    assert [e["path"] for e in _listed(client, token, store, {"team": "red"})["entries"]] == [
        "/e1.md",
        "/e3.md",
        "/e5.md",
    ]
    assert [e["path"] for e in _listed(client, token, store, {"team": "blue", "n": 0})["entries"]] == [
        "/e0.md",
        "/e6.md",
    ]
    # pages of a filtered listing hold only matches, and the token is good only for that filter
    first = _listed(client, token, store, {"team": "blue"}, page_size=2)
    assert [e["path"] for e in first["entries"]] == ["/e0.md", "/e2.md"]
    second = _listed(client, token, store, {"team": "blue"}, page_size=2, page_token=first["next_page_token"])
    assert [e["path"] for e in second["entries"]] == ["/e4.md", "/e6.md"]
    r = client.get(
        f"{store}/entries",
        headers=token(),
        params={"scope": "u", "filter": '{"team": "red"}', "page_token": first["next_page_token"]},
    )
    assert r.status_code == 400 and r.json()["details"][0]["field"] == "page_token"
    assert _listed(client, token, store, {"team": "green"})["entries"] == []


def test_equality_is_json_equality_in_list_and_every_search_mode(client, token):
    """1 and 1.0 are equal; 1, "1" and true are not; the index and PostgreSQL agree."""
    store = make_store(client, token, "meta-types")
    _put(client, token, store, "/int.md", "wombat burrow", {"v": 1})
    _put(client, token, store, "/float.md", "wombat burrow", {"v": 1.0})
    _put(client, token, store, "/text.md", "wombat burrow", {"v": "1"})
    _put(client, token, store, "/bool.md", "wombat burrow", {"v": True})
    _put(client, token, store, "/big.md", "wombat burrow", {"v": 1e20})
    cases = [
        ({"v": 1}, {"/int.md", "/float.md"}),
        ({"v": 1.0}, {"/int.md", "/float.md"}),
        ({"v": "1"}, {"/text.md"}),
        ({"v": True}, {"/bool.md"}),
        ({"v": 100000000000000000000}, {"/big.md"}),
        ({"v": 2}, set()),
    ]
    for where, expected in cases:
        listed = {e["path"] for e in _listed(client, token, store, where)["entries"]}
        assert listed == expected, (where, listed)
        for mode in ("keyword", "semantic", "hybrid"):
            found = {e["path"] for e in _search(client, token, store, "wombat burrow", where, mode, top_k=10)}
            assert found == expected, (where, mode, found)


@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
def test_a_filtered_search_fills_top_k_from_beyond_the_unfiltered_best(client, token, mode):
    """60 entries that match the query strongly and 6 that match it weakly: filtering the
    unfiltered best candidates afterwards would find none of the 6; the filter inside the query
    finds 5 of them, and nothing else."""
    store = make_store(client, token, f"meta-topk-{mode}")
    entries = [
        {
            "path": f"/loud/{i}.md",
            "contents": "quokka quokka quokka island " * 3,
            "metadata": {"kind": "loud"},
        }
        for i in range(60)
    ] + [
        {
            "path": f"/quiet/{i}.md",
            "contents": f"a note {i} about gardening, tomatoes and a quokka seen once",
            "metadata": {"kind": "quiet"},
        }
        for i in range(6)
    ]
    r = client.post(
        f"{store}/entries:batchCreate", headers=token(), params={"scope": "u"}, json={"entries": entries}
    )
    assert all(x["status"] == "CREATED" for x in r.json()["results"]), r.text
    unfiltered = _search(client, token, store, "quokka island", None, mode, top_k=30)
    assert all(e["path"].startswith("/loud/") for e in unfiltered)  # the quiet ones rank below
    hits = _search(client, token, store, "quokka island", {"kind": "quiet"}, mode)
    assert len(hits) == 5 and all(e["path"].startswith("/quiet/") for e in hits), hits
    assert all(e["metadata"] == {"kind": "quiet"} for e in hits)


def test_bad_metadata_and_filters_are_400_naming_the_field(client, token):
    store = make_store(client, token, "meta-bad")
    bad = [
        ({f"k{i}": i for i in range(33)}, "metadata"),
        ({"nested": {"a": 1}}, "metadata"),
        ({"list": [1, 2]}, "metadata"),
        ({"none": None}, "metadata"),
        ({"": "empty key"}, "metadata"),
        ({"k" * 65: "long key"}, "metadata"),
        ({"long": "v" * 1025}, "metadata"),
    ]
    for metadata, field in bad:
        r = client.post(
            f"{store}/entries",
            headers=token(),
            params={"scope": "u"},
            json={"path": "/x.md", "contents": "x", "metadata": metadata},
        )
        assert r.status_code == 400, (metadata, r.text)
        assert r.json()["details"][0]["field"].startswith(field), (metadata, r.json())
    # nothing was written by a refused request
    assert client.get(f"{store}/entries", headers=token(), params={"scope": "u"}).json()["entries"] == []
    for text in ("not json", "[1, 2]", json.dumps({"a": {"b": 1}})):
        r = client.get(f"{store}/entries", headers=token(), params={"scope": "u", "filter": text})
        assert r.status_code == 400 and r.json()["details"][0]["field"].startswith("filter"), (text, r.text)
    r = client.post(
        f"{store}/entries:search",
        headers=token(),
        json={"scope": "u", "query": "x", "filter": {"a": [1]}},
    )
    assert r.status_code == 400 and r.json()["details"][0]["field"].startswith("filter"), r.text


def test_metadata_changes_are_refused_under_legal_hold(client, token):
    store = make_store(client, token, "meta-held")
    _put(client, token, store, "/a.md", "kept", {"topic": "x"})
    r = client.patch(store, headers=token(), json={"legal_hold": True})
    assert r.status_code == 200, r.text
    r = client.patch(
        f"{store}/entries", headers=token(), json={"scope": "u", "path": "/a.md", "metadata": {}}
    )
    assert r.status_code == 409 and r.json()["error_code"] == "RESOURCE_CONFLICT"
    assert _get(client, token, store, "/a.md")["metadata"] == {"topic": "x"}


def test_json_columns_read_back_as_written_even_past_a_doubles_range(database_url):
    """The pool reads json/jsonb with msgspec; a number PostgreSQL's numeric holds but a double
    does not (a fraction past 1e308, which msgspec refuses) still reads, as the standard library
    reads it (infinity); an integer of any size reads exactly."""
    import asyncio
    import math

    from catalog.db import create_pool

    async def read() -> tuple[object, object, object]:
        pool = await create_pool(database_url, min_size=1, max_size=1)
        try:
            return await pool.fetchrow(
                "SELECT $1::jsonb AS doc, '1e400'::jsonb AS whole, "
                "('{\"n\": ' || repeat('9', 400) || '.5}')::jsonb AS nested",
                {"a": [1, 2.5, "x\u00e9", None, True], "big": 10**30, "nested": {"k": {}}},
            )
        finally:
            await pool.close()

    row = asyncio.run(read())
    assert row["doc"] == {"a": [1, 2.5, "x\u00e9", None, True], "big": 10**30, "nested": {"k": {}}}
    assert row["whole"] == 10**400
    assert math.isinf(row["nested"]["n"])
