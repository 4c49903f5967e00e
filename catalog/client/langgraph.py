"""A LangGraph `BaseStore` over one memory store, so that LangGraph and LangMem agents keep their
long-term memory in the governed catalog unchanged (`store=CatalogStore(...)` where they take a
store). It needs `langgraph` (only this module imports it).

The mapping, for a namespace `(n0, n1, ..., nk)` and a key:

- the scope is `n0` (a user, a team: what the store's grants and scope binding apply to);
- the path is `/n1/.../nk/key`, each label and the key percent-encoded as one path segment
  (`/` is `%2F`, `%` is `%25`, a label `.` or `..` is `%2E` / `%2E%2E`), so `("alice",
  "prefs")` + `"food"` is scope `alice`, path `/prefs/food`; `("alice",)` + `"food"` is `/food`;
- the value (a JSON object) is the entry's contents, as JSON. An entry that does not hold a JSON
  object (one written through another API) reads as `{"contents": <its text>}`;
- `put` is an `OVERWRITE` write, `put(..., None)` and `delete` a delete. A put replaces the whole
  entry: its contents, its description (none) and its metadata, which then holds only the
  adapter's own keys below (metadata given to the entry through another API is replaced);
- `ttl` (minutes) is the write's `ttl_seconds`, so the entry expires that long after the write,
  and the entry's metadata keeps it as `langgraph.ttl_seconds`. A read with `refresh_ttl` (the
  default; `TTLConfig(refresh_on_read=False)` changes it) of an entry that has it renews its
  expiry by that `ttl_seconds` (a PATCH with `ttl_seconds` alone and If-Match the version read:
  no new version, nothing else changes; a write that came in between stands with its own ttl,
  and the refresh is dropped). It needs WRITE as well as READ (without it the read is answered
  and the expiry left as it is). A put without `ttl` keeps the expiry an earlier put set (the
  server keeps `expires_at` on a write without one), and the entry then no longer refreshes;
- `index=False` marks the entry `langgraph.index: false` in its metadata, and a search with a
  `query` leaves it out (it is still read by `get` and listed by a search without a query, with
  or without a filter), as LangGraph's stores give no vector to such an item. The server indexes
  every entry (it has no per-entry switch), so the marked ones are dropped from its answer on the
  client: the search asks again for the server's best 100 when dropping left a page short.
  `index=[fields]`: when none of the fields holds text, as `index=False` (LangGraph embeds
  nothing for the item then); otherwise the whole value is indexed, as with `index=None`;
- `search` with a `query` is the server's search (`search_mode`, hybrid by default) in the scope
  and under the path of the namespace prefix, with the server's relevance as `score`; without a
  query it lists the entries under the prefix in path order (and reads each one). `filter`
  applies to the values as LangGraph's stores do it (equality, nested objects, `$eq`, `$ne`,
  `$gt`, `$gte`, `$lt`, `$lte`), on the client: with a filter a query search considers the
  server's best 100 hits;
- `list_namespaces` lists the entries of the scopes it may look in. The server lists no scopes
  (a scope is the application's to know): a prefix that names the first label looks in that
  scope; otherwise the scopes given as `scopes=` and those this store object has used.

Within one `batch`, every read sees the store as it was before the batch, and the puts are
applied after the reads in order (the last put of a key wins), as LangGraph's `InMemoryStore`
does (a read's refresh writes the value it read, so later reads of the batch see the same).
"""

from __future__ import annotations

import json
import math
from collections.abc import Generator, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import quote, unquote

import httpx
import msgspec
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)
from langgraph.store.base.embed import get_text_at_path

from catalog.client import _calls as calls
from catalog.client._async import AsyncClient
from catalog.client._core import Call, decode
from catalog.client._sync import Client
from catalog.client.errors import CatalogError
from catalog.client.types import Entry

T = TypeVar("T")
# A plan yields the requests it needs, one at a time, and receives each answer (or has the
# CatalogError thrown into it); its return value is the op's result. The same plan runs under
# the sync and the async client.
Plan = Generator[Call, httpx.Response, T]

