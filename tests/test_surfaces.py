"""The spec of entry behaviour, run through every surface by which applications reach a store's
entries: the Unity Catalog routes, the agent-memory dialect's routes, the MCP memory tools, the
Python client, and the LangGraph and Google ADK adapters.

Each surface is one small adapter (`Surface`) that speaks its own form and answers in one shape:
`write(scope, key, text)` (what the surface does to keep a text under a key: an OVERWRITE write, the
agent SDK's create-then-patch, `save_memory` then `update_memory`, a LangGraph put, an ADK session
added to memory), `read(scope, key)` (the text, None when there is none), `search(scope, words)`
(the texts found, best first) and `delete(scope, key)`; each takes the principal who calls it
(`who`). A refusal raises `Refused` after the adapter has checked the surface's own form of it: 403
`PERMISSION_DENIED` on a route, a refusal before any tool runs or a tool result with `isError` over
MCP, the client's `CatalogError` for the clients. Each surface decides the scope its own way, and it
never comes from a model: a field of the request, the token's `on_behalf_of` (MCP), the namespace's
first label (LangGraph), the ADK user and app (`<user>:<app>`). So the scopes below are ADK's
(`alice:surf`), and every surface reaches the same scope of the store with them.

A surface says what it can (`can`): a behaviour is run through the surfaces that have what it needs.
An ADK session's events are not read by key, and a session added again is left as it is (no
overwrite). A new surface is one adapter class, added to `SURFACES`.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import pytest
from google.adk.events.event import Event
from google.adk.sessions import Session
from google.genai import types
from litestar.testing import TestClient
from rest import UC, bearer

from catalog.auth import mint_dev_token
from catalog.client import CatalogError, Client
from catalog.client.adk import CatalogMemoryService, scope_of, text_of
from catalog.client.langgraph import CatalogStore
from catalog.settings import Settings

BASE = "http://testserver.local"
AGENTS = "/api/2.0/agents/memory-stores"
APP = "surf"  # the ADK app of every scope below
ALICE, BOB = scope_of(APP, "alice"), scope_of(APP, "bob")

READ, SEARCH, DELETE, OVERWRITE = "read", "search", "delete", "overwrite"


class Refused(Exception):
    """The caller was refused, in the surface's own form (checked by the adapter)."""


class Surface(ABC):
    name: ClassVar[str]
    can: ClassVar[frozenset[str]]

    def __init__(self, app: TestClient, settings: Settings, store: str) -> None:
        self.app, self.settings, self.store = app, settings, store

    @abstractmethod
    def write(self, scope: str, key: str, text: str, who: str = "admin") -> None: ...

    def read(self, scope: str, key: str, who: str = "admin") -> str | None:
        """The text at the key; only a surface that can (READ in `can`) reads by key."""
        raise TypeError(f"{self.name} reads no entry by key: the spec's tests ask it only what it `can`")

    @abstractmethod
    def search(self, scope: str, words: str, who: str = "admin") -> list[str]: ...

    @abstractmethod
    def delete(self, scope: str, key: str, who: str = "admin") -> None: ...

    def client(self, who: str) -> Client:
        return Client(BASE, mint_dev_token(self.settings, who), http=self.app)


def path(key: str) -> str:
    return f"/{key}"  # (LangGraph's path of a key in the namespace `(scope,)`)


def answered(r: Any) -> Any:
    """A route's answer: its body (200), or Refused (403 PERMISSION_DENIED)."""
    if r.status_code == 403:
        assert r.json()["error_code"] == "PERMISSION_DENIED", r.text
        raise Refused(r.text)
    assert r.status_code == 200, r.text
    return r.json()


@contextmanager
def client_refusals() -> Iterator[None]:
    try:
        yield
    except CatalogError as exc:
        if (exc.status, exc.error_code) == (403, "PERMISSION_DENIED"):
            raise Refused(str(exc)) from exc
        raise


