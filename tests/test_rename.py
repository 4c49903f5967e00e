"""Renaming catalogs, schemas and memory stores (`new_name` on PATCH): what is below keeps its ids,
grants, entries, search documents and lineage, and answers under the new full names; the old
names are gone; audit history keeps the names it was recorded with; decisions cached before the
rename (in this process and in another one on the same database) never name the old object."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from rest import UC

from catalog.auth import mint_dev_token
from catalog.settings import Settings


def ok(r) -> Any:  # type: ignore[no-untyped-def]
    assert r.status_code == 200, r.text
    return r.json()


def grant(client, token, kind: str, full_name: str, principal: str, *privileges: str) -> None:  # type: ignore[no-untyped-def]
    body = {"changes": [{"principal": principal, "add": list(privileges)}]}
    ok(client.patch(f"{UC}/permissions/{kind}/{full_name}", headers=token(), json=body))


def tree(client, token, catalog: str, schema: str = "team", store: str = "notes") -> dict[str, Any]:  # type: ignore[no-untyped-def]
    """A catalog with one schema and one store, created by the admin; their answers."""
    return {
        "catalog": ok(client.post(f"{UC}/catalogs", headers=token(), json={"name": catalog})),
        "schema": ok(
            client.post(f"{UC}/schemas", headers=token(), json={"name": schema, "catalog_name": catalog})
        ),
        "store": ok(
            client.post(
                f"{UC}/memory-stores",
                headers=token(),
                json={"name": store, "catalog_name": catalog, "schema_name": schema},
            )
        ),
    }


def reader(client, token, catalog: str, schema: str, store: str, who: str) -> None:  # type: ignore[no-untyped-def]
    """`who` may read the store: USE on its parents, READ_MEMORY_STORE on the store itself."""
    grant(client, token, "catalog", catalog, who, "USE_CATALOG")
    grant(client, token, "schema", f"{catalog}.{schema}", who, "USE_SCHEMA")
    grant(client, token, "memory_store", f"{catalog}.{schema}.{store}", who, "READ_MEMORY_STORE")


def write(client, token, store: str, path: str, contents: str, **extra: Any) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    r = client.post(
        f"{UC}/memory-stores/{store}/entries",
        headers=token(),
        params={"scope": "u"},
        json={"path": path, "contents": contents, **extra},
    )
    return ok(r)  # type: ignore[no-any-return]


def search(client, headers: dict[str, str], store: str, query: str, mode: str) -> list[str]:  # type: ignore[no-untyped-def]
    body = {"scope": "u", "query": query, "top_k": 5, "mode": mode}
    hits = ok(client.post(f"{UC}/memory-stores/{store}/entries:search", headers=headers, json=body))
    return [hit["memory_entry"]["path"] for hit in hits["results"]]


def events(client, token, **filters: str) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """Every audit event matching the filters, oldest first."""
    found: list[dict[str, Any]] = []
    params: dict[str, Any] = {**filters, "page_size": 100}
    while True:
        body = ok(client.get(f"{UC}/system/audit", headers=token(), params=params))
        found += body["events"]
        if not body.get("next_page_token"):
            return sorted(found, key=lambda e: e["seq"])
        params["page_token"] = body["next_page_token"]


def test_a_renamed_catalog_keeps_its_ids_grants_and_entries(client, token):
    made = tree(client, token, "rn_keep")
    reader(client, token, "rn_keep", "team", "notes", "rita")
    write(client, token, "rn_keep.team.notes", "/city.md", "The user lives in Lyon near the river")
    assert ok(client.get(f"{UC}/memory-stores/rn_keep.team.notes", headers=token("rita")))

    renamed = ok(client.patch(f"{UC}/catalogs/rn_keep", headers=token(), json={"new_name": "RN_Kept"}))
    assert (renamed["name"], renamed["full_name"], renamed["id"]) == (
        "rn_kept",
        "rn_kept",
        made["catalog"]["id"],
    )
    assert renamed["updated_by"] == "admin" and renamed["created_at"] == made["catalog"]["created_at"]

    # everything below answers under the new full names, with the same ids
    schema = ok(client.get(f"{UC}/schemas/rn_kept.team", headers=token()))
    assert (schema["full_name"], schema["catalog_name"], schema["schema_id"]) == (
        "rn_kept.team",
        "rn_kept",
        made["schema"]["schema_id"],
    )
    store = ok(client.get(f"{UC}/memory-stores/rn_kept.team.notes", headers=token("rita")))
    assert (store["full_name"], store["catalog_name"], store["memory_store_id"]) == (
        "rn_kept.team.notes",
        "rn_kept",
        made["store"]["memory_store_id"],
    )
    listed = ok(
        client.get(
            f"{UC}/memory-stores", headers=token(), params={"catalog_name": "rn_kept", "schema_name": "team"}
        )
    )
    assert [m["full_name"] for m in listed["memory_stores"]] == ["rn_kept.team.notes"]
    assert [
        s["full_name"]
        for s in ok(client.get(f"{UC}/schemas", headers=token(), params={"catalog_name": "rn_kept"}))[
            "schemas"
        ]
    ] == ["rn_kept.team"]

    # the reader keeps reading: its grants followed the objects (by id), entries and search too
    rita = token("rita")
    got = ok(
        client.get(
            f"{UC}/memory-stores/rn_kept.team.notes/entries:get",
            headers=rita,
            params={"scope": "u", "path": "/city.md"},
        )
    )
    assert got["contents"] == "The user lives in Lyon near the river"
    for mode in ("keyword", "semantic", "hybrid"):
        assert search(client, rita, "rn_kept.team.notes", "Lyon river", mode) == ["/city.md"], mode
    grants = ok(client.get(f"{UC}/permissions/memory_store/rn_kept.team.notes", headers=token()))
    assert [(a["principal"], a["privileges"]) for a in grants["privilege_assignments"]] == [
        ("rita", ["READ_MEMORY_STORE"])
    ]
    assert ok(client.get(f"{UC}/permissions/catalog/rn_kept", headers=token()))["privilege_assignments"] == [
        {"principal": "rita", "privileges": ["USE_CATALOG"]}
    ]

    # the old names are gone: 404 for the admin; 403 for the reader, who has no USE on a
    # catalog of that name (no existence leak either way)
    for path, code in [
        ("catalogs/rn_keep", "RESOURCE_DOES_NOT_EXIST"),
        ("schemas/rn_keep.team", "RESOURCE_DOES_NOT_EXIST"),
        ("memory-stores/rn_keep.team.notes", "NOT_FOUND"),
    ]:
        r = client.get(f"{UC}/{path}", headers=token())
        assert (r.status_code, r.json()["error_code"]) == (404, code), path
    assert client.get(f"{UC}/memory-stores/rn_keep.team.notes", headers=rita).status_code == 403
    names = [
        c["name"]
        for c in ok(client.get(f"{UC}/catalogs", headers=rita, params={"max_results": 1000}))["catalogs"]
    ]
    assert "rn_kept" in names and "rn_keep" not in names
    # the old name is free again
    ok(client.post(f"{UC}/catalogs", headers=token(), json={"name": "rn_keep"}))


def test_a_renamed_schema_and_store_keep_their_entries(client, token):
    made = tree(client, token, "rn_sch")
    reader(client, token, "rn_sch", "team", "notes", "sam")
    write(client, token, "rn_sch.team.notes", "/pet.md", "The user has a cat called Miso")

    schema = ok(
        client.patch(f"{UC}/schemas/rn_sch.team", headers=token(), json={"new_name": "crew", "comment": "c"})
    )
    assert (schema["name"], schema["full_name"], schema["schema_id"], schema["comment"]) == (
        "crew",
        "rn_sch.crew",
        made["schema"]["schema_id"],
        "c",
    )
    store = ok(
        client.patch(f"{UC}/memory-stores/rn_sch.crew.notes", headers=token(), json={"new_name": "facts"})
    )
    assert (store["name"], store["full_name"], store["schema_name"], store["memory_store_id"]) == (
        "facts",
        "rn_sch.crew.facts",
        "crew",
        made["store"]["memory_store_id"],
    )
    sam = token("sam")
    assert search(client, sam, "rn_sch.crew.facts", "cat Miso", "hybrid") == ["/pet.md"]
    listed = ok(
        client.get(f"{UC}/memory-stores/rn_sch.crew.facts/entries", headers=sam, params={"scope": "u"})
    )
    assert [e["path"] for e in listed["entries"]] == ["/pet.md"]
    # with USE on the catalog, the old schema's name is 403 for sam (no USE_SCHEMA on a schema of
    # that name) and 404 for the admin; the old store's name in the renamed schema is 404 for both
    assert client.get(f"{UC}/memory-stores/rn_sch.team.notes", headers=sam).status_code == 403
    assert client.get(f"{UC}/schemas/rn_sch.team", headers=token()).status_code == 404
    for who in (sam, token()):
        r = client.get(f"{UC}/memory-stores/rn_sch.crew.notes", headers=who)
        assert (r.status_code, r.json()["error_code"]) == (404, "NOT_FOUND")


def test_renaming_to_its_own_name_changes_nothing(client, token):
    made = tree(client, token, "rn_same")
    for path, new_name, key in [
        ("catalogs/rn_same", "RN_SAME", "catalog"),
        ("schemas/rn_same.team", "team", "schema"),
        ("memory-stores/rn_same.team.notes", "Notes", "store"),
    ]:
        body = ok(client.patch(f"{UC}/{path}", headers=token(), json={"new_name": new_name}))
        assert body["full_name"] == made[key]["full_name"] and body["name"] == new_name.lower()


@pytest.mark.parametrize(
    "path",
    ["catalogs/rn_bad", "schemas/rn_bad.team", "memory-stores/rn_bad.team.notes"],
)
@pytest.mark.parametrize("new_name", ["bad name", "", "x" * 256, "a.b", "slash/y", 5])
def test_a_bad_new_name_is_400_naming_new_name(client, token, path, new_name):
    if client.get(f"{UC}/catalogs/rn_bad", headers=token()).status_code == 404:
        tree(client, token, "rn_bad")
    r = client.patch(f"{UC}/{path}", headers=token(), json={"new_name": new_name})
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["error_code"] == "INVALID_PARAMETER_VALUE"
    assert err["details"][0]["field"] == "new_name" and "new_name" in err["message"]
    assert "unknown field" not in err["message"]  # a known field, whose value breaks the name rule
    assert ok(client.get(f"{UC}/memory-stores/rn_bad.team.notes", headers=token()))["full_name"] == (
        "rn_bad.team.notes"
    )


def test_a_taken_name_is_409_and_changes_nothing(client, token):
    tree(client, token, "rn_taken")
    ok(client.post(f"{UC}/schemas", headers=token(), json={"name": "other", "catalog_name": "rn_taken"}))
    body = {"name": "other", "catalog_name": "rn_taken", "schema_name": "team"}
    ok(client.post(f"{UC}/memory-stores", headers=token(), json=body))
    for path, new_name in [
        ("catalogs/rn_taken", "MAIN"),
        ("schemas/rn_taken.team", "other"),
        ("memory-stores/rn_taken.team.notes", "other"),
    ]:
        r = client.patch(
            f"{UC}/{path}",
            headers=token(),
            json={"new_name": new_name, "comment" if "store" not in path else "description": "changed"},
        )
        assert (r.status_code, r.json()["error_code"]) == (409, "ALREADY_EXISTS"), path
    # nothing of the refused change was made, not even the comment sent with it
    assert ok(client.get(f"{UC}/catalogs/rn_taken", headers=token())).get("comment") is None
    assert ok(client.get(f"{UC}/schemas/rn_taken.team", headers=token())).get("comment") is None
    assert (
        ok(client.get(f"{UC}/memory-stores/rn_taken.team.notes", headers=token())).get("description") is None
    )


def test_renaming_needs_manage_or_ownership(client, token):
    tree(client, token, "rn_auth")
    reader(client, token, "rn_auth", "team", "notes", "rhea")
    for path in ["catalogs/rn_auth", "schemas/rn_auth.team", "memory-stores/rn_auth.team.notes"]:
        r = client.patch(f"{UC}/{path}", headers=token("rhea"), json={"new_name": "stolen"})
        assert (r.status_code, r.json()["error_code"]) == (403, "PERMISSION_DENIED"), path
        assert "MANAGE" in r.json()["message"]
    assert ok(client.get(f"{UC}/memory-stores/rn_auth.team.notes", headers=token()))["name"] == "notes"

    # MANAGE on the schema lets one rename the schema and the stores in it (with USE on the way)
    grant(client, token, "catalog", "rn_auth", "mona", "USE_CATALOG")
    grant(client, token, "schema", "rn_auth.team", "mona", "USE_SCHEMA", "MANAGE")
    r = client.patch(f"{UC}/catalogs/rn_auth", headers=token("mona"), json={"new_name": "stolen"})
    assert r.status_code == 403
    store = ok(
        client.patch(f"{UC}/memory-stores/rn_auth.team.notes", headers=token("mona"), json={"new_name": "n2"})
    )
    assert store["full_name"] == "rn_auth.team.n2"
    assert (
        ok(client.patch(f"{UC}/schemas/rn_auth.team", headers=token("mona"), json={"new_name": "t2"}))[
            "full_name"
        ]
        == "rn_auth.t2"
    )
    # the owner of a catalog renames it without any grant
    ok(client.patch(f"{UC}/catalogs/rn_auth", headers=token(), json={"owner": "olga"}))
    assert (
        ok(client.patch(f"{UC}/catalogs/rn_auth", headers=token("olga"), json={"new_name": "rn_olga"}))[
            "owner"
        ]
        == "olga"
    )
    assert ok(client.get(f"{UC}/memory-stores/rn_olga.t2.n2", headers=token("rhea")))["name"] == "n2"


def test_the_agents_schema_and_its_catalog_are_not_renamed(client, token):
    for path in ["catalogs/main", "schemas/main.default"]:
        r = client.patch(f"{UC}/{path}", headers=token(), json={"new_name": "elsewhere"})
        assert r.status_code == 400, r.text
        err = r.json()
        assert err["details"][0]["field"] == "new_name" and "CATALOG_AGENTS_SCHEMA" in err["message"]
    assert (
        ok(client.patch(f"{UC}/catalogs/main", headers=token(), json={"new_name": "main"}))["name"] == "main"
    )
    assert ok(client.get(f"{UC}/schemas/main.default", headers=token()))["full_name"] == "main.default"
    # another schema of main may be renamed, and a store of the agents schema: the agent dialect
    # then finds the store by its new id
    ok(client.post(f"{UC}/schemas", headers=token(), json={"name": "rn_side", "catalog_name": "main"}))
    assert (
        ok(client.patch(f"{UC}/schemas/main.rn_side", headers=token(), json={"new_name": "rn_side2"}))[
            "full_name"
        ]
        == "main.rn_side2"
    )
    body = {"name": "rn-agent", "catalog_name": "main", "schema_name": "default"}
    ok(client.post(f"{UC}/memory-stores", headers=token(), json=body))
    ok(
        client.patch(
            f"{UC}/memory-stores/main.default.rn-agent", headers=token(), json={"new_name": "rn-agent2"}
        )
    )
    assert (
        ok(client.get("/api/2.0/agents/memory-stores/rn-agent2", headers=token()))["name"]
        == "memory-stores/rn-agent2"
    )
    r = client.get("/api/2.0/agents/memory-stores/rn-agent", headers=token())
    assert r.status_code == 404


def test_audit_keeps_history_and_lineage_follows_the_rename(client, token):
    tree(client, token, "rn_hist")
    ok(
        client.post(
            f"{UC}/memory-stores",
            headers=token(),
            json={"name": "derived", "catalog_name": "rn_hist", "schema_name": "team"},
        )
    )
    write(client, token, "rn_hist.team.notes", "/raw.md", "The user moved to Oslo")
    source = {"memory_store": "rn_hist.team.notes", "scope": "u", "path": "/raw.md"}
    write(client, token, "rn_hist.team.derived", "/city.md", "Lives in Oslo", derived_from=[source])

    ok(client.patch(f"{UC}/schemas/rn_hist.team", headers=token(), json={"new_name": "crew"}))
    write(client, token, "rn_hist.crew.notes", "/later.md", "Written after the rename")

    before = events(client, token, securable_full_name="rn_hist.team.notes", action_name="entries.write")
    after = events(client, token, securable_full_name="rn_hist.crew.notes", action_name="entries.write")
    assert len(before) == 1 and len(after) == 1
    assert before[0]["securable_id"] == after[0]["securable_id"]
    (renamed,) = events(client, token, securable_full_name="rn_hist.team", action_name="schema.update")
    assert renamed["request_params"]["new_name"] == "crew" and renamed["decision"] == "allow"
    assert ok(client.get(f"{UC}/system/audit:verify", headers=token()))["ok"] is True

    # the edge recorded before the rename, asked for by the new name, names its ends by it
    lineage = ok(
        client.get(
            f"{UC}/system/lineage",
            headers=token(),
            params={"securable_full_name": "rn_hist.crew.derived", "direction": "upstream"},
        )
    )
    assert lineage["securable_full_name"] == "rn_hist.crew.derived"
    assert [
        (e["source"]["memory_store"], e["source"]["path"], e["target"]["memory_store"], e["target"]["path"])
        for e in lineage["edges"]
    ] == [("rn_hist.crew.notes", "/raw.md", "rn_hist.crew.derived", "/city.md")]
    down = ok(
        client.get(
            f"{UC}/system/lineage",
            headers=token(),
            params={"securable_full_name": "rn_hist.crew.notes", "direction": "downstream"},
        )
    )
    assert [e["target"]["memory_store"] for e in down["edges"]] == ["rn_hist.crew.derived"]
    r = client.get(
        f"{UC}/system/lineage", headers=token(), params={"securable_full_name": "rn_hist.team.derived"}
    )
    assert r.status_code == 404


def _read_reason(client, token, store: str, who: str) -> str:  # type: ignore[no-untyped-def]
    """The reason the audit event of `who`'s last read of the store gives."""
    (*_, last) = events(
        client, token, securable_full_name=store, principal=who, action_name="memory_store.get"
    )
    return str(last["reason"])


