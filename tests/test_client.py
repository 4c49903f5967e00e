"""`catalog.client` against a running server (`catalog serve` in a subprocess), and its retries
against a small scripted HTTP server that answers 503 or 429 before it answers 200."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from conftest import free_port

from catalog.auth import mint_dev_token
from catalog.client import AsyncClient, CatalogError, Client, Retry
from catalog.client import _calls as calls
from catalog.client._core import Call, retry_after
from catalog.settings import Settings

SCIM = "/api/2.0/preview/scim/v2/Groups"


def token_for(live, sub: str) -> str:
    return mint_dev_token(Settings(data_dir=live.data_dir), sub)


@pytest.fixture
def admin(live) -> Iterator[Client]:
    with Client(live.url, token_for(live, "admin")) as client:
        yield client


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def new_store(admin: Client, description: str | None = None) -> str:
    """A memory store in a catalog and schema of the test's own: `cat_x.s.notes`."""
    catalog = unique("cat")
    admin.catalogs.create(catalog)
    admin.schemas.create(f"{catalog}.s")
    return admin.memory_stores.create(f"{catalog}.s.notes", description=description).full_name


def code_of(call) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    with pytest.raises(CatalogError) as failure:
        call()
    return failure.value.status, failure.value.error_code


def test_namespace_create_list_get_update_delete(admin):
    catalog = unique("cat")
    made = admin.catalogs.create(catalog, comment="team memory")
    assert (made.name, made.owner, made.comment) == (catalog, "admin", "team memory")
    assert catalog in [c.name for c in admin.catalogs.list()]
    schema = admin.schemas.create(f"{catalog}.support", comment="support")
    assert (schema.full_name, schema.catalog_name) == (f"{catalog}.support", catalog)
    assert [s.full_name for s in admin.schemas.list(catalog)] == [f"{catalog}.support"]

    store = admin.memory_stores.create(f"{catalog}.support.agent", description="what the agent learned")
    assert (store.full_name, store.name, store.schema_name) == (
        f"{catalog}.support.agent",
        "agent",
        "support",
    )
    assert store.description == "what the agent learned" and store.scope_binding == "caller"
    assert [s.full_name for s in admin.memory_stores.list(catalog, "support")] == [store.full_name]
    assert admin.memory_stores.get(store.full_name) == store

    changed = admin.memory_stores.update(store.full_name, description="renamed", default_ttl_seconds=3600)
    assert (changed.description, changed.default_ttl_seconds) == ("renamed", 3600)
    assert admin.catalogs.update(catalog, comment="new").comment == "new"

    admin.memory_stores.delete(store.full_name)
    # a missing store on its own route is NOT_FOUND; a missing catalog RESOURCE_DOES_NOT_EXIST
    assert code_of(lambda: admin.memory_stores.get(store.full_name)) == (404, "NOT_FOUND")
    admin.catalogs.delete(catalog, force=True)
    assert code_of(lambda: admin.catalogs.get(catalog)) == (404, "RESOURCE_DOES_NOT_EXIST")


def test_lists_iterate_over_every_page(admin):
    catalog = unique("cat")
    admin.catalogs.create(catalog)
    admin.schemas.create(f"{catalog}.s")
    names = [f"{catalog}.s.store_{i}" for i in range(5)]
    for name in names:
        admin.memory_stores.create(name)
    assert [s.full_name for s in admin.memory_stores.list(catalog, "s", page_size=2)] == names

    store = admin.store(names[0])
    paths = [f"/notes/{i:02d}.md" for i in range(7)]
    for path in paths:
        store.write("alice", path, f"note {path}")
    listed = list(store.list("alice", page_size=3))
    assert [e.path for e in listed] == paths and all(e.has_contents for e in listed)
    # it took three pages
    pages = list(admin.pages(calls.list_entries(store.full_name, "alice", None, None, 3)))
    assert [len(p["entries"]) for p in pages] == [3, 3, 1] and "next_page_token" not in pages[-1]
    assert [e.path for e in store.list("alice", path_prefix="/notes/0", page_size=2)] == paths


