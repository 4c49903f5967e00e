"""`Client`: the catalog's API over a blocking httpx client."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

import httpx

from catalog.client import _calls as calls
from catalog.client._core import (
    Call,
    Retry,
    decode,
    default_token,
    default_url,
    direct_request,
    error_from,
    headers,
    items,
    transport_error,
)
from catalog.client._transport import lean_sync_transport
from catalog.client.errors import CatalogError
from catalog.client.types import (
    AuditEvent,
    AuditVerification,
    Catalog,
    DeletedMatching,
    EffectivePrivilegeAssignment,
    Entry,
    EntrySummary,
    EntryVersion,
    Group,
    Lineage,
    MemoryStore,
    MetastoreSummary,
    PrivilegeAssignment,
    Schema,
    SearchHit,
    SearchHits,
)

T = TypeVar("T")
Versions = list[EntryVersion]  # (Store.list shadows `list` in its class)


class Client:
    """The catalog's API: `Client(url, token)`; `url` defaults to `CATALOG_URL` (else
    http://127.0.0.1:8080) and `token` to `CATALOG_TOKEN`.

    Every failure raises `catalog.client.CatalogError` (`.status`, `.error_code`, `.message`);
    lists are iterators that fetch page after page as they are read. `http` takes an httpx
    client of your own (proxies, certificates, an in-process app); the client then leaves
    closing it to you. Without one, a plain-HTTP URL's calls go through a lean keep-alive
    transport (`catalog.client._transport`), and a backup's streamed download and upload through
    httpx's own, as does everything for an HTTPS URL or one behind a proxy.
    """

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retry: Retry | None = None,
        http: httpx.Client | None = None,
    ) -> None:
        base = url or (str(http.base_url) if http is not None and str(http.base_url) else default_url())
        self.url = base.rstrip("/")
        self.token = token if token is not None else default_token()
        self.retry = retry or Retry()
        self._owns_http = http is None
        # over plain HTTP, the lean transport (`catalog.client._transport`), which `send` hands
        # each request to directly; else httpx's own
        self._lean = lean = lean_sync_transport(self.url) if http is None else None
        self.http = http if http is not None else httpx.Client(timeout=timeout, transport=lean)
        # a backup's download and upload stream their bodies: httpx's own transport (made when
        # first needed) where `self.http` is on the lean one, which reads an answer whole
        self._streaming: httpx.Client | None = None if lean is not None else self.http
        self.catalogs = Catalogs(self)
        self.schemas = Schemas(self)
        self.memory_stores = MemoryStores(self)
        self.grants = Grants(self)
        self.groups = Groups(self)
        self.audit = Audit(self)
        self.lineage = LineageAPI(self)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owns_http:
            self.http.close()
            if self._streaming is not None and self._streaming is not self.http:
                self._streaming.close()

    def _streams(self) -> httpx.Client:
        """The httpx client for streamed bodies (see __init__)."""
        if self._streaming is None:
            self._streaming = httpx.Client(timeout=self.http.timeout)
        return self._streaming

    # --- sending ---------------------------------------------------------------------------------

    def send(self, call: Call) -> httpx.Response:
        """Send `call` (retrying as `self.retry` allows); the 2xx answer, else CatalogError."""
        attempt = 0
        while True:
            try:
                if self._lean is not None:
                    response = self._lean.handle_request(
                        direct_request(self.http, self.url, self.token, call)
                    )
                else:
                    response = self.http.request(
                        call.method,
                        self.url + call.path,
                        params=call.query(),
                        content=call.content(),
                        headers=headers(self.token, call),
                    )
            except httpx.TransportError as exc:
                raise transport_error(exc, self.url) from None
            if response.status_code < 400:
                return response
            wait = self.retry.wait(attempt, call, response)
            if wait is None:
                raise error_from(response)
            response.close()
            time.sleep(wait)
            attempt += 1

    def call(self, call: Call, type_: type[T]) -> T:
        return decode(self.send(call), type_)

    def download(self, call: Call) -> Iterator[bytes]:
        """The 2xx answer's body, chunk after chunk as it arrives (else CatalogError); sent once,
        never retried: a long answer is not started again."""
        try:
            with self._streams().stream(
                call.method, self.url + call.path, params=call.query(), headers=headers(self.token, call)
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    raise error_from(response)
                yield from response.iter_bytes()
        except httpx.TransportError as exc:
            raise transport_error(exc, self.url) from None

    def upload(self, call: Call, content: bytes | Iterable[bytes], type_: type[T]) -> T:
        """Send `content` as the body of `call` (sent once, never retried) and wait for the
        answer as long as the server takes (no read timeout): the decoded 2xx answer, else
        CatalogError."""
        timeout = httpx.Timeout(self.http.timeout.connect, read=None, write=None, pool=None)
        try:
            response = self._streams().request(
                call.method,
                self.url + call.path,
                params=call.query(),
                content=content,
                headers=headers(self.token, call),
                timeout=timeout,
            )
        except httpx.TransportError as exc:
            raise transport_error(exc, self.url) from None
        if response.status_code >= 400:
            raise error_from(response)
        return decode(response, type_)

    def pages(self, call: Call) -> Iterator[dict[str, Any]]:
        """Every page of a list, as the server answered it (the last has no next_page_token)."""
        token: str | None = None
        while True:
            page = self.call(call.page(token), dict[str, Any])
            yield page
            token = page.get("next_page_token")
            if not token:
                return

    def each(self, call: Call, key: str, type_: type[T]) -> Iterator[T]:
        for page in self.pages(call):
            yield from items(page, key, type_)

    def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """Any route, for what the typed methods do not cover: the decoded JSON answer."""
        call = Call(method.upper(), path, params=params or {}, body=json, headers=headers or {})
        return self.call(call, Any)  # type: ignore[arg-type]

    # --- objects ---------------------------------------------------------------------------------

    def metastore(self) -> MetastoreSummary:
        """The metastore (its `metastore_id` is the full name to grant CREATE_CATALOG on)."""
        return self.call(calls.metastore_summary(), MetastoreSummary)

    def store(self, full_name: str) -> Store:
        """The entries of one memory store (`catalog.schema.store`)."""
        return Store(self, full_name)


class Catalogs:
    def __init__(self, client: Client) -> None:
        self._c = client

    def create(
        self, name: str, *, comment: str | None = None, properties: dict[str, str] | None = None
    ) -> Catalog:
        return self._c.call(calls.create_catalog(name, comment, properties), Catalog)

    def get(self, name: str) -> Catalog:
        return self._c.call(calls.get_catalog(name), Catalog)

    def list(self, *, page_size: int | None = None) -> Iterator[Catalog]:
        return self._c.each(calls.list_catalogs(page_size), "catalogs", Catalog)

    def update(
        self,
        name: str,
        *,
        comment: str | None = None,
        properties: dict[str, str] | None = None,
        owner: str | None = None,
    ) -> Catalog:
        call = calls.update_catalog(name, comment=comment, properties=properties, owner=owner)
        return self._c.call(call, Catalog)

    def delete(self, name: str, *, force: bool = False) -> None:
        self._c.send(calls.delete_catalog(name, force))


class Schemas:
    def __init__(self, client: Client) -> None:
        self._c = client

    def create(
        self, full_name: str, *, comment: str | None = None, properties: dict[str, str] | None = None
    ) -> Schema:
        return self._c.call(calls.create_schema(full_name, comment, properties), Schema)

    def get(self, full_name: str) -> Schema:
        return self._c.call(calls.get_schema(full_name), Schema)

    def list(self, catalog: str, *, page_size: int | None = None) -> Iterator[Schema]:
        return self._c.each(calls.list_schemas(catalog, page_size), "schemas", Schema)

    def update(
        self,
        full_name: str,
        *,
        comment: str | None = None,
        properties: dict[str, str] | None = None,
        owner: str | None = None,
    ) -> Schema:
        call = calls.update_schema(full_name, comment=comment, properties=properties, owner=owner)
        return self._c.call(call, Schema)

    def delete(self, full_name: str, *, force: bool = False) -> None:
        self._c.send(calls.delete_schema(full_name, force))


class MemoryStores:
    def __init__(self, client: Client) -> None:
        self._c = client

    def create(
        self,
        full_name: str,
        *,
        description: str | None = None,
        properties: dict[str, str] | None = None,
        scope_binding: str | None = None,
        shared_scopes: Sequence[str] | None = None,
    ) -> MemoryStore:
        call = calls.create_store(
            full_name,
            description=description,
            properties=properties,
            scope_binding=scope_binding,
            shared_scopes=list(shared_scopes) if shared_scopes is not None else None,
        )
        return self._c.call(call, MemoryStore)

    def get(self, full_name: str) -> MemoryStore:
        return self._c.call(calls.get_store(full_name), MemoryStore)

    def list(self, catalog: str, schema: str, *, page_size: int | None = None) -> Iterator[MemoryStore]:
        return self._c.each(calls.list_stores(catalog, schema, page_size), "memory_stores", MemoryStore)

    def update(
        self,
        full_name: str,
        *,
        description: str | None = None,
        properties: dict[str, str] | None = None,
        owner: str | None = None,
        scope_binding: str | None = None,
        shared_scopes: Sequence[str] | None = None,
        legal_hold: bool | None = None,
        default_ttl_seconds: int | None = None,
    ) -> MemoryStore:
        call = calls.update_store(
            full_name,
            description=description,
            properties=properties,
            owner=owner,
            scope_binding=scope_binding,
            shared_scopes=list(shared_scopes) if shared_scopes is not None else None,
            legal_hold=legal_hold,
            default_ttl_seconds=default_ttl_seconds,
        )
        return self._c.call(call, MemoryStore)

    def delete(self, full_name: str) -> None:
        self._c.send(calls.delete_store(full_name))

    def export(self, full_name: str, *, scope: str | None = None) -> Iterator[bytes]:
        """The store's archive (JSON lines: a header, the store, its grants, entries with history
        and vectors, conversations, sessions, lineage, and a manifest last), chunk after chunk;
        `scope` limits it to one scope. It needs MANAGE and READ on the store."""
        return self._c.download(calls.export_store(full_name, scope))

    def import_archive(self, full_name: str, archive: bytes | Iterable[bytes]) -> dict[str, Any]:
        """Restore an archive into `full_name`: a new store (CREATE_MEMORY_STORE on its schema)
        or an existing one that holds nothing (MANAGE on it). The answer counts what came in."""
        return self._c.upload(calls.import_store(full_name), archive, dict[str, Any])


class Grants:
    """Grants on a securable: `securable_type` is `metastore` (full name: its metastore_id),
    `catalog`, `schema` or `memory_store`; privileges as `READ_MEMORY_STORE` (or with spaces).
    A grant limited to scopes is answered with its patterns (`PrivilegeAssignment.scopes`)."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def get(
        self, securable_type: str, full_name: str, *, principal: str | None = None
    ) -> list[PrivilegeAssignment]:
        call = calls.get_permissions(securable_type, full_name, principal)
        return list(self._c.each(call, "privilege_assignments", PrivilegeAssignment))

    def update(
        self,
        securable_type: str,
        full_name: str,
        principal: str,
        *,
        add: Sequence[str] = (),
        remove: Sequence[str] = (),
        scopes: Sequence[str] | None = None,
    ) -> list[PrivilegeAssignment]:
        """Grant `add` and revoke `remove` for `principal`, all or nothing; the grants after.

        `scopes` (scopes such as `team-a`, or prefixes ending in `*` such as `team-a:*`; at most
        20) limits READ_MEMORY_STORE and WRITE_MEMORY_STORE: added with them, a privilege holds
        only in the scopes they match (added to the patterns of a grant already limited; a grant
        for every scope stays so); removed with them, those patterns are taken from the grant
        (it goes with its last one). Added without them, a privilege holds in every scope."""
        call = calls.update_permissions(securable_type, full_name, principal, add, remove, scopes)
        return items(self._c.call(call, dict[str, Any]), "privilege_assignments", PrivilegeAssignment)

    def effective(
        self, securable_type: str, full_name: str, *, principal: str | None = None
    ) -> list[EffectivePrivilegeAssignment]:
        """What `principal` (yourself by default) may do on the object, and where each privilege
        comes from (`inherited_from_type`/`_name`, and the group as the assignment's principal);
        a privilege held only in some scopes has their patterns in `scopes`."""
        call = calls.effective_permissions(securable_type, full_name, principal)
        return list(self._c.each(call, "privilege_assignments", EffectivePrivilegeAssignment))


