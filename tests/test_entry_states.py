"""Consolidation states: an entry may be superseded by another or merged into another; get
answers its state, and lists and searches leave superseded and merged entries out unless asked
(`include_superseded`), in every mode."""

from __future__ import annotations

import pytest
from rest import UC

NAME = "main.default.states"
STORE = f"{UC}/memory-stores/{NAME}"


@pytest.fixture(scope="module", autouse=True)
def store(client, token):  # type: ignore[no-untyped-def]
    body = {"name": "states", "catalog_name": "main", "schema_name": "default"}
    assert client.post(f"{UC}/memory-stores", headers=token(), json=body).status_code == 200
    r = client.patch(
        f"{UC}/permissions/memory_store/{NAME}",
        headers=token(),
        json={"changes": [{"principal": "reader", "add": ["READ_MEMORY_STORE"]}]},
    )
    assert r.status_code == 200, r.text
    for scope, path, text in [
        ("u", "/old.md", "the user lives in Paris near the river"),
        ("u", "/new.md", "the user moved and lives in Berlin now"),
        ("u", "/a.md", "likes green tea"),
        ("u", "/b.md", "likes green tea in the morning"),
        ("team", "/all.md", "green tea for everyone"),
    ]:
        r = client.post(
            f"{STORE}/entries",
            headers=token(),
            params={"scope": scope},
            json={"path": path, "contents": text},
        )
        assert r.status_code == 200, r.text


def set_state(client, token, path: str, state: str, by: dict | None = None, who: str = "admin"):  # type: ignore[no-untyped-def]
    body = {"scope": "u", "path": path, "state": state, **({"superseded_by": by} if by else {})}
    return client.post(f"{STORE}/entries:setState", headers=token(who), json=body)


def listed(client, token, **params) -> dict[str, str]:  # type: ignore[no-untyped-def]
    r = client.get(f"{STORE}/entries", headers=token(), params={"scope": "u", **params})
    assert r.status_code == 200, r.text
    return {e["path"]: e.get("state", "active") for e in r.json()["entries"]}


def searched(client, token, query: str, mode: str, **more) -> list[str]:  # type: ignore[no-untyped-def]
    body = {"scope": "u", "query": query, "mode": mode, **more}
    r = client.post(f"{STORE}/entries:search", headers=token(), json=body)
    assert r.status_code == 200, r.text
    return [x["memory_entry"]["path"] for x in r.json()["results"]]


def test_a_superseded_entry_leaves_lists_and_searches_until_asked_for(client, token):
    r = set_state(client, token, "/old.md", "superseded", {"path": "/new.md"})
    assert r.status_code == 200, r.text
    entry = r.json()
    assert entry["state"] == "superseded" and entry["superseded_by"] == {"scope": "u", "path": "/new.md"}
    assert entry["etag"] == "2" and entry["contents"] == "the user lives in Paris near the river"
    got = client.get(f"{STORE}/entries:get", headers=token(), params={"scope": "u", "path": "/old.md"}).json()
    assert got["state"] == "superseded" and got["superseded_by"]["path"] == "/new.md"
    assert "/old.md" not in listed(client, token)
    assert listed(client, token, include_superseded="true")["/old.md"] == "superseded"
    for mode in ("keyword", "semantic", "hybrid"):
        assert "/old.md" not in searched(client, token, "lives in Paris near the river", mode), mode
        assert "/old.md" in searched(
            client, token, "lives in Paris near the river", mode, include_superseded=True
        )
    # active again: back everywhere, naming nothing
    r = set_state(client, token, "/old.md", "active")
    assert r.status_code == 200 and r.json()["state"] == "active" and "superseded_by" not in r.json(), r.text
    assert "/old.md" in listed(client, token)
    assert "/old.md" in searched(client, token, "lives in Paris near the river", "keyword")


def test_merged_into_an_entry_of_another_scope(client, token):
    r = set_state(client, token, "/a.md", "merged", {"scope": "team", "path": "/all.md"})
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "merged" and r.json()["superseded_by"] == {"scope": "team", "path": "/all.md"}
    found = searched(client, token, "green tea", "hybrid")
    assert found[0] == "/b.md" and "/a.md" not in found, found
    assert "/a.md" in searched(client, token, "green tea", "hybrid", include_superseded=True)