def test_entries_write_modes_etags_edits_history_and_restore(admin):
    store = admin.store(new_store(admin))
    first = store.write("alice", "/prefs.md", "Prefers email.", description="contact")
    assert (first.scope, first.path, first.contents, first.created_by) == (
        "alice",
        "/prefs.md",
        "Prefers email.",
        "admin",
    )
    assert code_of(lambda: store.write("alice", "/prefs.md", "again")) == (409, "ALREADY_EXISTS")
    second = store.write("alice", "/prefs.md", "Prefers email over calls.", write_mode="overwrite")
    assert second.etag != first.etag
    appended = store.write("alice", "/prefs.md", "Short answers.", write_mode="APPEND")
    assert store.write("alice", "/prefs.md", "Short answers.", write_mode="APPEND").etag == appended.etag
    got = store.get("alice", "/prefs.md")
    assert got.contents == "Prefers email over calls.\nShort answers." and got.etag == appended.etag

    # a change sent with an old etag loses: ABORTED, and nothing changed
    stale = first.etag
    assert code_of(lambda: store.edit("alice", "/prefs.md", append="x", etag=stale)) == (409, "ABORTED")
    assert code_of(lambda: store.write("alice", "/prefs.md", "y", etag=stale)) == (409, "ABORTED")
    assert code_of(lambda: store.delete("alice", "/prefs.md", etag=stale)) == (409, "ABORTED")
    assert store.get("alice", "/prefs.md").etag == appended.etag

    edited = store.edit("alice", "/prefs.md", str_replace=("email", "phone"), etag=appended.etag)
    assert edited.contents == "Prefers phone over calls.\nShort answers."
    replaced = store.write("alice", "/prefs.md", "Only phone.", description="channel", etag=edited.etag)
    assert (replaced.contents, replaced.description) == ("Only phone.", "channel")
    inserted = store.edit("alice", "/prefs.md", insert="First line.", insert_line=0)
    assert inserted.contents == "First line.\nOnly phone."

    history = store.history("alice", "/prefs.md")
    assert history[0].etag == inserted.etag and history[-1].operation == "create"
    assert history[-1].contents == "Prefers email."
    restored = store.restore("alice", "/prefs.md", history[-1].etag)
    assert restored.contents == "Prefers email." and restored.description == "contact"

    store.delete("alice", "/prefs.md", etag=restored.etag)
    assert code_of(lambda: store.get("alice", "/prefs.md")) == (404, "NOT_FOUND")
    assert store.history("alice", "/prefs.md")[0].operation == "delete"

    expiring = store.write("alice", "/today.md", "Busy today.", ttl_seconds=3600)
    assert expiring.expires_at is not None
    assert abs(expiring.expires_at - expiring.updated_at - 3_600_000) < 60_000
    renewed = store.edit("alice", "/today.md", ttl_seconds=7200, etag=expiring.etag)
    assert renewed.etag == expiring.etag and renewed.contents == "Busy today."  # no new version
    assert renewed.expires_at is not None and renewed.expires_at - expiring.expires_at > 3_000_000
    store.write("alice", "/team.md", "x")
    store.delete_scope("alice")
    assert list(store.list("alice")) == []


def test_search_answers_hits_with_entry_and_score(admin):
    store = admin.store(new_store(admin))
    store.write("bob", "/colour.md", "Bob's favourite colour is green.", description="colour")
    store.write("bob", "/food.md", "Bob is allergic to peanuts.", description="food")
    store.write("carol", "/colour.md", "Carol likes red.", description="colour")

    hits = store.search("bob", "favourite colour", mode="keyword", top_k=5)
    assert hits[0].entry.path == "/colour.md" and hits[0].entry.scope == "bob"
    assert hits[0].entry.contents == "Bob's favourite colour is green."
    assert 0 < hits[0].score <= 1 and all(h.entry.scope == "bob" for h in hits)
    assert hits.degraded is None  # the keyword index holds every write before it is answered
    assert [h.entry.path for h in store.search("bob", "peanuts allergy", min_score=0.5)] == ["/food.md"]
    both = store.search(["bob", "carol"], "colour", mode="keyword")
    assert {(h.entry.scope, h.entry.path) for h in both} >= {("bob", "/colour.md"), ("carol", "/colour.md")}
    assert code_of(lambda: store.search("bob", "colour", top_k=500)) == (400, "INVALID_PARAMETER_VALUE")


