"""The LangGraph store over a memory store (`catalog.client.langgraph.CatalogStore`), held to
LangGraph's own `InMemoryStore`: the same operations give the same results (values, deletes,
namespaces, filters, batches), sync and async. The server is the module's app, in process."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator

import httpx
import pytest
from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from catalog.auth import mint_dev_token
from catalog.client import AsyncClient, CatalogError, Client
from catalog.client.langgraph import CatalogStore

BASE = "http://testserver.local"


class ThroughTestClient(httpx.AsyncBaseTransport):
    """Async requests sent through the module's TestClient (its app runs on a loop of its own, in
    another thread, where the database pool lives)."""

    def __init__(self, app: httpx.Client) -> None:
        self.app = app

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        forward = httpx.Request(request.method, request.url, headers=request.headers, content=body)
        answer = await asyncio.to_thread(self.app.send, forward)
        headers = [
            (k, v) for k, v in answer.headers.items() if k not in ("content-length", "content-encoding")
        ]
        return httpx.Response(answer.status_code, headers=headers, content=answer.content)


@pytest.fixture
def admin(client, settings) -> Iterator[Client]:
    yield Client(BASE, mint_dev_token(settings, "admin"), http=client)


@pytest.fixture
def pair(client, settings, admin) -> Iterator[tuple[CatalogStore, InMemoryStore]]:
    """A CatalogStore over a memory store of the test's own, and an empty InMemoryStore."""
    name = f"main.default.lg_{uuid.uuid4().hex[:8]}"
    admin.memory_stores.create(name)
    # (nothing to close: the transport holds no connection of its own)
    http = httpx.AsyncClient(transport=ThroughTestClient(client))
    ours = CatalogStore(
        name, client=admin, async_client=AsyncClient(BASE, mint_dev_token(settings, "admin"), http=http)
    )
    yield ours, InMemoryStore()


ITEMS = [
    (("alice", "prefs"), "food", {"likes": "pasta", "rating": 4, "meta": {"lang": "en"}}),
    (("alice", "prefs"), "drink", {"likes": "tea", "rating": 2, "meta": {"lang": "fr"}}),
    (("alice", "prefs"), "music", {"likes": "jazz", "rating": 5, "tags": ["live", "vinyl"]}),
    (("alice", "notes", "2024"), "trip", {"text": "Hiking in the Dolomites", "rating": 3}),
    (("alice", "notes", "2025"), "trip", {"text": "Lyon in May", "tags": ["city"], "rating": 1}),
    (("alice",), "a/b c%", {"odd": True, "rating": 0}),  # a key with a slash, a space and a percent sign
    (("alice", "prefs"), "..", {"dots": 2, "rating": 4}),
    (("bob", "prefs"), "food", {"likes": "rice", "rating": 5}),
    (("bob",), "ünïcode", {"text": "naïve café", "rating": 1}),
]


def load(store) -> None:  # type: ignore[no-untyped-def]
    for namespace, key, value in ITEMS:
        store.put(namespace, key, value)
    store.put(
        ("alice", "prefs"), "food", {"likes": "pizza", "rating": 5, "meta": {"lang": "en"}}
    )  # overwrite
    store.put(("alice", "prefs"), "drink", {"gone": True})
    store.delete(("alice", "prefs"), "drink")


def found(results) -> list[tuple[tuple[str, ...], str, dict]]:  # type: ignore[no-untyped-def]
    """Search results as comparable values, in a stable order."""
    return sorted(((r.namespace, r.key, r.value) for r in results), key=repr)