@pytest.mark.parametrize(
    ("state", "by", "field"),
    [
        ("superseded", None, "superseded_by"),  # names the entry replacing it
        ("superseded", {"path": "/missing.md"}, "superseded_by"),
        ("superseded", {"path": "/b.md", "scope": "u"}, None),  # (valid: checked below)
        ("active", {"path": "/b.md"}, "superseded_by"),
        ("stale", None, "state"),
    ],
)
def test_bad_states_are_400_naming_the_field(client, token, state, by, field):
    r = set_state(client, token, "/new.md", state, by)
    if field is None:
        assert r.status_code == 200, r.text
        assert set_state(client, token, "/new.md", "active").status_code == 200
        return
    assert r.status_code == 400 and field in r.text, r.text


def test_an_entry_cannot_supersede_itself_and_the_entry_must_exist(client, token):
    r = set_state(client, token, "/b.md", "superseded", {"path": "/b.md"})
    assert r.status_code == 400 and "itself" in r.text, r.text
    r = set_state(client, token, "/nothing.md", "superseded", {"path": "/b.md"})
    assert r.status_code == 404, r.text


def test_setting_a_state_needs_write(client, token):
    r = set_state(client, token, "/b.md", "superseded", {"path": "/new.md"}, who="reader")
    assert r.status_code == 403, r.text


def test_the_store_as_it_was_answers_each_entry_in_its_state_then(client, token):
    """The history keeps the state of each version: an as-of read answers an entry's state at
    that time, and lists and searches of then leave out what was superseded then."""

    def write(path: str, text: str) -> dict:
        r = client.post(
            f"{STORE}/entries",
            headers=token(),
            params={"scope": "then"},
            json={"path": path, "contents": text},
        )
        assert r.status_code == 200, r.text
        return r.json()

    def state(path: str, value: str, by: str | None = None) -> dict:
        body = {
            "scope": "then",
            "path": path,
            "state": value,
            **({"superseded_by": {"path": by}} if by else {}),
        }
        r = client.post(f"{STORE}/entries:setState", headers=token(), json=body)
        assert r.status_code == 200, r.text
        return r.json()

    def listed(at: int, **more) -> dict[str, str]:  # type: ignore[no-untyped-def]
        r = client.get(f"{STORE}/entries", headers=token(), params={"scope": "then", "as_of": at, **more})
        assert r.status_code == 200, r.text
        return {e["path"]: e.get("state", "active") for e in r.json()["entries"]}

    def found(at: int, **more) -> list[str]:  # type: ignore[no-untyped-def]
        body = {
            "scope": "then",
            "query": "the office is on the harbour",
            "mode": "keyword",
            "as_of": at,
            **more,
        }
        r = client.post(f"{STORE}/entries:search", headers=token(), json=body)
        assert r.status_code == 200, r.text
        return [x["memory_entry"]["path"] for x in r.json()["results"]]

    write("/office-old.md", "the office is on the harbour")
    write("/office.md", "the office moved uphill, away from the harbour")
    state("/office-old.md", "superseded", "/office.md")
    state("/office-old.md", "active")  # active again now
    # each version's time as the history gives it (the time that finds it)
    r = client.get(
        f"{STORE}/entries:history", headers=token(), params={"scope": "then", "path": "/office-old.md"}
    )
    assert r.status_code == 200, r.text
    at = {v["etag"]: v["updated_at"] for v in r.json()["versions"]}
    # the history answers each version's state
    states = {
        v["etag"]: (v.get("state", "active"), v.get("superseded_by", {}).get("path"))
        for v in r.json()["versions"]
    }
    assert states == {"1": ("active", None), "2": ("superseded", "/office.md"), "3": ("active", None)}
    before, superseded, again = at["1"], at["2"], at["3"]
    assert listed(before) == {"/office-old.md": "active"}  # the other was written after

    assert "/office-old.md" not in listed(superseded)
    assert listed(superseded, include_superseded="true")["/office-old.md"] == "superseded"
    r = client.get(
        f"{STORE}/entries:get",
        headers=token(),
        params={"scope": "then", "path": "/office-old.md", "as_of": superseded},
    )
    assert r.status_code == 200, r.text
    assert r.json()["state"] == "superseded" and r.json()["superseded_by"]["path"] == "/office.md"
    assert "/office-old.md" in found(before)
    assert "/office-old.md" not in found(superseded)
    assert "/office-old.md" in found(superseded, include_superseded=True)
    # and now it is active again
    assert listed(again)["/office-old.md"] == "active"
