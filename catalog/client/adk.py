"""A Google ADK `BaseMemoryService` over one memory store, so that ADK agents keep their long-term
memory in the governed catalog (`Runner(..., memory_service=CatalogMemoryService(...))`, and the
`load_memory` / `PreloadMemoryTool` tools search it). It needs `google-adk` (only this module
imports it).

The mapping, for an ADK `app_name` and `user_id`:

- the scope is `<user_id>:<app_name>`, the app name percent-encoded (`:` is `%3A`), so the user
  is the scope's subject: erasing the subject `<user_id>` erases the user's memories of every
  app, and a store with `scope_binding: end_user` lets a token acting for the user reach them. A
  `user_id` holding `:` is refused (ValueError): the subject is what comes before the first `:`;
- each event of a session that has text (its text parts, thoughts left out, joined by new
  lines; partial events are skipped) is one entry at `/sessions/<session id>/<event id>` (each
  percent-encoded as one segment; `/events/<event id>` for events added without a session id).
  A session added again writes only the events that are not there yet (`EXCLUSIVE` writes of
  up to 100 entries a request), so re-adding it duplicates nothing and leaves the written
  entries as they are; events no longer in the session stay;
- a memory of `add_memory` is one entry at `/memories/<id>`, its id the `MemoryEntry.id`
  (a new random id when it has none); adding an id again replaces that memory;
- the entry's metadata keeps what ADK's `MemoryEntry` answers: `adk.id` (the event's or the
  memory's id), `adk.author`, `adk.role`, `adk.timestamp` (ISO 8601, UTC for an event's time)
  and `adk.session_id`, beside the caller's `custom_metadata` (keys not starting `adk.`, values
  strings, numbers or booleans; `None` values are dropped);
- `search_memory` is the server's search (`entries:search`, hybrid by default, the best
  `top_k=10` with `min_score=0.5`, the recommended floor) in the user's scope, answered as
  `MemoryEntry(id, author, timestamp, content=Content(role, [Part(text)]), custom_metadata)`;
- `delete_memory(memory_id=...)` deletes the entries whose `adk.id` is that id (an id starting
  with `/` that no entry carries is taken as a path, for entries written through other APIs);
  `delete_memory()` without an id erases the user's scope of that app in the store
  (`DELETE …/entries?scope=…&all=true`: entries and their history).

`custom_metadata` keys the service reads (on `add_events_to_memory` and `add_memory`, and on each
`MemoryEntry`): `project` (below) and `ttl_seconds` (the entries expire that long after the
write); every other key is kept as the entry's metadata, and answered back in `custom_metadata`.

Projects, as the Rust edition of ADK scopes memory: a project's memories are the scope
`<user_id>:<app_name>:<project>` (percent-encoded), under the same subject. A service given
`project=` (or `for_project(name)`), or a call given the keyword `project=` or
`custom_metadata={"project": ...}`, writes there, and its searches read the user's global memories
and the project's together (one ranked search over both scopes), as a Rust `SearchRequest` with a
`project_id`; without a project, only the global ones. A search's project memories carry
`custom_metadata["project"]`. `delete_memory(memory_id=...)` looks in the scopes a search would
read; `delete_memory()` erases the one scope the service writes to (the project's, with a
project; the global one without: the server lists no scopes, so it cannot find the projects of a
user). `delete_session` deletes the memories of one session. The Rust `delete_user` is the
erasure of the subject (an admin's `POST …/system/erase-subject`); ADK's own tools
(`load_memory`, `PreloadMemoryTool`) call `search_memory` without a project, so an agent works in
a project through a service bound to it (`for_project`).

Every call goes through the API as the token's principal (authorized, held to the store's scope
binding and scope grants, audited). ADK has no error type of its own: a refusal raises the
client's `CatalogError` (`PERMISSION_DENIED` with status 403 for a principal without READ or
WRITE on the store); a bad argument raises ValueError before anything is sent.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx
from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.genai import types

from catalog.client import _calls as calls
from catalog.client._async import AsyncClient
from catalog.client._core import Call, decode, items
from catalog.client._sync import Client
from catalog.client.errors import CatalogError
from catalog.client.types import Entry, EntrySummary, SearchHit

if TYPE_CHECKING:
    from google.adk.events.event import Event
    from google.adk.sessions.session import Session

BATCH = 100  # entries a batchCreate takes
PAGE = 1000  # the server's page cap

# The service's keys in the metadata of the entries it writes.
ID_KEY = "adk.id"
AUTHOR_KEY = "adk.author"
ROLE_KEY = "adk.role"
TIMESTAMP_KEY = "adk.timestamp"
SESSION_KEY = "adk.session_id"
OWN_PREFIX = "adk."
# custom_metadata keys the service reads instead of keeping them
PROJECT = "project"
TTL = "ttl_seconds"

# the status of a batch entry's failure, as the single write would have answered it
STATUS_OF = {"INVALID_PARAMETER_VALUE": 400, "PERMISSION_DENIED": 403, "NOT_FOUND": 404}


# --- the mapping ---------------------------------------------------------------------------------


def encode(text: str) -> str:
    """`text` as one path segment or one part of a scope (`/`, `:` and `%` encoded)."""
    if text in (".", ".."):
        return text.replace(".", "%2E")
    return quote(text, safe="")


def _name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, not {value!r}")
    return value


def scope_of(app_name: str, user_id: str, project: str | None = None) -> str:
    """The scope of a user's memories of an app (and of one of its projects)."""
    user = _name(user_id, "user_id")
    if ":" in user:
        raise ValueError(
            f"user_id {user_id!r} holds ':': the scope's subject (what erasure and scope binding "
            "apply to) is what comes before the first ':'"
        )
    scope = f"{user}:{encode(_name(app_name, 'app_name'))}"
    if project is not None:
        scope += f":{encode(_name(project, 'project'))}"
    return scope