class UnityCatalog(Surface):
    name = "unity-catalog"
    can = frozenset({READ, SEARCH, DELETE, OVERWRITE})

    def _url(self, suffix: str = "") -> str:
        return f"{UC}/memory-stores/{self.store}/entries{suffix}"

    def write(self, scope: str, key: str, text: str, who: str = "admin") -> None:
        body = {"path": path(key), "contents": text, "write_mode": "OVERWRITE"}
        r = self.app.post(self._url(), headers=bearer(self.settings, who), params={"scope": scope}, json=body)
        answered(r)

    def read(self, scope: str, key: str, who: str = "admin") -> str | None:
        params = {"scope": scope, "path": path(key)}
        r = self.app.get(self._url(":get"), headers=bearer(self.settings, who), params=params)
        if r.status_code == 404:
            assert r.json()["error_code"] == "NOT_FOUND", r.text
            return None
        return str(answered(r)["contents"])

    def search(self, scope: str, words: str, who: str = "admin") -> list[str]:
        body = {"scope": scope, "query": words, "top_k": 20}
        r = self.app.post(self._url(":search"), headers=bearer(self.settings, who), json=body)
        return [hit["memory_entry"]["contents"] for hit in answered(r)["results"]]

    def delete(self, scope: str, key: str, who: str = "admin") -> None:
        params = {"scope": scope, "path": path(key)}
        answered(self.app.delete(self._url(), headers=bearer(self.settings, who), params=params))


class Agents(Surface):
    """An entry is addressed by its id: a key is found by listing the scope's entries at its path."""

    name = "agents"
    can = frozenset({READ, SEARCH, DELETE, OVERWRITE})

    def _url(self, suffix: str = "") -> str:
        return f"{AGENTS}/{self.store.rsplit('.', 1)[1]}/entries{suffix}"  # the store in main.default

    def _find(self, scope: str, key: str, who: str) -> dict[str, Any] | None:
        params = {"actor_id": scope, "path": path(key)}
        listed = answered(self.app.get(self._url(), headers=bearer(self.settings, who), params=params))
        found = [
            e for e in listed["managed_memory_entries"] if e["path"] == path(key) and not e.get("session_id")
        ]
        assert len(found) <= 1, found
        return found[0] if found else None

    def write(self, scope: str, key: str, text: str, who: str = "admin") -> None:
        body = {"actor_id": scope, "path": path(key), "content": text}
        r = self.app.post(self._url(), headers=bearer(self.settings, who), json=body)
        if r.status_code == 409 and r.json()["error_code"] == "ALREADY_EXISTS":  # the SDK's put()
            existing = self._find(scope, key, who)
            assert existing is not None, r.text
            r = self.app.patch(
                self._url(f"/{existing['name'].rsplit('/', 1)[1]}"),
                headers=bearer(self.settings, who),
                params={"update_mask": "content"},
                json={"content": text},
            )
        answered(r)

    def read(self, scope: str, key: str, who: str = "admin") -> str | None:
        found = self._find(scope, key, who)
        return None if found is None else str(found["content"])

    def search(self, scope: str, words: str, who: str = "admin") -> list[str]:
        body = {"actor_id": scope, "query": words, "limit": 20}
        r = self.app.post(self._url(":search"), headers=bearer(self.settings, who), json=body)
        return [hit["managed_memory_entry"]["content"] for hit in answered(r)["results"]]

    def delete(self, scope: str, key: str, who: str = "admin") -> None:
        found = self._find(scope, key, who)
        assert found is not None, key
        url = self._url(f"/{found['name'].rsplit('/', 1)[1]}")
        answered(self.app.delete(url, headers=bearer(self.settings, who)))


class ToolFailed(Exception):
    """A tool result with `isError` that is not a refusal (its message, written for the model)."""