def test_metadata_and_filters(admin):
    store = admin.store(new_store(admin))
    store.write("bob", "/a.md", "Bob likes tea.", metadata={"topic": "drinks", "n": 1})
    store.write("bob", "/b.md", "Bob likes coffee.", metadata={"topic": "drinks", "n": 2})
    store.write("bob", "/c.md", "Bob likes cake.", metadata={"topic": "food"})
    assert store.get("bob", "/a.md").metadata == {"topic": "drinks", "n": 1}
    assert [e.path for e in store.list("bob", filter={"topic": "drinks"})] == ["/a.md", "/b.md"]
    listed = [e.metadata for e in store.list("bob")]
    assert listed == [{"topic": "drinks", "n": 1}, {"topic": "drinks", "n": 2}, {"topic": "food"}]
    hits = store.search("bob", "Bob likes", mode="keyword", filter={"topic": "drinks", "n": 2})
    assert [h.entry.path for h in hits] == ["/b.md"]
    assert store.edit("bob", "/c.md", metadata={}).metadata is None  # cleared
    assert [v.metadata for v in store.history("bob", "/c.md")] == [None, {"topic": "food"}]


def test_errors_are_catalog_errors_with_the_servers_codes(live, admin):
    full_name = new_store(admin)
    with Client(live.url, token_for(live, "mallory")) as mallory, pytest.raises(CatalogError) as denied:
        mallory.memory_stores.get(full_name)
    assert (denied.value.status, denied.value.error_code) == (403, "PERMISSION_DENIED")
    assert "USE_CATALOG" in denied.value.message and denied.value.request_id
    assert str(denied.value).startswith("PERMISSION_DENIED: ")

    bad = admin.memory_stores.create
    assert code_of(lambda: bad("main.default.bad name")) == (400, "INVALID_PARAMETER_VALUE")
    assert code_of(lambda: admin.store("main.default.nope").get("a", "/x.md")) == (404, "NOT_FOUND")
    with Client(live.url, "not-a-token") as stranger:
        assert code_of(lambda: stranger.catalogs.get("main")) == (401, "UNAUTHENTICATED")
    with pytest.raises(ValueError, match=r"catalog\.schema\.store"):  # refused before sending
        admin.memory_stores.create("no_dots")
    with Client(f"http://127.0.0.1:{free_port()}", "t") as nowhere:
        assert code_of(lambda: nowhere.catalogs.get("main")) == (0, "CONNECTION_FAILED")