def test_put_get_delete_and_namespaces_as_in_memory(pair):
    ours, theirs = pair
    load(ours)
    load(theirs)
    for namespace, key, _ in [*ITEMS, (("alice", "prefs"), "nothing", None)]:
        mine, reference = ours.get(namespace, key), theirs.get(namespace, key)
        assert (mine and (mine.namespace, mine.key, mine.value)) == (
            reference and (reference.namespace, reference.key, reference.value)
        ), (namespace, key)
    assert ours.get(("alice", "prefs"), "drink") is None  # deleted

    # (no namespace is left empty by the deletes above: InMemoryStore keeps listing emptied ones)
    for kwargs in [
        {},
        {"prefix": ("alice",)},
        {"prefix": ("alice", "notes")},
        {"suffix": ("prefs",)},
        {"prefix": ("*", "prefs")},
        {"suffix": ("notes", "*")},
        {"max_depth": 1},
        {"prefix": ("alice",), "max_depth": 2},
        {"limit": 2, "offset": 1},
        {"prefix": ("carol",)},
    ]:
        assert ours.list_namespaces(**kwargs) == theirs.list_namespaces(**kwargs), kwargs


def test_search_filters_and_pages_as_in_memory(pair):
    ours, theirs = pair
    load(ours)
    load(theirs)
    for prefix, filter in [
        (("alice",), None),
        (("alice", "prefs"), None),
        (("alice",), {"rating": 5}),
        (("alice",), {"rating": {"$gte": 4}}),
        (("alice",), {"rating": {"$lt": 4, "$ne": 2}}),
        (("alice",), {"likes": {"$ne": "pizza"}}),
        (("alice",), {"meta": {"lang": "en"}}),
        (("alice",), {"tags": ["live", "vinyl"]}),
        (("alice", "notes"), {"tags": ["city"]}),
        (("bob",), {"rating": 5}),
        ((), {"rating": 5}),  # every scope this store has used
        (("carol",), None),
    ]:
        mine = ours.search(prefix, filter=filter, limit=50)
        assert found(mine) == found(theirs.search(prefix, filter=filter, limit=50)), (prefix, filter)
        assert all(r.score is None for r in mine)

    # (every item has a rating: InMemoryStore fails on a comparison with a missing field, which
    # here simply does not match)
    ours.put(("alice", "prefs"), "unrated", {"likes": "?"})
    assert "unrated" not in [r.key for r in ours.search(("alice",), filter={"rating": {"$gt": 0}}, limit=50)]
    ours.delete(("alice", "prefs"), "unrated")

    # pages: the same number of items on each, and together every item once
    everything = found(theirs.search(("alice",), limit=50))
    pages = [ours.search(("alice",), limit=2, offset=offset) for offset in range(0, len(everything) + 2, 2)]
    assert [len(p) for p in pages] == [
        len(theirs.search(("alice",), limit=2, offset=o)) for o in range(0, len(everything) + 2, 2)
    ]
    assert found([r for page in pages for r in page]) == everything
    filtered = [ours.search(("alice",), filter={"rating": {"$gt": 2}}, limit=1, offset=o) for o in range(4)]
    assert found([r for page in filtered for r in page]) == found(
        theirs.search(("alice",), filter={"rating": {"$gt": 2}})
    )


def test_a_batch_reads_before_its_puts_as_in_memory(pair):
    ours, theirs = pair
    namespace = ("alice", "batch")
    # (the namespaces are listed before the get: InMemoryStore's get of an unknown namespace
    # makes it listed, empty)
    ops = [
        PutOp(namespace, "k", {"v": 1}),
        ListNamespacesOp(),
        GetOp(namespace, "k"),
        PutOp(namespace, "k", {"v": 2}),  # the last put of a key wins
        SearchOp(("alice",)),
        PutOp(namespace, "other", {"v": 3}),
    ]
    mine, reference = ours.batch(ops), theirs.batch(ops)
    assert mine == reference == [None, [], None, None, [], None]
    assert ours.get(namespace, "k").value == theirs.get(namespace, "k").value == {"v": 2}
    again = ours.batch([GetOp(namespace, "k"), PutOp(namespace, "k", None), GetOp(namespace, "k")])
    assert [r and r.value for r in again] == [{"v": 2}, None, {"v": 2}]
    assert ours.get(namespace, "k") is None