class Mcp(Surface):
    """The scope is the token's `on_behalf_of`: the tools take none."""

    name = "mcp"
    can = frozenset({READ, SEARCH, DELETE, OVERWRITE})

    def _call(self, scope: str, who: str, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        headers = {
            **bearer(self.settings, who, on_behalf_of=scope),
            "Accept": "application/json, text/event-stream",
        }
        message = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        }
        r = self.app.post(f"/mcp/memory-stores/{self.store}", headers=headers, json=message)
        if r.status_code == 403:  # no privilege on the store: refused before any tool runs
            answered(r)
        assert r.status_code == 200, r.text
        reply = r.json()
        assert "error" not in reply, reply
        result: dict[str, Any] = reply["result"]
        if result.get("isError"):
            text = result["content"][0]["text"]
            raise (Refused if text.startswith("not allowed to") else ToolFailed)(text)
        return dict(result["structuredContent"])

    def write(self, scope: str, key: str, text: str, who: str = "admin") -> None:
        try:
            self._call(scope, who, "save_memory", {"path": path(key), "description": "-", "contents": text})
        except ToolFailed as exc:
            assert "update_memory" in str(exc), exc  # a memory is there: the model updates it
            update = {"path": path(key), "replace_all": {"contents": text}}
            self._call(scope, who, "update_memory", update)

    def read(self, scope: str, key: str, who: str = "admin") -> str | None:
        try:
            return str(self._call(scope, who, "get_memory", {"path": path(key)})["memory"]["contents"])
        except ToolFailed as exc:
            assert str(exc).startswith(f"no memory at {path(key)}"), exc
            return None

    def search(self, scope: str, words: str, who: str = "admin") -> list[str]:
        found = self._call(scope, who, "search_memory", {"query": words, "top_k": 20})
        return [memory["contents"] for memory in found["memories"]]

    def delete(self, scope: str, key: str, who: str = "admin") -> None:
        self._call(scope, who, "delete_memory", {"path": path(key)})


class PythonClient(Surface):
    name = "client"
    can = frozenset({READ, SEARCH, DELETE, OVERWRITE})

    def write(self, scope: str, key: str, text: str, who: str = "admin") -> None:
        with client_refusals():
            self.client(who).store(self.store).write(scope, path(key), text, write_mode="OVERWRITE")

    def read(self, scope: str, key: str, who: str = "admin") -> str | None:
        with client_refusals():
            try:
                return self.client(who).store(self.store).get(scope, path(key)).contents
            except CatalogError as exc:
                if (exc.status, exc.error_code) != (404, "NOT_FOUND"):
                    raise
                return None

    def search(self, scope: str, words: str, who: str = "admin") -> list[str]:
        with client_refusals():
            hits = self.client(who).store(self.store).search(scope, words, top_k=20)
        return [hit.entry.contents or "" for hit in hits]

    def delete(self, scope: str, key: str, who: str = "admin") -> None:
        with client_refusals():
            self.client(who).store(self.store).delete(scope, path(key))


def value_text(value: dict[str, Any]) -> str:
    """The text of a LangGraph value: its own (`text`), or an entry written through another API."""
    return str(value.get("text", value.get("contents")))


class LangGraph(Surface):
    """The scope is the namespace's first label: a key is the item `(scope,)`, key."""

    name = "langgraph"
    can = frozenset({READ, SEARCH, DELETE, OVERWRITE})

    def _store(self, who: str) -> CatalogStore:
        return CatalogStore(self.store, client=self.client(who))

    def write(self, scope: str, key: str, text: str, who: str = "admin") -> None:
        with client_refusals():
            self._store(who).put((scope,), key, {"text": text})

    def read(self, scope: str, key: str, who: str = "admin") -> str | None:
        with client_refusals():
            item = self._store(who).get((scope,), key)
        return None if item is None else value_text(item.value)

    def search(self, scope: str, words: str, who: str = "admin") -> list[str]:
        with client_refusals():
            items = self._store(who).search((scope,), query=words, limit=20)
        return [value_text(item.value) for item in items]

    def delete(self, scope: str, key: str, who: str = "admin") -> None:
        with client_refusals():
            self._store(who).delete((scope,), key)