def test_grants_and_effective_permissions(live, admin):
    full_name = new_store(admin)
    catalog, schema = full_name.split(".")[0], ".".join(full_name.split(".")[:2])
    team = unique("team")
    admin.groups.create(team, members=["alice"])
    admin.store(full_name).write("shared", "/faq.md", "Refunds take five days.")

    granted = admin.grants.update("memory_store", full_name, team, add=["READ_MEMORY_STORE"])
    assert [(a.principal, a.privileges) for a in granted] == [(team, ["READ_MEMORY_STORE"])]
    admin.grants.update("catalog", catalog, team, add=["USE CATALOG"])  # spaces are accepted too
    admin.grants.update("SCHEMA", schema, team, add=["USE_SCHEMA"])
    assert [a.principal for a in admin.grants.get("memory_store", full_name)] == [team]
    assert admin.grants.get("memory_store", full_name, principal="nobody") == []

    with Client(live.url, token_for(live, "alice")) as alice:
        assert alice.store(full_name).get("shared", "/faq.md").contents == "Refunds take five days."
        mine = alice.grants.effective("memory_store", full_name)
        where = {(p.privilege, p.inherited_from_type) for a in mine for p in a.privileges}
        assert {a.principal for a in mine} == {team}
        assert where == {("READ_MEMORY_STORE", None)}  # granted on the store itself
        assert code_of(lambda: alice.store(full_name).write("shared", "/x.md", "no")) == (
            403,
            "PERMISSION_DENIED",
        )
        # about another principal: only the owner, MANAGE or the admin may ask
        assert code_of(lambda: alice.grants.effective("memory_store", full_name, principal="admin"))[0] == 403

        admin.grants.update("memory_store", full_name, team, remove=["READ_MEMORY_STORE"])
        assert code_of(lambda: alice.store(full_name).get("shared", "/faq.md")) == (403, "PERMISSION_DENIED")
        admin.grants.update("schema", schema, team, add=["READ_MEMORY_STORE"])  # every store below it
        assert alice.store(full_name).get("shared", "/faq.md").path == "/faq.md"
        inherited = alice.grants.effective("memory_store", full_name)[0].privileges
        assert [(p.privilege, p.inherited_from_type, p.inherited_from_name) for p in inherited] == [
            ("READ_MEMORY_STORE", "SCHEMA", schema)
        ]
        admin.grants.update("schema", schema, team, remove=["READ_MEMORY_STORE"])
        assert code_of(lambda: alice.store(full_name).get("shared", "/faq.md")) == (403, "PERMISSION_DENIED")
    assert admin.grants.get("memory_store", full_name) == []
    metastore = admin.metastore().metastore_id  # the metastore's full name in grants
    admin.grants.update("metastore", metastore, team, add=["CREATE_CATALOG"])
    assert admin.grants.get("metastore", metastore, principal=team)[0].privileges == ["CREATE_CATALOG"]
    admin.grants.update("metastore", metastore, team, remove=["CREATE_CATALOG"])


def test_grants_limited_to_scopes(live, admin):
    """A grant made with `scopes` is answered with its patterns, holds only there, and its
    patterns are added to, taken from and lifted with the same `update`."""
    full_name = new_store(admin)
    store = admin.store(full_name)
    for scope in ("team-a", "team-a:x", "team-b"):
        store.write(scope, "/n.md", f"a note of {scope}")
    ann = unique("ann")
    read = "READ_MEMORY_STORE"
    admin.grants.update("catalog", full_name.split(".")[0], ann, add=["USE_CATALOG"])
    admin.grants.update("schema", full_name.rpartition(".")[0], ann, add=["USE_SCHEMA"])

    granted = admin.grants.update("memory_store", full_name, ann, add=[read], scopes=["team-a", "team-a:*"])
    assert [(a.principal, a.privileges, a.scopes) for a in granted] == [
        (ann, [read], {read: ["team-a", "team-a:*"]})
    ]
    (listed,) = admin.grants.get("memory_store", full_name, principal=ann)
    assert listed.scopes == {read: ["team-a", "team-a:*"]}
    with Client(live.url, token_for(live, ann)) as as_ann:

        def may_read(scope: str) -> bool:
            try:
                return as_ann.store(full_name).get(scope, "/n.md").contents == f"a note of {scope}"
            except CatalogError as exc:
                assert (exc.status, exc.error_code) == (403, "PERMISSION_DENIED")
                return False

        (mine,) = as_ann.grants.effective("memory_store", full_name)
        assert [(p.privilege, p.scopes) for p in mine.privileges] == [(read, ["team-a", "team-a:*"])]
        assert [may_read(s) for s in ("team-a", "team-a:x", "team-b")] == [True, True, False]

        # patterns added to a limited grant; taken from it
        admin.grants.update("memory_store", full_name, ann, add=[read], scopes=["team-b"])
        assert admin.grants.get("memory_store", full_name, principal=ann)[0].scopes == {
            read: ["team-a", "team-a:*", "team-b"]
        }
        admin.grants.update("memory_store", full_name, ann, remove=[read], scopes=["team-a:*"])
        assert [may_read(s) for s in ("team-a", "team-a:x", "team-b")] == [True, False, True]

        # the limit lifted: every scope
        (lifted,) = admin.grants.update("memory_store", full_name, ann, add=[read])
        assert (lifted.privileges, lifted.scopes) == ([read], {})
        assert as_ann.grants.effective("memory_store", full_name)[0].privileges[0].scopes is None
        assert may_read("team-a:x")

        # a grant for every scope is not narrowed by patterns: revoked, then granted with them
        assert code_of(
            lambda: admin.grants.update("memory_store", full_name, ann, remove=[read], scopes=["team-b"])
        ) == (400, "INVALID_PARAMETER_VALUE")
        admin.grants.update("memory_store", full_name, ann, remove=[read])
        admin.grants.update("memory_store", full_name, ann, add=[read], scopes=["team-b"])
        assert [may_read(s) for s in ("team-a", "team-b")] == [False, True]

    # only READ and WRITE take patterns; patterns are a list
    assert code_of(
        lambda: admin.grants.update("memory_store", full_name, ann, add=["MANAGE"], scopes=["team-a"])
    ) == (400, "INVALID_PARAMETER_VALUE")
    with pytest.raises(TypeError, match="scopes is a list"):
        admin.grants.update("memory_store", full_name, ann, add=[read], scopes="team-a")