MAX_SCOPES = 20  # a search names at most 20 scopes
MAX_TOP_K = 100
PAGE = 1000  # the server's page cap

# The adapter's keys in the metadata of the entries it writes (a put writes these and no other).
INDEX_KEY = "langgraph.index"  # False: the item is left out of query searches
TTL_KEY = "langgraph.ttl_seconds"  # the put's ttl: what a read with refresh_ttl sets again


# --- the mapping ---------------------------------------------------------------------------------


def encode_segment(text: str) -> str:
    if text in (".", ".."):
        return text.replace(".", "%2E")
    return quote(text, safe="")


def to_key(namespace: tuple[str, ...], key: str) -> tuple[str, str]:
    """(scope, path) of an item."""
    _check_labels(namespace)
    if not namespace:
        raise InvalidNamespaceError("a namespace needs at least one label: the scope")
    if not isinstance(key, str) or not key:
        raise ValueError("a key is a non-empty string")
    return namespace[0], "/" + "/".join(encode_segment(part) for part in (*namespace[1:], key))


def prefix_path(labels: tuple[str, ...]) -> str | None:
    """The path prefix of the namespaces below `(scope, *labels)` (None: the whole scope)."""
    if not labels:
        return None
    return "/" + "/".join(encode_segment(label) for label in labels) + "/"


def from_key(scope: str, path: str) -> tuple[tuple[str, ...], str]:
    """(namespace, key) of an entry."""
    parts = [unquote(part) for part in path.split("/")[1:]]
    return (scope, *parts[:-1]), parts[-1]


def _check_labels(labels: tuple[str, ...]) -> None:
    for label in labels:
        if not isinstance(label, str) or not label:
            raise InvalidNamespaceError(f"namespace labels are non-empty strings: {labels!r}")
        if "." in label:
            raise InvalidNamespaceError(f"namespace labels cannot contain periods: {labels!r}")


def indexed(value: Mapping[str, Any], index: Any) -> bool:
    """Whether a put's item is found by query searches. `index=False` keeps it out, and so does a
    list of fields none of which holds text in the value (LangGraph embeds nothing for it then);
    otherwise it is found by its whole value (the server indexes an entry's whole contents, it
    cannot index some fields only)."""
    if index is None:
        return True
    if index is False:
        return False
    return any(get_text_at_path(value, field) for field in index)


def is_indexed(entry: Entry) -> bool:
    return (entry.metadata or {}).get(INDEX_KEY) is not False


def ttl_of(metadata: dict[str, Any] | None) -> int | None:
    """The ttl (seconds) a put gave the entry, from its metadata (None: none)."""
    ttl = (metadata or {}).get(TTL_KEY)
    return ttl if isinstance(ttl, int) and not isinstance(ttl, bool) and ttl >= 1 else None


def to_value(contents: str | None) -> dict[str, Any]:
    if contents is None:
        return {}
    try:
        value = json.loads(contents)
    except ValueError:
        return {"contents": contents}
    return value if isinstance(value, dict) else {"contents": contents}


def _time(epoch_ms: int) -> datetime:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)


def to_item(entry: Entry, score: float | None = None, *, search: bool = False) -> Item:
    namespace, key = from_key(entry.scope, entry.path)
    if search:
        return SearchItem(
            namespace=namespace,
            key=key,
            value=to_value(entry.contents),
            created_at=_time(entry.created_at),
            updated_at=_time(entry.updated_at),
            score=score,
        )
    return Item(
        value=to_value(entry.contents),
        key=key,
        namespace=namespace,
        created_at=_time(entry.created_at),
        updated_at=_time(entry.updated_at),
    )


# --- filters (as LangGraph's stores compare values) ------------------------------------------------


def matches(value: dict[str, Any], filter: dict[str, Any] | None) -> bool:
    return not filter or all(_compare(value.get(key), wanted) for key, wanted in filter.items())