async def test_the_async_methods_as_in_memory(pair):
    ours, theirs = pair
    for store in (ours, theirs):
        for namespace, key, value in ITEMS:
            await store.aput(namespace, key, value)
        await store.adelete(("alice", "prefs"), "drink")
    for namespace, key, _ in ITEMS:
        mine, reference = await ours.aget(namespace, key), await theirs.aget(namespace, key)
        assert (mine and mine.value) == (reference and reference.value)
    assert await ours.alist_namespaces(prefix=("alice",)) == await theirs.alist_namespaces(prefix=("alice",))
    for filter in ({"rating": 5}, {"rating": {"$lte": 3}}, None):
        mine = await ours.asearch(("alice",), filter=filter)
        assert found(mine) == found(await theirs.asearch(("alice",), filter=filter))
    ops = [PutOp(("bob", "x"), "k", {"v": 1}), GetOp(("bob", "x"), "k"), ListNamespacesOp(max_depth=1)]
    assert await ours.abatch(ops) == await theirs.abatch(ops)


def test_query_search_uses_the_servers_ranking(pair):
    ours, _ = pair
    load(ours)
    hits = ours.search(("alice",), query="pizza", limit=3)
    assert (hits[0].namespace, hits[0].key) == (("alice", "prefs"), "food")
    assert hits[0].value["likes"] == "pizza" and 0 < hits[0].score <= 1
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert all(h.namespace[:2] == ("alice", "notes") for h in ours.search(("alice", "notes"), query="trip"))
    filtered = ours.search(("alice",), query="pizza jazz", filter={"tags": ["live", "vinyl"]})
    assert [(h.key, h.value["likes"]) for h in filtered] == [("music", "jazz")]


def test_the_mapping_to_scopes_paths_and_ttl(pair, admin, client, settings):
    ours, theirs = pair
    ours.put(("alice", "prefs", "a/b"), "x y", {"n": 1}, ttl=2)  # ttl in minutes
    entry = admin.store(ours.store).get("alice", "/prefs/a%2Fb/x%20y")
    assert entry.contents == '{"n": 1}' and entry.expires_at - entry.updated_at == pytest.approx(
        120_000, abs=5_000
    )
    with pytest.raises(NotImplementedError):  # LangGraph's in-memory store has no TTL at all
        theirs.put(("alice",), "k", {"n": 1}, ttl=2)

    # an entry written by other means reads with its text as `contents`
    admin.store(ours.store).write("alice", "/journal/monday", "Felt great.")
    item = ours.get(("alice", "journal"), "monday")
    assert item.value == {"contents": "Felt great."} and item.created_at.tzinfo is not None

    defaulted = CatalogStore(ours.store, client=admin, ttl={"default_ttl": 1})
    defaulted.put(("bob",), "k", {"n": 2})
    expiring = admin.store(ours.store).get("bob", "/k")
    assert expiring.expires_at - expiring.updated_at == pytest.approx(60_000, abs=5_000)

    # the store is governed: a principal without READ_MEMORY_STORE reads nothing through it
    outsider = CatalogStore(ours.store, client=Client(BASE, mint_dev_token(settings, "mallory"), http=client))
    with pytest.raises(CatalogError) as denied:
        outsider.get(("alice", "prefs"), "food")
    assert denied.value.error_code == "PERMISSION_DENIED"
    with pytest.raises(ValueError):
        ours.put(("alice",), "", {"n": 1})
    with pytest.raises(ValueError):
        ours.put(("alice.x",), "k", {"n": 1})


# --- index=False, and the fields of index=[...] ---------------------------------------------------


def keys(results) -> list[str]:  # type: ignore[no-untyped-def]
    return sorted(r.key for r in results)