def event_path(session_id: str | None, event_id: str) -> str:
    if session_id is None:
        return f"/events/{encode(event_id)}"
    return f"/sessions/{encode(_name(session_id, 'session_id'))}/{encode(event_id)}"


def session_prefix(session_id: str) -> str:
    return f"/sessions/{encode(_name(session_id, 'session_id'))}/"


def memory_path(memory_id: str) -> str:
    return f"/memories/{encode(memory_id)}"


def text_of(content: types.Content | None) -> str:
    """The text parts of a content (thoughts left out), one line each."""
    if content is None or not content.parts:
        return ""
    return "\n".join(part.text for part in content.parts if part.text and not part.thought)


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat()


def caller_metadata(*sources: Mapping[str, object] | None) -> tuple[dict[str, Any], int | None]:
    """The caller's metadata (later sources win) without the keys the service reads, and the
    `ttl_seconds` among them."""
    kept: dict[str, Any] = {}
    ttl: int | None = None
    for source in sources:
        for key, value in (source or {}).items():
            if not isinstance(key, str) or not key:
                raise ValueError(f"custom_metadata keys are non-empty strings, not {key!r}")
            if key == PROJECT:
                continue
            if key == TTL:
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ValueError(f"custom_metadata[{TTL!r}] is a whole number of seconds >= 1")
                ttl = value
                continue
            if key.startswith(OWN_PREFIX):
                raise ValueError(
                    f"custom_metadata key {key!r}: keys starting {OWN_PREFIX!r} are the service's"
                )
            if value is None:
                continue
            if not isinstance(value, str | int | float | bool):
                raise ValueError(
                    f"custom_metadata[{key!r}] must be a string, a number or a boolean "
                    f"(the store's metadata), not {type(value).__name__}"
                )
            kept[key] = value
    return kept, ttl


def _metadata(own: Mapping[str, str | None], caller: Mapping[str, Any]) -> dict[str, Any]:
    return {**caller, **{key: value for key, value in own.items() if value is not None}}