async def test_the_async_client_grants_with_scopes_too(live):
    async with AsyncClient(live.url, token_for(live, "admin")) as admin:
        catalog = unique("scat")
        await admin.catalogs.create(catalog)
        await admin.schemas.create(f"{catalog}.s")
        full_name = (await admin.memory_stores.create(f"{catalog}.s.notes")).full_name
        granted = await admin.grants.update(
            "memory_store", full_name, "team-w", add=["WRITE_MEMORY_STORE"], scopes=["team-w:*"]
        )
        assert [(a.principal, a.scopes) for a in granted] == [
            ("team-w", {"WRITE_MEMORY_STORE": ["team-w:*"]})
        ]
        await admin.grants.update(
            "memory_store", full_name, "team-w", remove=["WRITE_MEMORY_STORE"], scopes=["team-w:*"]
        )
        assert await admin.grants.get("memory_store", full_name) == []  # it went with its last pattern


def test_groups_and_their_members(live, admin):
    team = unique("team")
    made = admin.groups.create(team, members=["alice", "bob"])
    assert made.display_name == team and sorted(m.value for m in made.members) == ["alice", "bob"]
    assert admin.groups.get(team).id == made.id and team in [g.display_name for g in admin.groups.list()]
    assert [m.value for m in admin.groups.remove_members(team, ["bob"]).members] == ["alice"]
    assert sorted(m.value for m in admin.groups.add_members(team, ["carol"]).members) == ["alice", "carol"]
    with Client(live.url, token_for(live, "carol")) as carol:
        assert [g.display_name for g in carol.groups.list()] == [team]  # members read their groups
        assert code_of(lambda: carol.groups.create(unique("mine")))[1] == "PERMISSION_DENIED"
    admin.groups.delete(team)
    assert code_of(lambda: admin.groups.get(team)) == (404, "RESOURCE_DOES_NOT_EXIST")
    # any route the typed methods do not cover: the decoded JSON answer
    assert admin.request("GET", SCIM, params={"filter": f'displayName eq "{team}"'})["Resources"] == []


def test_audit_events_iterate_every_page_and_the_chain_verifies(live, admin):
    who = unique("auditee")
    with Client(live.url, token_for(live, who)) as someone:
        for _ in range(5):
            list(someone.catalogs.list())
        assert code_of(lambda: list(someone.audit.events()))[1] == "PERMISSION_DENIED"

    events = list(admin.audit.events(principal=who, page_size=2))
    assert len(events) == 6 and {e.principal for e in events} == {who}
    assert [e.seq for e in events] == sorted((e.seq for e in events), reverse=True)  # newest first
    assert events[0].decision == "deny" and events[0].status_code == 403
    assert len(list(admin.audit.events(principal=who, page_size=2, limit=3))) == 3
    oldest_first = list(admin.audit.events(principal=who, order="asc", decision="allow"))
    assert len(oldest_first) == 5 and oldest_first[0].seq < oldest_first[-1].seq
    since = datetime.now(UTC) + timedelta(hours=1)
    assert list(admin.audit.events(principal=who, start_time=since)) == []
    with pytest.raises(TypeError, match="principle"):
        admin.audit.events(principle=who).__next__()

    verified = admin.audit.verify()
    assert verified.ok and verified.checked > 6 and verified.first_broken_seq is None


