"""One set of entry behaviours, run through both dialects: the Unity Catalog dialect
(`/api/2.1/unity-catalog/memory-stores/{catalog.schema.store}/entries...`) and the agent-memory
dialect (`/api/2.0/agents/memory-stores/{store id}/entries...`).

Each dialect is driven by a small adapter that speaks its wire format and answers in one shape:
an entry is `{scope, path, session_id, content, description}` (content and description None where
the answer carries none). Where the dialects differ by design (docs/dialects/), the adapter says so
in one place:
- the agent dialect addresses an entry by its id, the Unity Catalog dialect by (scope, path,
  session); a read by key is `entries:get` in one and a list filtered by `path` in the other;
- the agent dialect has no write modes: overwrite and append are what its SDK's `put()` does
  (create, and on ALREADY_EXISTS find the entry by listing and patch it);
- the agent dialect's list returns each entry's content, the Unity Catalog dialect's list only
  says whether there is one (`has_contents`).
Both refuse a second create of one key with 409 ALREADY_EXISTS, and answer a missing store or
entry with 404 (`NOT_FOUND_CODE`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest
from rest import UC

AGENTS = "/api/2.0/agents/memory-stores"
SCHEMA = "main.default"  # CATALOG_AGENTS_SCHEMA: agent store `x` is `main.default.x`

# docs/reference/errors.md ("Not found"): a missing store or entry on a memory-store route is NOT_FOUND, in
# both dialects (as Databricks' managed-memory API answers it).
NOT_FOUND_CODE = "NOT_FOUND"


@dataclass
class Answer:
    status: int
    body: Any
    entry: dict[str, Any] | None = None  # the entry in the common shape, where there is one
    entries: list[dict[str, Any]] = field(default_factory=list)  # a list's or a search's, in order

    @property
    def error_code(self) -> str | None:
        return self.body.get("error_code") if isinstance(self.body, dict) else None


def _answer(r: Any) -> Answer:
    return Answer(r.status_code, r.json())


class UnityCatalog:
    name = "unity-catalog"
    list_has_content = False  # a list answers `has_contents`, not the text

    def __init__(self, client: Any, token: Any) -> None:
        self.client, self.token = client, token

    @staticmethod
    def shape(e: dict[str, Any], scope: str | None = None) -> dict[str, Any]:
        return {
            "scope": e.get("scope", scope),  # a list of one scope leaves it out of each entry
            "path": e["path"],
            "session_id": e.get("session_id"),
            "content": e.get("contents"),
            "description": e.get("description"),
        }

    def create_store(self, name: str) -> Answer:
        body = {"name": name, "catalog_name": "main", "schema_name": "default"}
        return _answer(self.client.post(f"{UC}/memory-stores", headers=self.token(), json=body))

    def entries(self, store: str) -> str:
        return f"{UC}/memory-stores/{SCHEMA}.{store}/entries"

    def write(
        self,
        store: str,
        scope: str,
        path: str,
        content: str,
        *,
        mode: str = "create",
        session_id: str | None = None,
        description: str | None = None,
        who: str = "admin",
    ) -> Answer:
        body: dict[str, Any] = {"path": path, "contents": content}
        if mode != "create":
            body["write_mode"] = {"overwrite": "OVERWRITE", "append": "APPEND"}[mode]
        if session_id is not None:
            body["session_id"] = session_id
        if description is not None:
            body["description"] = description
        r = self.client.post(self.entries(store), headers=self.token(who), params={"scope": scope}, json=body)
        answer = _answer(r)
        if r.status_code == 200:
            answer.entry = self.shape(answer.body)
        return answer

    def handle(self, answer: Answer) -> tuple[str, str, str | None]:
        return answer.body["scope"], answer.body["path"], answer.body.get("session_id")

    def missing_handle(self, scope: str) -> tuple[str, str, str | None]:
        return scope, f"/never/{uuid.uuid4().hex}.md", None

    def _key(self, handle: tuple[str, str, str | None]) -> dict[str, str]:
        scope, path, session_id = handle
        return {"scope": scope, "path": path, **({"session_id": session_id} if session_id else {})}

    def get(self, store: str, handle: tuple[str, str, str | None], who: str = "admin") -> Answer:
        r = self.client.get(f"{self.entries(store)}:get", headers=self.token(who), params=self._key(handle))
        answer = _answer(r)
        if r.status_code == 200:
            answer.entry = self.shape(answer.body)
        return answer

    def find(self, store: str, scope: str, path: str, session_id: str | None = None) -> dict[str, Any] | None:
        answer = self.get(store, (scope, path, session_id))
        if answer.status == 404:
            assert answer.error_code == NOT_FOUND_CODE, answer.body
            return None
        assert answer.status == 200, answer.body
        return answer.entry

    def list(self, store: str, scope: str, *, path_prefix: str | None = None, who: str = "admin") -> Answer:
        params = {"scope": scope, "page_size": 100, **({"path_prefix": path_prefix} if path_prefix else {})}
        r = self.client.get(self.entries(store), headers=self.token(who), params=params)
        answer = _answer(r)
        if r.status_code == 200:
            assert "next_page_token" not in answer.body  # every test lists fewer than a page
            for e in answer.body["entries"]:
                assert "contents" not in e and isinstance(e["has_contents"], bool)
            answer.entries = [self.shape(e, scope) for e in answer.body["entries"]]
        return answer

    def edit(
        self, store: str, handle: tuple[str, str, str | None], content: str, who: str = "admin"
    ) -> Answer:
        body = {**self._key(handle), "replace_all": {"contents": content}}
        r = self.client.patch(self.entries(store), headers=self.token(who), json=body)
        answer = _answer(r)
        if r.status_code == 200:
            answer.entry = self.shape(answer.body)
        return answer

    def delete(self, store: str, handle: tuple[str, str, str | None], who: str = "admin") -> Answer:
        return _answer(
            self.client.delete(self.entries(store), headers=self.token(who), params=self._key(handle))
        )

    def search(self, store: str, scope: str, query: str, who: str = "admin") -> Answer:
        body = {"scope": scope, "query": query, "top_k": 20}
        r = self.client.post(f"{self.entries(store)}:search", headers=self.token(who), json=body)
        answer = _answer(r)
        if r.status_code == 200:
            answer.entries = [self.shape(hit["memory_entry"]) for hit in answer.body["results"]]
        return answer


class Agents:
    name = "agents"
    list_has_content = True  # the SDK's put() reads content (and session_id) from a list

    def __init__(self, client: Any, token: Any) -> None:
        self.client, self.token = client, token

    @staticmethod
    def shape(e: dict[str, Any]) -> dict[str, Any]:
        return {
            "scope": e["actor_id"],
            "path": e["path"],
            "session_id": e.get("session_id"),
            "content": e.get("content"),
            "description": e.get("description"),
        }

    def create_store(self, name: str) -> Answer:
        return _answer(
            self.client.post(AGENTS, headers=self.token(), params={"managed_memory_store_id": name}, json={})
        )

    def _create(
        self,
        store: str,
        scope: str,
        path: str,
        content: str,
        session_id: str | None,
        description: str | None,
        who: str,
    ) -> Any:
        body: dict[str, Any] = {"actor_id": scope, "path": path, "content": content}
        if session_id is not None:
            body["session_id"] = session_id
        if description is not None:
            body["description"] = description
        return self.client.post(f"{AGENTS}/{store}/entries", headers=self.token(who), json=body)

    def write(
        self,
        store: str,
        scope: str,
        path: str,
        content: str,
        *,
        mode: str = "create",
        session_id: str | None = None,
        description: str | None = None,
        who: str = "admin",
    ) -> Answer:
        r = self._create(store, scope, path, content, session_id, description, who)
        if mode != "create" and r.status_code == 409 and r.json()["error_code"] == "ALREADY_EXISTS":
            # what the SDK's put() does: find the entry by listing, then patch it
            existing = self._find(store, scope, path, session_id, who)
            assert existing is not None, f"{path} exists but is not listed"
            if mode == "append":
                current = existing["content"] or ""
                content = f"{current}\n{content}" if current else content
            r = self.client.patch(
                self._url(store, existing["name"].rsplit("/", 1)[1]),
                headers=self.token(who),
                params={"update_mask": "content"},
                json={"content": content},
            )
        answer = _answer(r)
        if r.status_code == 200:
            answer.entry = self.shape(answer.body)
        return answer

    def handle(self, answer: Answer) -> str:
        return str(answer.body["name"]).rsplit("/", 1)[1]  # `memory-stores/<store>/entries/<id>`

    def missing_handle(self, scope: str) -> str:
        return str(uuid.uuid4())

    def _url(self, store: str, handle: str) -> str:
        return f"{AGENTS}/{store}/entries/{handle}"

    def get(self, store: str, handle: str, who: str = "admin") -> Answer:
        r = self.client.get(self._url(store, handle), headers=self.token(who))
        answer = _answer(r)
        if r.status_code == 200:
            answer.entry = self.shape(answer.body)
        return answer

    def _find(
        self, store: str, scope: str, path: str, session_id: str | None, who: str = "admin"
    ) -> dict[str, Any] | None:
        r = self.client.get(
            f"{AGENTS}/{store}/entries", headers=self.token(who), params={"actor_id": scope, "path": path}
        )
        assert r.status_code == 200, r.text
        # the path filter matches every session: pick the one asked for
        found = [
            e
            for e in r.json()["managed_memory_entries"]
            if e["path"] == path and e.get("session_id") == session_id
        ]
        assert len(found) <= 1, found
        return found[0] if found else None

    def find(self, store: str, scope: str, path: str, session_id: str | None = None) -> dict[str, Any] | None:
        found = self._find(store, scope, path, session_id)
        return None if found is None else self.shape(found)

    def list(self, store: str, scope: str, *, path_prefix: str | None = None, who: str = "admin") -> Answer:
        params = {
            "actor_id": scope,
            "page_size": 100,
            **({"path_prefix": path_prefix} if path_prefix else {}),
        }
        r = self.client.get(f"{AGENTS}/{store}/entries", headers=self.token(who), params=params)
        answer = _answer(r)
        if r.status_code == 200:
            assert "next_page_token" not in answer.body
            answer.entries = [self.shape(e) for e in answer.body["managed_memory_entries"]]
        return answer

    def edit(self, store: str, handle: str, content: str, who: str = "admin") -> Answer:
        r = self.client.patch(
            self._url(store, handle),
            headers=self.token(who),
            params={"update_mask": "content"},
            json={"content": content},
        )
        answer = _answer(r)
        if r.status_code == 200:
            answer.entry = self.shape(answer.body)
        return answer

    def delete(self, store: str, handle: str, who: str = "admin") -> Answer:
        return _answer(self.client.delete(self._url(store, handle), headers=self.token(who)))

    def search(self, store: str, scope: str, query: str, who: str = "admin") -> Answer:
        body = {"actor_id": scope, "query": query, "limit": 20}
        r = self.client.post(f"{AGENTS}/{store}/entries:search", headers=self.token(who), json=body)
        answer = _answer(r)
        if r.status_code == 200:
            answer.entries = [self.shape(hit["managed_memory_entry"]) for hit in answer.body["results"]]
        return answer


@pytest.fixture(params=[UnityCatalog, Agents], ids=lambda d: d.name)
def dialect(request, client, token):  # type: ignore[no-untyped-def]
    return request.param(client, token)


@pytest.fixture
def store(dialect, client, token) -> str:  # type: ignore[no-untyped-def]
    """A store of the test's own, created through the dialect under test. `reader` holds READ on
    it, `writer` WRITE only, `stranger` nothing (every principal may use main and main.default)."""
    name = f"conf-{uuid.uuid4().hex[:10]}"
    answer = dialect.create_store(name)
    assert answer.status == 200, answer.body
    r = client.patch(
        f"{UC}/permissions/memory_store/{SCHEMA}.{name}",
        headers=token(),
        json={
            "changes": [
                {"principal": "reader", "add": ["READ_MEMORY_STORE"]},
                {"principal": "writer", "add": ["WRITE_MEMORY_STORE"]},
            ]
        },
    )
    assert r.status_code == 200, r.text
    return name


def written(answer: Answer) -> Answer:
    assert answer.status == 200, answer.body
    assert answer.entry is not None
    return answer


def paths(entries: list[dict[str, Any]]) -> list[str]:
    return [e["path"] for e in entries]


def test_a_created_entry_reads_back(dialect, store):
    answer = written(dialect.write(store, "u1", "/prefs.md", "Prefers email.", description="contact"))
    expected = {
        "scope": "u1",
        "path": "/prefs.md",
        "session_id": None,
        "content": "Prefers email.",
        "description": "contact",
    }
    assert answer.entry == expected
    assert dialect.find(store, "u1", "/prefs.md") == expected
    got = dialect.get(store, dialect.handle(answer))
    assert got.status == 200 and got.entry == expected


def test_a_second_create_of_one_key_is_409_already_exists(dialect, store):
    written(dialect.write(store, "u1", "/a.md", "one"))
    again = dialect.write(store, "u1", "/a.md", "two")
    assert (again.status, again.error_code) == (409, "ALREADY_EXISTS")
    assert dialect.find(store, "u1", "/a.md")["content"] == "one"  # unchanged
    # another session is another key, and so is another scope
    in_session = written(dialect.write(store, "u1", "/a.md", "in a session", session_id="s1"))
    assert in_session.entry["session_id"] == "s1"
    written(dialect.write(store, "u2", "/a.md", "another scope"))
    assert dialect.find(store, "u1", "/a.md")["content"] == "one"
    assert dialect.find(store, "u1", "/a.md", session_id="s1")["content"] == "in a session"
    assert dialect.find(store, "u2", "/a.md")["content"] == "another scope"


def test_overwrite_replaces_the_content_or_creates_the_entry(dialect, store):
    written(dialect.write(store, "u1", "/w.md", "first"))
    assert (
        written(dialect.write(store, "u1", "/w.md", "second", mode="overwrite")).entry["content"] == "second"
    )
    assert dialect.find(store, "u1", "/w.md")["content"] == "second"
    assert written(dialect.write(store, "u1", "/new.md", "made", mode="overwrite")).entry["content"] == "made"
    assert dialect.find(store, "u1", "/new.md")["content"] == "made"


def test_append_adds_a_line_or_creates_the_entry(dialect, store):
    written(dialect.write(store, "u1", "/log.md", "line one"))
    answer = written(dialect.write(store, "u1", "/log.md", "line two", mode="append"))
    assert answer.entry["content"] == "line one\nline two"
    assert dialect.find(store, "u1", "/log.md")["content"] == "line one\nline two"
    assert written(dialect.write(store, "u1", "/fresh.md", "only", mode="append")).entry["content"] == "only"


def test_a_list_holds_the_scope_entries_under_a_prefix(dialect, store):
    for scope, path in [
        ("u1", "/notes/1.md"),
        ("u1", "/notes/2.md"),
        ("u1", "/other/x.md"),
        ("u2", "/notes/3.md"),
    ]:
        written(dialect.write(store, scope, path, f"text of {path}"))
    listed = dialect.list(store, "u1", path_prefix="/notes/")
    assert listed.status == 200
    assert sorted(paths(listed.entries)) == ["/notes/1.md", "/notes/2.md"]
    assert {e["scope"] for e in listed.entries} == {"u1"}
    contents = [e["content"] for e in listed.entries]
    if dialect.list_has_content:
        assert sorted(contents) == ["text of /notes/1.md", "text of /notes/2.md"]
    else:
        assert contents == [None, None]
    everything = dialect.list(store, "u1")
    assert sorted(paths(everything.entries)) == ["/notes/1.md", "/notes/2.md", "/other/x.md"]


def test_an_edit_is_what_get_list_and_search_see_next(dialect, store):
    answer = written(dialect.write(store, "u1", "/e.md", "the old text about herons"))
    written(dialect.write(store, "u1", "/other.md", "something unrelated"))
    edited = dialect.edit(store, dialect.handle(answer), "the new text about pelicans")
    assert edited.status == 200 and edited.entry["content"] == "the new text about pelicans"
    assert dialect.get(store, dialect.handle(answer)).entry["content"] == "the new text about pelicans"
    assert dialect.find(store, "u1", "/e.md")["content"] == "the new text about pelicans"
    hits = dialect.search(store, "u1", "pelicans")
    assert hits.status == 200 and hits.entries[0]["path"] == "/e.md"
    assert hits.entries[0]["content"] == "the new text about pelicans"


def test_a_deleted_entry_is_gone_from_get_list_and_search(dialect, store):
    answer = written(dialect.write(store, "u1", "/gone.md", "ephemeral walrus"))
    written(dialect.write(store, "u1", "/kept.md", "lasting walrus"))
    handle = dialect.handle(answer)
    deleted = dialect.delete(store, handle)
    assert (deleted.status, deleted.body) == (200, {})
    for again in (
        dialect.get(store, handle),
        dialect.delete(store, handle),
        dialect.edit(store, handle, "x"),
    ):
        assert (again.status, again.error_code) == (404, NOT_FOUND_CODE), again.body
    assert dialect.find(store, "u1", "/gone.md") is None
    assert paths(dialect.list(store, "u1").entries) == ["/kept.md"]
    assert paths(dialect.search(store, "u1", "walrus").entries) == ["/kept.md"]


def test_search_finds_by_words_within_one_scope(dialect, store):
    for scope in ("u1", "u2"):
        written(dialect.write(store, scope, "/trip.md", "hiking trip to the Dolomites in September"))
        written(dialect.write(store, scope, "/food.md", "allergic to peanuts"))
    hits = dialect.search(store, "u1", "Dolomites hiking")
    assert hits.status == 200
    assert hits.entries[0] == {
        "scope": "u1",
        "path": "/trip.md",
        "session_id": None,
        "content": "hiking trip to the Dolomites in September",
        "description": None,
    }
    assert {e["scope"] for e in hits.entries} == {"u1"}


def test_scopes_never_cross(dialect, store):
    written(dialect.write(store, "alice", "/secret.md", "alice keeps a quokka"))
    assert dialect.find(store, "bob", "/secret.md") is None
    assert dialect.list(store, "bob").entries == []
    bob = dialect.search(store, "bob", "quokka")
    assert bob.status == 200 and bob.entries == []
    assert paths(dialect.search(store, "alice", "quokka").entries) == ["/secret.md"]


def test_a_missing_store_is_404(dialect):
    missing = f"conf-missing-{uuid.uuid4().hex[:8]}"
    for answer in (
        dialect.write(missing, "u1", "/a.md", "x"),
        dialect.list(missing, "u1"),
        dialect.search(missing, "u1", "x"),
    ):
        assert (answer.status, answer.error_code) == (404, NOT_FOUND_CODE), answer.body


def test_a_missing_entry_is_404(dialect, store):
    written(dialect.write(store, "u1", "/there.md", "x"))  # the store is not empty
    handle = dialect.missing_handle("u1")
    for answer in (
        dialect.get(store, handle),
        dialect.edit(store, handle, "y"),
        dialect.delete(store, handle),
    ):
        assert (answer.status, answer.error_code) == (404, NOT_FOUND_CODE), answer.body


def test_without_a_privilege_every_entry_operation_is_403(dialect, store):
    answer = written(dialect.write(store, "u1", "/a.md", "private"))
    handle = dialect.handle(answer)
    for denied in (
        dialect.write(store, "u1", "/b.md", "x", who="stranger"),
        dialect.get(store, handle, who="stranger"),
        dialect.list(store, "u1", who="stranger"),
        dialect.search(store, "u1", "private", who="stranger"),
        dialect.edit(store, handle, "x", who="stranger"),
        dialect.delete(store, handle, who="stranger"),
        # READ alone does not write
        dialect.write(store, "u1", "/b.md", "x", who="reader"),
        dialect.edit(store, handle, "x", who="reader"),
        dialect.delete(store, handle, who="reader"),
    ):
        assert (denied.status, denied.error_code) == (403, "PERMISSION_DENIED"), denied.body
    assert dialect.get(store, handle, who="reader").entry["content"] == "private"
    assert paths(dialect.list(store, "u1", who="reader").entries) == ["/a.md"]
    assert paths(dialect.search(store, "u1", "private", who="reader").entries) == ["/a.md"]
    assert dialect.find(store, "u1", "/a.md")["content"] == "private"  # nothing changed
    assert dialect.find(store, "u1", "/b.md") is None


def test_a_write_only_caller_is_told_nothing_of_the_contents(dialect, store):
    answer = dialect.write(store, "u1", "/dropped.md", "a secret", description="d", who="writer")
    assert answer.status == 200, answer.body
    assert answer.entry["path"] == "/dropped.md"
    assert (answer.entry["content"], answer.entry["description"]) == (None, None)
    handle = dialect.handle(answer)
    edited = dialect.edit(store, handle, "another secret", who="writer")
    assert edited.status == 200, edited.body
    assert (edited.entry["content"], edited.entry["description"]) == (None, None)
    for denied in (
        dialect.get(store, handle, who="writer"),
        dialect.list(store, "u1", who="writer"),
        dialect.search(store, "u1", "secret", who="writer"),
    ):
        assert (denied.status, denied.error_code) == (403, "PERMISSION_DENIED"), denied.body
    assert dialect.find(store, "u1", "/dropped.md")["content"] == "another secret"  # it was written


def test_both_dialects_see_the_same_entries(client, token):
    """An actor id is a scope: what one dialect writes, the other reads, edits and deletes."""
    uc, agents = UnityCatalog(client, token), Agents(client, token)
    name = f"conf-{uuid.uuid4().hex[:10]}"
    assert agents.create_store(name).status == 200
    written(uc.write(name, "u1", "/from-uc.md", "written as a Unity Catalog entry"))
    written(agents.write(name, "u1", "/from-agents.md", "written as an agent memory", session_id="s1"))
    assert agents.find(name, "u1", "/from-uc.md")["content"] == "written as a Unity Catalog entry"
    assert uc.find(name, "u1", "/from-agents.md", session_id="s1")["content"] == "written as an agent memory"
    assert sorted(paths(uc.list(name, "u1").entries)) == sorted(paths(agents.list(name, "u1").entries))
    handle = uc.handle(uc.get(name, ("u1", "/from-agents.md", "s1")))
    assert uc.edit(name, handle, "edited through the other dialect").status == 200
    assert agents.find(name, "u1", "/from-agents.md", session_id="s1")["content"] == (
        "edited through the other dialect"
    )
    assert uc.delete(name, handle).status == 200
    assert agents.find(name, "u1", "/from-agents.md", session_id="s1") is None