def to_memory(entry: Entry, project: str | None) -> MemoryEntry:
    """An entry as ADK answers a memory."""
    metadata = entry.metadata or {}
    own = {key: value for key, value in metadata.items() if key.startswith(OWN_PREFIX)}
    custom = {key: value for key, value in metadata.items() if not key.startswith(OWN_PREFIX)}
    if project is not None:
        custom[PROJECT] = project
    role = own.get(ROLE_KEY)
    timestamp = own.get(TIMESTAMP_KEY)
    if not isinstance(timestamp, str):
        timestamp = iso(entry.updated_at / 1000)
    memory_id = own.get(ID_KEY)
    author = own.get(AUTHOR_KEY)
    return MemoryEntry(
        id=memory_id if isinstance(memory_id, str) else entry.path,
        author=author if isinstance(author, str) else None,
        timestamp=timestamp,
        content=types.Content(
            role=role if isinstance(role, str) else None, parts=[types.Part(text=entry.contents or "")]
        ),
        custom_metadata=custom,
    )


# --- the service ---------------------------------------------------------------------------------


class CatalogMemoryService(BaseMemoryService):
    """`CatalogMemoryService("main.default.agent_memory", url=..., token=...)`: ADK's memory over
    one memory store (see the module's docstring for the mapping and what projects do).

    `client` takes a `Client` (its calls run in a worker thread, so the service works from any
    event loop, as ADK's synchronous `Runner.run` starts one per call) or an `AsyncClient` (awaited
    on the loop it belongs to); without one the service makes a `Client` from `url` and `token`
    (defaults: `CATALOG_URL`, `CATALOG_TOKEN`) and `close()` closes it. `project` binds the
    service to a project; `top_k`, `min_score` and `search_mode` shape `search_memory`.

    Supported: every method of ADK's `BaseMemoryService` (`add_session_to_memory`,
    `add_events_to_memory`, `add_memory`, `search_memory`, `delete_memory`), each taking a
    `project=` keyword, and `delete_session`. Not supported: listing a user's projects (the server
    lists no scopes), deleting a user (erase the subject), memory generation or consolidation (an
    event's text is stored as it is).
    """

    def __init__(
        self,
        store: str,
        *,
        url: str | None = None,
        token: str | None = None,
        client: Client | AsyncClient | None = None,
        project: str | None = None,
        top_k: int = 10,
        min_score: float | None = 0.5,
        search_mode: str = "hybrid",
    ) -> None:
        calls.split_name(store, 3, "memory store")
        self.store = store
        self.project = None if project is None else _name(project, "project")
        self.top_k = top_k
        self.min_score = min_score
        self.search_mode = search_mode
        self._owns_client = client is None
        self.client: Client | AsyncClient = client if client is not None else Client(url, token)

    def for_project(self, project: str) -> CatalogMemoryService:
        """The same service (and client) bound to `project`: it writes the project's memories and
        searches the user's global ones with them."""
        return CatalogMemoryService(
            self.store,
            client=self.client,
            project=project,
            top_k=self.top_k,
            min_score=self.min_score,
            search_mode=self.search_mode,
        )

    def close(self) -> None:
        """Close the client the service made (a client given to it is left to its owner)."""
        if self._owns_client and isinstance(self.client, Client):
            self.client.close()

    # --- sending ---------------------------------------------------------------------------------

    async def _send(self, call: Call) -> httpx.Response:
        if isinstance(self.client, AsyncClient):
            return await self.client.send(call)
        return await asyncio.to_thread(self.client.send, call)

    async def _pages(self, call: Call) -> AsyncIterator[dict[str, Any]]:
        token: str | None = None
        while True:
            page = decode(await self._send(call.page(token)), dict[str, Any])
            yield page
            token = page.get("next_page_token")
            if not token:
                return

    async def _list(self, scopes: Sequence[str], **narrow: Any) -> list[tuple[str, EntrySummary]]:
        """(scope, summary) of every entry of the scopes, as narrowed (path_prefix, where)."""
        call = calls.list_entries(
            self.store,
            scopes[0] if len(scopes) == 1 else list(scopes),
            narrow.get("path_prefix"),
            None,
            PAGE,
            narrow.get("where"),
        )
        found = []
        async for page in self._pages(call):
            for summary in items(page, "entries", EntrySummary):
                found.append((summary.scope or scopes[0], summary))
        return found

    async def _delete(self, scope: str, path: str) -> None:
        try:
            await self._send(calls.delete_entry(self.store, scope, path, None, None))
        except CatalogError as exc:
            if not (exc.status == 404 and exc.error_code == "NOT_FOUND"):
                raise  # (one deleted in between is gone as asked)

    async def _write(self, scope: str, entries: list[dict[str, Any]], write_mode: str) -> None:
        """Write the entries in batches; an EXCLUSIVE entry that is already there is left as it is,
        any other failure raises (after the batch, whose other entries stand)."""
        for start in range(0, len(entries), BATCH):
            call = Call(
                "POST",
                calls._entries(self.store, ":batchCreate"),
                params={"scope": scope},
                body={"entries": entries[start : start + BATCH], "write_mode": write_mode},
                idempotent=True,  # an entry written twice is left (EXCLUSIVE) or the same (OVERWRITE)
            )
            results = decode(await self._send(call), dict[str, Any]).get("results") or []
            for result in results:
                if result.get("status") != "FAILED" or result.get("error_code") == "ALREADY_EXISTS":
                    continue
                code = str(result.get("error_code") or "FAILED")
                message = f"{result.get('path')}: {result.get('message') or ''}"
                raise CatalogError(STATUS_OF.get(code, 409), code, message)

    # --- scopes ----------------------------------------------------------------------------------

    def _project(self, project: str | None, custom_metadata: Mapping[str, object] | None) -> str | None:
        named = {p for p in (project, (custom_metadata or {}).get(PROJECT)) if p is not None}
        if len(named) > 1:
            raise ValueError(f"project {project!r} and custom_metadata['project'] differ")
        if named:
            return _name(named.pop(), "project")
        return self.project

    def _search_scopes(self, app_name: str, user_id: str, project: str | None) -> dict[str, str | None]:
        """The scopes a search reads, each with its project (None: the global one)."""
        scopes: dict[str, str | None] = {scope_of(app_name, user_id): None}
        if project is not None:
            scopes[scope_of(app_name, user_id, project)] = project
        return scopes

    # --- ADK's interface -------------------------------------------------------------------------

    async def add_session_to_memory(self, session: Session, *, project: str | None = None) -> None:
        """Every event of the session with text, as an entry of that session; the events already
        there are left as they are (no duplicate, no new version)."""
        await self._add_events(
            session.app_name, session.user_id, session.events, session.id, self._project(project, None), None
        )

    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
        project: str | None = None,
    ) -> None:
        """The events with text, as entries of the session (`session_id`) or without one; those
        already there are left as they are."""
        await self._add_events(
            app_name, user_id, events, session_id, self._project(project, custom_metadata), custom_metadata
        )

    async def _add_events(
        self,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None,
        project: str | None,
        custom_metadata: Mapping[str, object] | None,
    ) -> None:
        scope = scope_of(app_name, user_id, project)
        caller, ttl = caller_metadata(custom_metadata)
        wanted: dict[str, dict[str, Any]] = {}
        for event in events:
            text = text_of(event.content)
            if not text or event.partial or not event.id:
                continue
            path = event_path(session_id, event.id)
            own = {
                ID_KEY: event.id,
                AUTHOR_KEY: event.author or None,
                ROLE_KEY: event.content.role if event.content else None,
                TIMESTAMP_KEY: iso(event.timestamp),
                SESSION_KEY: session_id,
            }
            entry: dict[str, Any] = {
                "path": path,
                "contents": text,
                "metadata": _metadata(own, caller),
                "source_type": "adk",
            }
            if ttl is not None:
                entry["ttl_seconds"] = ttl
            wanted.setdefault(path, entry)
        if not wanted:
            return
        if session_id is not None:
            try:
                there = await self._list([scope], path_prefix=session_prefix(session_id))
            except CatalogError as exc:
                if exc.error_code != "PERMISSION_DENIED":
                    raise
                there = []  # a writer that may not read: the EXCLUSIVE writes leave what is there
            for _, summary in there:
                wanted.pop(summary.path, None)
        await self._write(scope, list(wanted.values()), "EXCLUSIVE")

    async def add_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        memories: Sequence[MemoryEntry],
        custom_metadata: Mapping[str, object] | None = None,
        project: str | None = None,
    ) -> None:
        """Each memory (its text) as an entry at `/memories/<id>`; a memory whose id is there
        already replaces it. A memory's `custom_metadata` adds to (and wins over) the call's, its
        `project` too."""
        entries_by_scope: dict[str, list[dict[str, Any]]] = {}
        for index, memory in enumerate(memories):
            text = text_of(memory.content)
            if not text:
                raise ValueError(f"memories[{index}] has no text")
            own_project = memory.custom_metadata.get(PROJECT)
            where = (
                _name(own_project, "project")
                if own_project is not None
                else self._project(project, custom_metadata)
            )
            caller, ttl = caller_metadata(custom_metadata, memory.custom_metadata)
            memory_id = memory.id or uuid.uuid4().hex
            own = {
                ID_KEY: memory_id,
                AUTHOR_KEY: memory.author,
                ROLE_KEY: memory.content.role,
                TIMESTAMP_KEY: memory.timestamp or datetime.now(tz=UTC).isoformat(),
            }
            entry: dict[str, Any] = {
                "path": memory_path(memory_id),
                "contents": text,
                "metadata": _metadata(own, caller),
                "source_type": "adk",
            }
            if ttl is not None:
                entry["ttl_seconds"] = ttl
            entries_by_scope.setdefault(scope_of(app_name, user_id, where), []).append(entry)
        for scope, entries in entries_by_scope.items():
            await self._write(scope, entries, "OVERWRITE")

    async def search_memory(
        self, *, app_name: str, user_id: str, query: str, project: str | None = None
    ) -> SearchMemoryResponse:
        """The best memories for `query` in the user's scope of the app (with a project: and in
        the project's), best first."""
        scopes = self._search_scopes(app_name, user_id, self._project(project, None))
        if not query or not query.strip():
            return SearchMemoryResponse()
        names = list(scopes)
        call = calls.search_entries(
            self.store,
            names[0] if len(names) == 1 else names,
            query,
            top_k=self.top_k,
            mode=self.search_mode,
            min_score=self.min_score,
            path_prefix=None,
            session_id=None,
        )
        page = decode(await self._send(call), dict[str, Any])
        hits = items(page, "results", SearchHit)
        return SearchMemoryResponse(
            memories=[to_memory(hit.entry, scopes.get(hit.entry.scope)) for hit in hits]
        )

    async def delete_memory(
        self, *, app_name: str, user_id: str, memory_id: str | None = None, project: str | None = None
    ) -> None:
        """With `memory_id`: the memories of that id (in the scopes a search reads). Without: every
        memory of the user in the app (with a project: in that project), history included."""
        where = self._project(project, None)
        if memory_id is None:
            await self._send(calls.delete_scope(self.store, scope_of(app_name, user_id, where)))
            return
        scopes = list(self._search_scopes(app_name, user_id, where))
        found = await self._list(scopes, where={ID_KEY: _name(memory_id, "memory_id")})
        for scope, summary in found:
            await self._delete(scope, summary.path)
        if not found and memory_id.startswith("/"):  # an entry written otherwise: its id is its path
            for scope in scopes:
                await self._delete(scope, memory_id)

    async def delete_session(
        self, *, app_name: str, user_id: str, session_id: str, project: str | None = None
    ) -> None:
        """The memories of one session (added by `add_session_to_memory` or with its id)."""
        scope = scope_of(app_name, user_id, self._project(project, None))
        for _, summary in await self._list([scope], path_prefix=session_prefix(session_id)):
            await self._delete(scope, summary.path)