class Adk(Surface):
    """The scope is `<user>:<app>`; a key is a session of one event that holds the text."""

    name = "adk"
    can = frozenset({SEARCH, DELETE})

    def _service(self, who: str) -> CatalogMemoryService:
        return CatalogMemoryService(self.store, client=self.client(who))

    @staticmethod
    def _app_user(scope: str) -> tuple[str, str]:
        user, app = scope.split(":", 1)
        assert scope_of(app, user) == scope, scope
        return app, user

    def write(self, scope: str, key: str, text: str, who: str = "admin") -> None:
        app, user = self._app_user(scope)
        content = types.Content(role="user", parts=[types.Part(text=text)])
        event = Event(id=f"ev-{key}", invocation_id="inv", author="user", content=content)
        session = Session(id=key, app_name=app, user_id=user, events=[event])
        with client_refusals():
            asyncio.run(self._service(who).add_session_to_memory(session))

    def search(self, scope: str, words: str, who: str = "admin") -> list[str]:
        app, user = self._app_user(scope)
        with client_refusals():
            found = asyncio.run(self._service(who).search_memory(app_name=app, user_id=user, query=words))
        return [text_of(memory.content) for memory in found.memories]

    def delete(self, scope: str, key: str, who: str = "admin") -> None:
        app, user = self._app_user(scope)
        with client_refusals():
            asyncio.run(self._service(who).delete_session(app_name=app, user_id=user, session_id=key))


SURFACES: tuple[type[Surface], ...] = (UnityCatalog, Agents, Mcp, PythonClient, LangGraph, Adk)


def with_capability(*needed: str) -> list[Any]:
    """The surfaces that can do what a behaviour needs, as parameters of the `surface` fixture."""
    return [pytest.param(kind, id=kind.name) for kind in SURFACES if set(needed) <= kind.can]


@pytest.fixture
def store(client: TestClient, settings: Settings) -> str:
    """A store of the test's own: `reader` holds READ on it, `stranger` nothing."""
    name = f"main.default.surf-{uuid.uuid4().hex[:8]}"  # (an agent store id has no `_`)
    admin = Client(BASE, mint_dev_token(settings, "admin"), http=client)
    admin.memory_stores.create(name)
    admin.grants.update("memory_store", name, "reader", add=["READ_MEMORY_STORE"])
    return name


@pytest.fixture
def surface(request: pytest.FixtureRequest, client: TestClient, settings: Settings, store: str) -> Surface:
    kind: type[Surface] = request.param
    return kind(client, settings, store)


def recalled(surface: Surface, scope: str, key: str, words: str, who: str = "admin") -> list[str]:
    """What a surface gives back of a key: its text where it reads by key (none: nothing), else the
    texts its search finds for `words`."""
    if READ in surface.can:
        text = surface.read(scope, key, who)
        return [] if text is None else [text]
    return surface.search(scope, words, who)


@pytest.mark.parametrize("surface", with_capability(), indirect=True)
def test_what_is_written_reads_back(surface: Surface) -> None:
    surface.write(ALICE, "prefs", "prefers email over phone calls")
    assert "prefers email over phone calls" in recalled(surface, ALICE, "prefs", "email phone")
    if READ in surface.can:
        assert surface.read(ALICE, "prefs") == "prefers email over phone calls"
        assert surface.read(ALICE, "never-written") is None


@pytest.mark.parametrize("surface", with_capability(SEARCH), indirect=True)
def test_search_finds_an_entry_by_its_words_within_its_scope(surface: Surface) -> None:
    surface.write(ALICE, "trip", "hiking trip to the Dolomites in September")
    surface.write(ALICE, "food", "allergic to peanuts")
    surface.write(BOB, "trip", "bob skis in the Dolomites every winter")
    found = surface.search(ALICE, "Dolomites hiking")
    assert found and found[0] == "hiking trip to the Dolomites in September", found
    assert "bob skis in the Dolomites every winter" not in found
    assert "allergic to peanuts" in surface.search(ALICE, "peanuts")