def test_an_item_put_with_index_false_is_left_out_of_query_searches(pair):
    ours, _ = pair
    namespace = ("alice", "animals")
    zebra = {"text": "zebra stripes on the savanna"}
    ours.put(namespace, "hidden", zebra, index=False)
    ours.put(namespace, "no_text_in_fields", zebra, index=["title", "tags[*]"])  # fields it lacks
    ours.put(namespace, "shown", {"text": "a zebra crossing in town"})
    ours.put(namespace, "by_field", {"text": "zebra stripes", "title": "stripes"}, index=["title"])

    hits = ours.search(("alice",), query="zebra stripes savanna", limit=10)
    assert keys(hits) == ["by_field", "shown"] and all(h.score is not None for h in hits)
    assert keys(ours.search(namespace, query="zebra", filter={"text": zebra["text"]})) == []
    # still read, and listed (with and without a filter) by a search without a query
    assert ours.get(namespace, "hidden").value == zebra
    assert keys(ours.search(namespace)) == ["by_field", "hidden", "no_text_in_fields", "shown"]
    assert keys(ours.search(namespace, filter={"text": zebra["text"]})) == ["hidden", "no_text_in_fields"]

    # a later put with the store's indexing (index=None) makes it found again
    ours.put(namespace, "hidden", zebra)
    assert "hidden" in keys(ours.search(("alice",), query="zebra stripes savanna", limit=10))


def test_unindexed_items_that_rank_first_do_not_shorten_a_page(pair):
    ours, _ = pair
    for i in range(3):
        ours.put(("bob", "n"), f"loud{i}", {"text": f"quokka quokka quokka {i}"}, index=False)
    ours.put(("bob", "n"), "quiet", {"text": "one quokka, and then the weather"})
    hits = ours.search(("bob",), query="quokka quokka quokka", limit=1)
    assert [h.key for h in hits] == ["quiet"]


# --- refresh_ttl -----------------------------------------------------------------------------------


def expiry(admin, ours, scope: str, path: str):  # type: ignore[no-untyped-def]
    """(etag, ms from the last write to the expiry) of the entry."""
    entry = admin.store(ours.store).get(scope, path)
    return entry.etag, entry.expires_at - entry.updated_at


def shorten(admin, ours, scope: str, path: str) -> None:  # type: ignore[no-untyped-def]
    """Write the entry again (its metadata kept) to expire 30 s after now: about to expire."""
    store = admin.store(ours.store)
    store.write(scope, path, store.get(scope, path).contents, write_mode="OVERWRITE", ttl_seconds=30)


def test_reads_with_refresh_ttl_set_the_puts_ttl_again(pair, admin):
    ours, _ = pair
    namespace = ("alice", "ttl")
    ours.put(namespace, "k", {"topic": "otters"}, ttl=2)  # minutes
    ours.put(namespace, "forever", {"topic": "otters too"})
    two_minutes = pytest.approx(120_000, abs=5_000)

    for read in [
        lambda refresh: ours.get(namespace, "k", refresh_ttl=refresh),
        lambda refresh: ours.search(namespace, refresh_ttl=refresh),
        lambda refresh: ours.search(namespace, query="otters", refresh_ttl=refresh),
        lambda refresh: asyncio.run(ours.aget(namespace, "k", refresh_ttl=refresh)),
    ]:
        shorten(admin, ours, "alice", "/ttl/k")
        before = expiry(admin, ours, "alice", "/ttl/k")
        assert before[1] == pytest.approx(30_000, abs=5_000)
        read(False)
        assert expiry(admin, ours, "alice", "/ttl/k") == before  # not written
        read(None)  # the default: refresh
        etag, left = expiry(admin, ours, "alice", "/ttl/k")
        assert etag == before[0] and left == two_minutes  # renewed: no new version
    assert ours.get(namespace, "k").value == {"topic": "otters"}

    # an item put without a ttl is not written by a read
    untouched = admin.store(ours.store).get("alice", "/ttl/forever")
    ours.get(namespace, "forever")
    ours.search(namespace, query="otters")
    after = admin.store(ours.store).get("alice", "/ttl/forever")
    assert (after.etag, after.expires_at) == (untouched.etag, None)

    # TTLConfig(refresh_on_read=False) turns the default off
    lazy = CatalogStore(ours.store, client=admin, ttl={"refresh_on_read": False})
    shorten(admin, ours, "alice", "/ttl/k")
    before = expiry(admin, ours, "alice", "/ttl/k")
    lazy.get(namespace, "k")
    assert expiry(admin, ours, "alice", "/ttl/k") == before
    lazy.get(namespace, "k", refresh_ttl=True)
    assert expiry(admin, ours, "alice", "/ttl/k")[1] == two_minutes