def _compare(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        if any(str(k).startswith("$") for k in wanted):
            return all(_operator(actual, op, operand) for op, operand in wanted.items())
        return isinstance(actual, dict) and all(_compare(actual.get(k), v) for k, v in wanted.items())
    if isinstance(wanted, list | tuple):
        return (
            isinstance(actual, list | tuple)
            and len(actual) == len(wanted)
            and all(_compare(a, w) for a, w in zip(actual, wanted, strict=True))
        )
    return bool(actual == wanted)


def _operator(actual: Any, op: str, operand: Any) -> bool:
    if op == "$eq":
        return bool(actual == operand)
    if op == "$ne":
        return bool(actual != operand)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        try:
            a, b = float(actual), float(operand)
        except (TypeError, ValueError):
            return False
        return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]
    raise ValueError(f"unsupported filter operator {op!r}")


def namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = condition.path
    if len(namespace) < len(path):
        return False
    pairs = zip(namespace, path, strict=False)
    if condition.match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    elif condition.match_type != "prefix":
        raise ValueError(f"unsupported match type {condition.match_type!r}")
    return all(wanted == "*" or label == wanted for label, wanted in pairs)


# --- the store -----------------------------------------------------------------------------------


class CatalogStore(BaseStore):
    """`CatalogStore("main.default.agent_memory", url=..., token=...)`: a LangGraph store over one
    memory store (see the module's docstring for the mapping). Give `client` / `async_client` to
    use clients of your own; `scopes` are the scopes that `list_namespaces` and searches without a
    scope in their prefix look in, besides those this object has used."""

    supports_ttl = True

    def __init__(
        self,
        store: str,
        *,
        url: str | None = None,
        token: str | None = None,
        client: Client | None = None,
        async_client: AsyncClient | None = None,
        scopes: Iterable[str] = (),
        search_mode: str = "hybrid",
        ttl: TTLConfig | None = None,
    ) -> None:
        self.store = store
        self._url, self._token = url, token
        self._client = client
        self._async_client = async_client
        self.scopes: set[str] = set(scopes)
        self.search_mode = search_mode
        self.ttl_config = ttl

    # --- clients ---------------------------------------------------------------------------------

    @property
    def client(self) -> Client:
        if self._client is None:
            other = self._async_client
            self._client = Client(
                self._url or (other.url if other else None), self._token or (other.token if other else None)
            )
        return self._client

    @property
    def async_client(self) -> AsyncClient:
        if self._async_client is None:
            other = self._client
            self._async_client = AsyncClient(
                self._url or (other.url if other else None), self._token or (other.token if other else None)
            )
        return self._async_client

    def _run(self, plan: Plan[T]) -> T:
        try:
            call = next(plan)
            while True:
                try:
                    response = self.client.send(call)
                except CatalogError as exc:
                    call = plan.throw(exc)
                else:
                    call = plan.send(response)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def _arun(self, plan: Plan[T]) -> T:
        try:
            call = next(plan)
            while True:
                try:
                    response = await self.async_client.send(call)
                except CatalogError as exc:
                    call = plan.throw(exc)
                else:
                    call = plan.send(response)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    # --- batches ---------------------------------------------------------------------------------

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        reads, puts = self._split(ops)
        results = [self._run(plan) if plan is not None else None for plan in reads]
        for put in puts:
            self._run(self._put(put))
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        reads, puts = self._split(ops)
        results = [await self._arun(plan) if plan is not None else None for plan in reads]
        for put in puts:
            await self._arun(self._put(put))
        return results

    def _split(self, ops: Iterable[Op]) -> tuple[list[Plan[Result] | None], list[PutOp]]:
        """A plan for each read (None in the place of a put), and the puts to apply after them
        (the last of each key)."""
        reads: list[Plan[Result] | None] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            if isinstance(op, GetOp):
                reads.append(self._get(op))
            elif isinstance(op, SearchOp):
                reads.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                reads.append(self._list_namespaces(op))
            elif isinstance(op, PutOp):
                to_key(op.namespace, op.key)  # refused before anything is sent
                puts.pop((op.namespace, op.key), None)
                puts[(op.namespace, op.key)] = op
                reads.append(None)
            else:
                raise ValueError(f"unknown operation {type(op).__name__}")
        return reads, list(puts.values())

    # --- plans -----------------------------------------------------------------------------------

    def _get(self, op: GetOp) -> Plan[Result]:
        scope, path = to_key(op.namespace, op.key)
        self.scopes.add(scope)
        try:
            response = yield calls.get_entry(self.store, scope, path, None)
        except CatalogError as exc:
            if exc.status == 404 and exc.error_code == "NOT_FOUND":
                return None
            raise
        entry = decode(response, Entry)
        if op.refresh_ttl:
            yield from self._refresh(entry)
        return to_item(entry)

    def _put(self, op: PutOp) -> Plan[None]:
        scope, path = to_key(op.namespace, op.key)
        self.scopes.add(scope)
        if op.value is None:
            try:
                yield calls.delete_entry(self.store, scope, path, None, None)
            except CatalogError as exc:
                if not (exc.status == 404 and exc.error_code == "NOT_FOUND"):
                    raise
            return None
        ttl_seconds = max(1, math.ceil(op.ttl * 60)) if op.ttl is not None else None
        # always sent, so that a put without index=False or ttl clears what an earlier one marked
        metadata: dict[str, Any] = {}
        if not indexed(op.value, op.index):
            metadata[INDEX_KEY] = False
        if ttl_seconds is not None:
            metadata[TTL_KEY] = ttl_seconds
        yield calls.write_entry(
            self.store,
            scope,
            path,
            contents=json.dumps(dict(op.value), ensure_ascii=False),
            description=None,
            write_mode="OVERWRITE",
            session_id=None,
            metadata=metadata,
            ttl_seconds=ttl_seconds,
            source_type="langgraph",
            creation_reason=None,
            creation_source=None,
            derived_from=None,
        )
        return None

    def _refresh(self, entry: Entry) -> Plan[None]:
        """Renew the expiry of an entry a read answered by the ttl its put gave it (no ttl:
        nothing is sent), if the entry is still the version read."""
        ttl = ttl_of(entry.metadata)
        if ttl is None:
            return None
        try:
            yield calls.edit_entry(
                self.store,
                entry.scope,
                entry.path,
                session_id=None,
                description=None,
                str_replace=None,
                insert=None,
                insert_line=None,
                replace_all=None,
                append=None,
                etag=entry.etag,
                ttl_seconds=ttl,
            )
        except CatalogError as exc:
            # a reader without WRITE: the read stands, the expiry too; a write or a delete that
            # came in between (ABORTED, NOT_FOUND) stands with its own ttl
            if exc.error_code in ("PERMISSION_DENIED", "ABORTED", "NOT_FOUND"):
                return None
            raise
        return None

    def _scopes_for(self, prefix: tuple[str, ...]) -> list[str]:
        _check_labels(prefix)
        if prefix:
            self.scopes.add(prefix[0])
            return [prefix[0]]
        return sorted(self.scopes)

    def _search(self, op: SearchOp) -> Plan[Result]:
        scopes = self._scopes_for(op.namespace_prefix)
        path_prefix = prefix_path(op.namespace_prefix[1:])
        wanted = max(op.offset, 0) + max(op.limit, 0)
        if not scopes or wanted == 0:
            return []
        if op.query:
            hits: list[tuple[float, Entry]] = []
            for start in range(0, len(scopes), MAX_SCOPES):
                top_k = MAX_TOP_K if op.filter else min(MAX_TOP_K, wanted)
                while True:
                    call = calls.search_entries(
                        self.store,
                        scopes[start : start + MAX_SCOPES],
                        op.query,
                        top_k=top_k,
                        mode=self.search_mode,
                        min_score=None,
                        path_prefix=path_prefix,
                        session_id=None,
                    )
                    results = decode((yield call), dict[str, Any]).get("results") or []
                    entries = [(float(hit["score"]), decode_entry(hit["memory_entry"])) for hit in results]
                    kept = [(score, entry) for score, entry in entries if is_indexed(entry)]
                    # the unindexed ones took places the next hits may fill: ask for the most
                    if len(kept) < len(entries) and len(results) == top_k < MAX_TOP_K:
                        top_k = MAX_TOP_K
                        continue
                    break
                hits.extend(
                    (score, entry)
                    for score, entry in kept
                    if entry.session_id is None and matches(to_value(entry.contents), op.filter)
                )
            hits.sort(key=lambda hit: -hit[0])
            chosen = hits[op.offset : wanted]
            if op.refresh_ttl:
                for _, entry in chosen:
                    yield from self._refresh(entry)
            return [to_item(entry, score, search=True) for score, entry in chosen]
        found: list[Entry] = []
        skipped = 0
        for scope in scopes:
            listing = calls.list_entries(self.store, scope, path_prefix, None, PAGE)
            token: str | None = None
            while True:
                page = decode((yield listing.page(token)), dict[str, Any])
                for summary in page.get("entries") or []:
                    if summary.get("session_id"):
                        continue
                    if not op.filter and skipped < op.offset:
                        skipped += 1  # no need to read what the offset skips
                        continue
                    try:
                        response = yield calls.get_entry(self.store, scope, summary["path"], None)
                    except CatalogError as exc:
                        if exc.status == 404:  # deleted (or expired) since the page was read
                            continue
                        raise
                    entry = decode(response, Entry)
                    if not matches(to_value(entry.contents), op.filter):
                        continue
                    if skipped < op.offset:
                        skipped += 1
                        continue
                    found.append(entry)
                    if len(found) >= op.limit:
                        break
                token = page.get("next_page_token")
                if not token or len(found) >= op.limit:
                    break
            if len(found) >= op.limit:
                break
        if op.refresh_ttl:
            for entry in found:
                yield from self._refresh(entry)
        return [to_item(entry, search=True) for entry in found]

    def _list_namespaces(self, op: ListNamespacesOp) -> Plan[Result]:
        conditions = op.match_conditions or ()
        for condition in conditions:
            _check_labels(tuple(label for label in condition.path if label != "*"))
        named = {c.path[0] for c in conditions if c.match_type == "prefix" and c.path and c.path[0] != "*"}
        if len(named) > 1:
            return []  # two prefixes that name different scopes match nothing
        scopes = sorted(named) if named else sorted(self.scopes)
        self.scopes.update(named)
        # the labels every prefix condition fixes after the scope narrow the listing
        labels: tuple[str, ...] = ()
        for condition in conditions:
            if condition.match_type == "prefix" and condition.path and condition.path[0] != "*":
                fixed = []
                for label in condition.path[1:]:
                    if label == "*":
                        break
                    fixed.append(label)
                labels = max(labels, tuple(fixed), key=len)
        namespaces: set[tuple[str, ...]] = set()
        for scope in scopes:
            listing = calls.list_entries(self.store, scope, prefix_path(labels), None, PAGE)
            token: str | None = None
            while True:
                page = decode((yield listing.page(token)), dict[str, Any])
                for summary in page.get("entries") or []:
                    if not summary.get("session_id"):
                        namespaces.add(from_key(scope, summary["path"])[0])
                token = page.get("next_page_token")
                if not token:
                    break
        kept = [ns for ns in namespaces if all(namespace_matches(c, ns) for c in conditions)]
        if op.max_depth is not None:
            kept = list({ns[: op.max_depth] for ns in kept})
        return sorted(kept)[op.offset : op.offset + op.limit]


def decode_entry(raw: dict[str, Any]) -> Entry:
    return msgspec.convert(raw, Entry)