@pytest.mark.parametrize("surface", with_capability(), indirect=True)
def test_scopes_never_cross(surface: Surface) -> None:
    surface.write(ALICE, "secret", "alice keeps a quokka")
    assert recalled(surface, BOB, "secret", "quokka") == []
    assert surface.search(BOB, "alice keeps a quokka") == []
    surface.write(BOB, "secret", "bob keeps a wombat")
    assert recalled(surface, ALICE, "secret", "quokka") == ["alice keeps a quokka"]
    assert "bob keeps a wombat" not in surface.search(ALICE, "keeps wombat quokka")
    assert "alice keeps a quokka" not in surface.search(BOB, "keeps wombat quokka")


@pytest.mark.parametrize("surface", with_capability(OVERWRITE), indirect=True)
def test_an_overwrite_is_what_is_seen_next(surface: Surface) -> None:
    surface.write(ALICE, "bird", "the old text about herons")
    surface.write(ALICE, "bird", "the new text about pelicans")
    assert recalled(surface, ALICE, "bird", "pelicans") == ["the new text about pelicans"]
    assert surface.search(ALICE, "pelicans")[:1] == ["the new text about pelicans"]
    assert all("herons" not in text for text in surface.search(ALICE, "old text about herons"))


@pytest.mark.parametrize("surface", with_capability(DELETE), indirect=True)
def test_a_deleted_entry_is_gone_from_read_and_search(surface: Surface) -> None:
    surface.write(ALICE, "gone", "an ephemeral walrus")
    surface.write(ALICE, "kept", "a lasting walrus")
    surface.delete(ALICE, "gone")
    if READ in surface.can:
        assert surface.read(ALICE, "gone") is None
        assert surface.read(ALICE, "kept") == "a lasting walrus"
    assert surface.search(ALICE, "walrus") == ["a lasting walrus"]


@pytest.mark.parametrize("surface", with_capability(), indirect=True)
def test_a_caller_without_a_privilege_is_refused_and_nothing_is_written(surface: Surface) -> None:
    surface.write(ALICE, "otters", "a private note about otters")
    with pytest.raises(Refused):
        surface.write(ALICE, "intrusion", "written by an intruder", who="stranger")
    with pytest.raises(Refused):  # READ alone does not write
        surface.write(ALICE, "intrusion", "written by a reader", who="reader")
    with pytest.raises(Refused):
        surface.search(ALICE, "otters", who="stranger")
    assert surface.search(ALICE, "private otters", who="reader")[:1] == ["a private note about otters"]
    assert recalled(surface, ALICE, "intrusion", "written intruder reader") == []
    if READ in surface.can:
        with pytest.raises(Refused):
            surface.read(ALICE, "otters", who="stranger")


PAIRS = [
    pytest.param(writer, reader, id=f"{writer.name}->{reader.name}")
    for writer, reader in itertools.permutations(SURFACES, 2)
]


@pytest.mark.parametrize(("writer", "reader"), PAIRS)
def test_what_one_surface_writes_another_reads(
    client: TestClient, settings: Settings, store: str, writer: type[Surface], reader: type[Surface]
) -> None:
    """One store, one scope, two surfaces. (A LangGraph item's contents are its value as JSON,
    so another surface finds its text inside them.)"""
    source, target = writer(client, settings, store), reader(client, settings, store)
    source.write(ALICE, "shared", "the lighthouse keeper collects barometers")
    found = target.search(ALICE, "lighthouse barometers")
    assert any("the lighthouse keeper collects barometers" in text for text in found), found
    if READ in source.can and READ in target.can:  # (the same key is the same path)
        assert "the lighthouse keeper collects barometers" in (target.read(ALICE, "shared") or "")
    assert target.search(BOB, "lighthouse barometers") == []