def test_a_reader_without_write_reads_and_leaves_the_expiry(pair, admin, client, settings):
    ours, _ = pair
    ours.put(("alice", "ttl"), "k", {"n": 1}, ttl=2)
    admin.grants.update("catalog", "main", "rita", add=["USE_CATALOG"])
    admin.grants.update("schema", "main.default", "rita", add=["USE_SCHEMA"])
    admin.grants.update("memory_store", ours.store, "rita", add=["READ_MEMORY_STORE"])
    reader = CatalogStore(ours.store, client=Client(BASE, mint_dev_token(settings, "rita"), http=client))
    before = expiry(admin, ours, "alice", "/ttl/k")
    assert reader.get(("alice", "ttl"), "k").value == {"n": 1}
    assert [r.key for r in reader.search(("alice",))] == ["k"]
    assert expiry(admin, ours, "alice", "/ttl/k") == before


class BeforeTheNextWrite(httpx.BaseTransport):
    """Requests sent through the module's TestClient; `then(action)` runs the action once, just
    before the next entry write or edit is sent (another writer that comes in between)."""

    def __init__(self, app: httpx.Client) -> None:
        self.app = app
        self.action: Callable[[], None] | None = None

    def then(self, action: Callable[[], None]) -> None:
        self.action = action

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.method in ("POST", "PATCH") and request.url.path.endswith("/entries") and self.action:
            action, self.action = self.action, None
            action()
        body = request.read()
        forward = httpx.Request(request.method, request.url, headers=request.headers, content=body)
        answer = self.app.send(forward)
        headers = [
            (k, v) for k, v in answer.headers.items() if k not in ("content-length", "content-encoding")
        ]
        return httpx.Response(answer.status_code, headers=headers, content=answer.content)


def test_a_refresh_keeps_a_write_that_came_between_the_read_and_it(pair, admin, client, settings):
    ours, _ = pair
    namespace = ("alice", "race")
    hook = BeforeTheNextWrite(client)
    token = mint_dev_token(settings, "admin")
    reading = CatalogStore(ours.store, client=Client(BASE, token, http=httpx.Client(transport=hook)))

    ours.put(namespace, "k", {"v": "old"}, ttl=2)
    hook.then(lambda: ours.put(namespace, "k", {"v": "new"}, ttl=3))
    assert reading.get(namespace, "k").value == {"v": "old"}  # what it read
    assert ours.get(namespace, "k", refresh_ttl=False).value == {"v": "new"}  # not lost
    assert expiry(admin, ours, "alice", "/race/k")[1] == pytest.approx(180_000, abs=5_000)  # its ttl

    hook.then(lambda: ours.delete(namespace, "k"))
    assert reading.get(namespace, "k").value == {"v": "new"}
    assert ours.get(namespace, "k") is None  # not brought back

    ours.put(namespace, "k", {"v": "searched"}, ttl=2)
    hook.then(lambda: ours.put(namespace, "k", {"v": "newer"}))
    assert [r.value for r in reading.search(namespace)] == [{"v": "searched"}]
    assert ours.get(namespace, "k").value == {"v": "newer"}