def test_lineage_of_a_derived_entry(admin):
    full_name = new_store(admin)
    store = admin.store(full_name)
    store.write("a", "/raw/chat.md", "Alice said she moved to Lyon.")
    store.write(
        "a",
        "/facts/home.md",
        "Lives in Lyon.",
        derived_from=[{"memory_store": full_name, "scope": "a", "path": "/raw/chat.md"}],
    )
    upstream = admin.lineage.get(full_name, scope="a", path="/facts/home.md")
    assert upstream.direction == "upstream"
    assert [(e.source.path, e.target.path, e.depth) for e in upstream.edges] == [
        ("/raw/chat.md", "/facts/home.md", 1)
    ]
    downstream = admin.lineage.get(full_name, direction="downstream", scope="a", path="/raw/chat.md")
    assert [e.target.path for e in downstream.edges] == ["/facts/home.md"]


async def test_async_client_does_the_same(live):
    async with AsyncClient(live.url, token_for(live, "admin")) as admin:
        catalog = unique("acat")
        await admin.catalogs.create(catalog)
        await admin.schemas.create(f"{catalog}.s")
        made = await admin.memory_stores.create(f"{catalog}.s.notes", description="async")
        assert [s.full_name async for s in admin.memory_stores.list(catalog, "s")] == [made.full_name]
        store = admin.store(made.full_name)
        for i in range(5):
            await store.write("u", f"/n/{i}.md", f"note number {i} about tea")
        assert [e.path async for e in store.list("u", page_size=2)] == [f"/n/{i}.md" for i in range(5)]
        entry = await store.get("u", "/n/3.md")
        with pytest.raises(CatalogError) as conflict:
            await store.edit("u", "/n/3.md", append="x", etag=str(int(entry.etag) + 7))
        assert conflict.value.error_code == "ABORTED"
        hits = await store.search("u", "note number 3", mode="keyword", top_k=1)
        assert hits[0].entry.path == "/n/3.md"
        granted = await admin.grants.update(
            "memory_store", made.full_name, "readers", add=["READ_MEMORY_STORE"]
        )
        assert granted[0].principal == "readers"
        with pytest.raises(CatalogError) as missing:
            await store.get("u", "/nothing.md")
        assert (missing.value.status, missing.value.error_code) == (404, "NOT_FOUND")
        events = [e async for e in admin.audit.events(action_name="permissions.update", limit=1)]
        assert len(events) == 1 and events[0].securable_full_name == made.full_name
        assert (await admin.audit.verify()).ok


# --- retries, against a server that answers what the test scripts ----------------------------------