def test_decisions_cached_before_a_rename_never_name_the_old_object(client, token):
    """The authorizer caches decisions by ids and owners, and a decision's reason names the chain:
    after a rename, a read decides again and its audit event names the new full name."""
    tree(client, token, "rn_cache")
    reader(client, token, "rn_cache", "team", "notes", "cora")
    ok(client.get(f"{UC}/memory-stores/rn_cache.team.notes", headers=token("cora")))
    assert _read_reason(client, token, "rn_cache.team.notes", "cora") == (
        "READ_MEMORY_STORE on memory store rn_cache.team.notes"
    )
    ok(client.patch(f"{UC}/catalogs/rn_cache", headers=token(), json={"new_name": "rn_cached"}))
    ok(client.get(f"{UC}/memory-stores/rn_cached.team.notes", headers=token("cora")))
    assert _read_reason(client, token, "rn_cached.team.notes", "cora") == (
        "READ_MEMORY_STORE on memory store rn_cached.team.notes"
    )


def test_another_process_on_the_database_follows_a_rename(client, token, live):
    """A server process that decided on the old names (and cached that) answers the new names
    and not the old ones as soon as another process has renamed."""
    tree(client, token, "rn_live")
    reader(client, token, "rn_live", "team", "notes", "lena")
    write(client, token, "rn_live.team.notes", "/x.md", "Seen from another process")
    # the other process signs with the dev key of its own data dir
    lena, admin = (
        {"Authorization": f"Bearer {mint_dev_token(Settings(data_dir=live.data_dir), sub)}"}
        for sub in ("lena", "admin")
    )

    def get(path: str, headers: dict[str, str]) -> httpx.Response:
        return httpx.get(f"{live.url}{UC}/{path}", headers=headers, timeout=30)

    assert get("memory-stores/rn_live.team.notes", lena).status_code == 200
    assert get("memory-stores/rn_live.team.notes", admin).status_code == 200
    ok(client.patch(f"{UC}/catalogs/rn_live", headers=token(), json={"new_name": "rn_lived"}))
    ok(client.patch(f"{UC}/memory-stores/rn_lived.team.notes", headers=token(), json={"new_name": "kept"}))

    r = get("memory-stores/rn_lived.team.kept", lena)
    assert r.status_code == 200 and r.json()["full_name"] == "rn_lived.team.kept"
    assert _read_reason(client, token, "rn_lived.team.kept", "lena") == (
        "READ_MEMORY_STORE on memory store rn_lived.team.kept"
    )
    r = httpx.get(
        f"{live.url}{UC}/memory-stores/rn_lived.team.kept/entries:get",
        headers=lena,
        params={"scope": "u", "path": "/x.md"},
        timeout=30,
    )
    assert r.status_code == 200 and r.json()["contents"] == "Seen from another process"
    assert get("memory-stores/rn_live.team.notes", lena).status_code == 403
    assert get("memory-stores/rn_live.team.notes", admin).status_code == 404
    assert get("memory-stores/rn_lived.team.notes", admin).status_code == 404