class Groups:
    """Groups (SCIM; only the metastore admin manages them): grant a privilege to a group by its
    name, and every member holds it. Members are principal names (token subjects) or group ids."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def create(self, name: str, *, members: Sequence[str] = ()) -> Group:
        return self._c.call(calls.create_group(name, members), Group)

    def get(self, name: str) -> Group:
        found = items(self._c.call(calls.find_group(name), dict[str, Any]), "Resources", Group)
        if not found:
            raise CatalogError(404, "RESOURCE_DOES_NOT_EXIST", f"no group named {name}")
        return found[0]

    def list(self) -> Iterator[Group]:
        start = 1
        while True:
            page = self._c.call(calls.list_groups(start), dict[str, Any])
            groups = items(page, "Resources", Group)
            yield from groups
            start += len(groups)
            if not groups or start > int(page.get("totalResults") or 0):
                return

    def add_members(self, name: str, members: Sequence[str]) -> Group:
        group = self.get(name)
        return self._c.call(calls.change_members(group.id, "add", members), Group)

    def remove_members(self, name: str, members: Sequence[str]) -> Group:
        group = self.get(name)
        return self._c.call(calls.change_members(group.id, "remove", members), Group)

    def delete(self, name: str) -> None:
        self._c.send(calls.delete_group(self.get(name).id))


class Audit:
    def __init__(self, client: Client) -> None:
        self._c = client

    def events(self, *, limit: int | None = None, **filters: Any) -> Iterator[AuditEvent]:
        """Every audit event that matches, newest first unless `order="asc"`, page after page.
        Filters: start_time, end_time (epoch ms or datetime), principal, action_name,
        securable_full_name, decision, status_code, scope, order, page_size; `limit` stops early."""
        events = self._c.each(calls.audit_events(filters), "events", AuditEvent)
        for count, event in enumerate(events):
            if limit is not None and count >= limit:
                return
            yield event

    def verify(self) -> AuditVerification:
        """Recompute the hash chain on the server: `ok`, events `checked`, `first_broken_seq`."""
        return self._c.call(calls.verify_audit(), AuditVerification)


class LineageAPI:
    def __init__(self, client: Client) -> None:
        self._c = client

    def get(
        self,
        securable_full_name: str,
        *,
        direction: str | None = None,
        scope: str | None = None,
        path: str | None = None,
        session_id: str | None = None,
        depth: int | None = None,
    ) -> Lineage:
        """The entries a store (or one entry, with scope and path) was derived from (`upstream`,
        the default) or that were derived from it (`downstream`)."""
        call = calls.lineage(securable_full_name, direction, scope, path, session_id, depth)
        return self._c.call(call, Lineage)


class Store:
    """The entries of one memory store, by scope (whose memory: a user, a team) and path."""

    def __init__(self, client: Client, full_name: str) -> None:
        self._c = client
        self.full_name = full_name

    def info(self) -> MemoryStore:
        return self._c.memory_stores.get(self.full_name)

    def write(
        self,
        scope: str,
        path: str,
        contents: str | None = None,
        *,
        description: str | None = None,
        write_mode: str | None = None,
        etag: str | None = None,
        session_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        ttl_seconds: int | None = None,
        source_type: str | None = None,
        creation_reason: str | None = None,
        creation_source: str | None = None,
        derived_from: Sequence[dict[str, Any]] | None = None,
    ) -> Entry:
        """Write an entry: `write_mode` EXCLUSIVE (the default: ALREADY_EXISTS if it is there),
        OVERWRITE or APPEND. With `etag`, replace the contents (and description) only while the
        entry is still at that version (else ABORTED); that write takes no other field."""
        if etag is not None:
            others = (write_mode not in (None, "OVERWRITE", "overwrite"), metadata, ttl_seconds, source_type)
            if any(others) or creation_reason or creation_source or derived_from:
                raise ValueError("a write with etag replaces contents and description only")
            call = calls.replace_entry(
                self.full_name,
                scope,
                path,
                contents=contents,
                description=description,
                session_id=session_id,
                etag=etag,
            )
            return self._c.call(call, Entry)
        call = calls.write_entry(
            self.full_name,
            scope,
            path,
            contents=contents,
            description=description,
            write_mode=write_mode,
            session_id=session_id,
            metadata=metadata,
            ttl_seconds=ttl_seconds,
            source_type=source_type,
            creation_reason=creation_reason,
            creation_source=creation_source,
            derived_from=derived_from,
        )
        return self._c.call(call, Entry)

    def get(self, scope: str, path: str, *, session_id: str | None = None) -> Entry:
        return self._c.call(calls.get_entry(self.full_name, scope, path, session_id), Entry)

    def edit(
        self,
        scope: str,
        path: str,
        *,
        session_id: str | None = None,
        description: str | None = None,
        str_replace: tuple[str, str] | None = None,
        insert: str | None = None,
        insert_line: int | None = None,
        replace_all: str | None = None,
        append: str | None = None,
        etag: str | None = None,
        metadata: dict[str, Any] | None = None,
        ttl_seconds: int | None = None,
    ) -> Entry:
        """One change to an entry (`str_replace=(old, new)`, `insert` at `insert_line` or at the
        end, `replace_all`, `append`) and/or a new description or metadata (`{}` clears it);
        `ttl_seconds` alone renews the expiry without a new version; `etag` makes it conditional."""
        call = calls.edit_entry(
            self.full_name,
            scope,
            path,
            session_id=session_id,
            description=description,
            str_replace=str_replace,
            insert=insert,
            insert_line=insert_line,
            replace_all=replace_all,
            append=append,
            etag=etag,
            metadata=metadata,
            ttl_seconds=ttl_seconds,
        )
        return self._c.call(call, Entry)

    def delete(
        self, scope: str, path: str, *, session_id: str | None = None, etag: str | None = None
    ) -> None:
        self._c.send(calls.delete_entry(self.full_name, scope, path, session_id, etag))

    def delete_scope(self, scope: str) -> None:
        """Every entry of `scope` in this store."""
        self._c.send(calls.delete_scope(self.full_name, scope))

    def list(
        self,
        scope: str | Sequence[str],
        *,
        path_prefix: str | None = None,
        session_id: str | None = None,
        page_size: int | None = None,
        filter: dict[str, Any] | None = None,
    ) -> Iterator[EntrySummary]:
        """Every entry of the scope (or scopes), in path order, page after page."""
        call = calls.list_entries(self.full_name, scope, path_prefix, session_id, page_size, filter)
        return self._c.each(call, "entries", EntrySummary)

    def search(
        self,
        scope: str | Sequence[str],
        query: str,
        *,
        top_k: int | None = None,
        mode: str | None = None,
        min_score: float | None = None,
        path_prefix: str | None = None,
        session_id: str | None = None,
        filter: dict[str, Any] | None = None,
    ) -> SearchHits:
        """The best entries for `query` in the scope (or scopes): hits with `.entry` and `.score`
        (0-1; `mode` hybrid (default), keyword or semantic; `min_score` 0.5 keeps the relevant)."""
        call = calls.search_entries(
            self.full_name,
            scope,
            query,
            top_k=top_k,
            mode=mode,
            min_score=min_score,
            path_prefix=path_prefix,
            session_id=session_id,
            where=filter,
        )
        page = self._c.call(call, dict[str, Any])
        return SearchHits.of(items(page, "results", SearchHit), page.get("degraded"))

    def delete_matching(
        self,
        scope: str | Sequence[str],
        query: str,
        *,
        mode: str | None = None,
        min_score: float | None = None,
        path_prefix: str | None = None,
        session_id: str | None = None,
        dry_run: bool = False,
    ) -> DeletedMatching:
        """Forget by query: delete the entries of the scope (or scopes) that `search` finds for
        `query` at or above `min_score` (default 0.5), at most 100 (`.truncated` when more
        matched: call it again); `dry_run=True` names them and deletes nothing."""
        call = calls.delete_matching_entries(
            self.full_name,
            scope,
            query,
            mode=mode,
            min_score=min_score,
            path_prefix=path_prefix,
            session_id=session_id,
            dry_run=dry_run,
        )
        return self._c.call(call, DeletedMatching)

    def history(self, scope: str, path: str, *, session_id: str | None = None) -> Versions:
        """Every kept version of the entry, newest first (also after it was deleted)."""
        call = calls.entry_history(self.full_name, scope, path, session_id)
        return items(self._c.call(call, dict[str, Any]), "versions", EntryVersion)

    def restore(self, scope: str, path: str, etag: str, *, session_id: str | None = None) -> Entry:
        """Write the version `etag` (from `history`) again as the newest."""
        return self._c.call(calls.restore_entry(self.full_name, scope, path, etag, session_id), Entry)

    def held(self, *, scope: str | None = None) -> Iterator[Entry]:
        """The entries the store's trust policy holds for review (MANAGE), every scope or one."""
        return self._c.each(calls.quarantined_entries(self.full_name, scope), "entries", Entry)

    def review(
        self,
        scope: str,
        path: str,
        decision: str,
        *,
        session_id: str | None = None,
        etag: str | None = None,
        reason: str | None = None,
    ) -> Entry | None:
        """Approve or reject a held entry (MANAGE): the entry now, or None when a rejection
        deleted it (it had no earlier text)."""
        call = calls.review_entry(
            self.full_name, scope, path, decision, session_id=session_id, etag=etag, reason=reason
        )
        answer = self._c.call(call, dict[str, Any])
        entry = answer.get("memory_entry")
        return None if entry is None else items({"entry": [entry]}, "entry", Entry)[0]

    def trust_policy(self) -> dict[str, Any]:
        """The store's trust policy (`policy`: None when it has none) and the screen's rules."""
        return self._c.call(calls.get_trust_policy(self.full_name), dict[str, Any])

    def set_trust_policy(self, policy: dict[str, Any] | None) -> dict[str, Any]:
        """Set the store's trust policy (MANAGE); None removes it."""
        return self._c.call(calls.set_trust_policy(self.full_name, policy), dict[str, Any])