class Scripted:
    """An HTTP server answering each request with the next scripted (status, headers, body), the
    last one again once the script is spent; it records what it was asked."""

    def __init__(self, *answers: tuple[int, dict[str, str], object]) -> None:
        self.answers = list(answers)
        self.seen: list[tuple[str, str]] = []
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                scripted.seen.append((self.command, self.path.split("?")[0]))
                status, headers, body = (
                    scripted.answers.pop(0) if len(scripted.answers) > 1 else scripted.answers[0]
                )
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(status)
                for key, value in {"content-type": "application/json", **headers}.items():
                    self.send_header(key, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = answer

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


BUSY = (503, {"retry-after": "0"}, {"error_code": "TEMPORARILY_UNAVAILABLE", "message": "busy"})
LIMITED = (429, {"retry-after": "0"}, {"error_code": "REQUEST_LIMIT_EXCEEDED", "message": "slow down"})
SUMMARY = (200, {}, {"metastore_id": "m-1", "name": "metastore"})
STORE = {"name": "x", "full_name": "c.s.x", "catalog_name": "c", "schema_name": "s"}
FAST = Retry(attempts=4, backoff=0.001)


@pytest.fixture
def scripted() -> Iterator[type[Scripted]]:
    servers: list[Scripted] = []

    def start(*answers):  # type: ignore[no-untyped-def]
        servers.append(Scripted(*answers))
        return servers[-1]

    yield start  # type: ignore[misc]
    for server in servers:
        server.close()


def test_a_read_is_retried_after_503_until_it_is_answered(scripted):
    server = scripted(BUSY, BUSY, SUMMARY)
    with Client(server.url, "t", retry=FAST) as client:
        assert client.metastore().metastore_id == "m-1"
    assert server.seen == [("GET", "/api/2.1/unity-catalog/metastore_summary")] * 3


def test_a_create_is_retried_after_429_but_not_after_503(scripted):
    limited = scripted(LIMITED, (200, {}, STORE))
    with Client(limited.url, "t", retry=FAST) as client:
        assert client.memory_stores.create("c.s.x").full_name == "c.s.x"
    assert len(limited.seen) == 2  # refused by the rate limit before anything was done

    busy = scripted(BUSY, (200, {}, STORE))
    with Client(busy.url, "t", retry=FAST) as client, pytest.raises(CatalogError) as failure:
        client.memory_stores.create("c.s.x")
    assert (failure.value.status, failure.value.error_code) == (503, "TEMPORARILY_UNAVAILABLE")
    assert len(busy.seen) == 1  # the server may have made it before it failed: not sent twice


def test_retries_are_bounded(scripted):
    server = scripted(BUSY)
    with Client(server.url, "t", retry=FAST) as client, pytest.raises(CatalogError) as failure:
        client.catalogs.get("main")
    assert failure.value.error_code == "TEMPORARILY_UNAVAILABLE" and len(server.seen) == 4
    with Client(server.url, "t", retry=Retry(attempts=1)) as client, pytest.raises(CatalogError):
        client.catalogs.get("main")
    assert len(server.seen) == 5


def test_an_answer_that_is_not_the_error_shape(scripted):
    server = scripted((502, {"content-type": "text/html"}, "<html>Bad gateway</html>\nmore"))
    with Client(server.url, "t", retry=FAST) as client, pytest.raises(CatalogError) as failure:
        client.catalogs.get("main")
    assert (failure.value.status, failure.value.error_code) == (502, "HTTP_502")
    assert failure.value.message == "<html>Bad gateway</html>"


async def test_the_async_client_retries_too(scripted):
    server = scripted(LIMITED, BUSY, SUMMARY)
    async with AsyncClient(server.url, "t", retry=FAST) as client:
        assert (await client.metastore()).metastore_id == "m-1"
    assert len(server.seen) == 3


def test_which_answers_are_retried_and_how_long_it_waits():
    policy = Retry(attempts=3, backoff=1.0, max_wait=20.0)
    read, create = Call("GET", "/x"), Call("POST", "/x")
    search = calls.search_entries(
        "c.s.x", "u", "q", top_k=None, mode=None, min_score=None, path_prefix=None, session_id=None
    )
    overwrite = calls.write_entry(
        "c.s.x",
        "u",
        "/p",
        contents="x",
        description=None,
        write_mode="OVERWRITE",
        session_id=None,
        metadata=None,
        ttl_seconds=None,
        source_type=None,
        creation_reason=None,
        creation_source=None,
        derived_from=None,
    )

    def answer(status: int, **headers: str) -> httpx.Response:
        return httpx.Response(status, headers=headers)

    assert policy.wait(0, read, answer(503, **{"retry-after": "2"})) == 2.0
    assert policy.wait(0, read, answer(503, **{"retry-after": "600"})) == 20.0  # at most max_wait
    assert 0.5 <= policy.wait(1, read, answer(503)) <= 2.0  # doubling, with jitter
    assert policy.wait(2, read, answer(503)) is None  # the third try was the last
    assert policy.wait(0, create, answer(503)) is None and policy.wait(0, create, answer(429)) is not None
    assert (
        policy.wait(0, search, answer(503)) is not None and policy.wait(0, overwrite, answer(503)) is not None
    )
    assert policy.wait(0, read, answer(500)) is None and policy.wait(0, read, answer(404)) is None
    assert retry_after(answer(503, **{"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"})) == 0.0