def test_the_openapi_document_shows_new_name(client):
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    for name in ("CatalogUpdate", "SchemaUpdate", "MemoryStoreUpdate"):
        field = schemas[name]["properties"]["new_name"]
        assert "rename" in str(field) and "pattern" in str(field), (name, field)


def test_the_default_conversation_store_and_what_holds_it_are_not_renamed(database_url, tmp_path):
    from fake_embedder import HashEncoder
    from litestar.testing import TestClient

    from catalog.app import create_app

    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=database_url,
        admin="admin",
        default_conversation_store="rnd.team.convs",
    )
    headers = {"Authorization": f"Bearer {mint_dev_token(settings, 'admin')}"}
    with TestClient(create_app(settings, encoder=HashEncoder()), raise_server_exceptions=False) as client:
        tree(client, lambda: headers, "rnd", store="convs")
        for path in ["catalogs/rnd", "schemas/rnd.team", "memory-stores/rnd.team.convs"]:
            r = client.patch(f"{UC}/{path}", headers=headers, json={"new_name": "moved"})
            assert r.status_code == 400, r.text
            err = r.json()
            assert err["details"][0]["field"] == "new_name", err
            assert "CATALOG_DEFAULT_CONVERSATION_STORE" in err["message"], err
        # a sibling store of the same schema may be renamed
        body = {"name": "other", "catalog_name": "rnd", "schema_name": "team"}
        ok(client.post(f"{UC}/memory-stores", headers=headers, json=body))
        r = client.patch(f"{UC}/memory-stores/rnd.team.other", headers=headers, json={"new_name": "other2"})
        assert ok(r)["full_name"] == "rnd.team.other2"
