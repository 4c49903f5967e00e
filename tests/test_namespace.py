"""The namespace API over HTTP: catalogs, schemas, memory stores, bootstrap, pagination,
ownership, refusals."""

from __future__ import annotations

import time

import pytest
from rest import UC


def ok(r):  # type: ignore[no-untyped-def]
    """The answer of a request that must succeed."""
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def known_store(client, token) -> str:  # type: ignore[no-untyped-def]
    """`main.default.known`: a store that exists, granted to nobody."""
    body = {"name": "known", "catalog_name": "main", "schema_name": "default"}
    return str(ok(client.post(f"{UC}/memory-stores", headers=token(), json=body))["full_name"])


def test_bootstrap_creates_main_and_default_owned_by_admin(client, token):
    main = client.get(f"{UC}/catalogs/main", headers=token()).json()
    assert main["owner"] == "admin" and main["full_name"] == "main"
    default = client.get(f"{UC}/schemas/main.default", headers=token()).json()
    assert default["owner"] == "admin"
    assert default["catalog_name"] == "main" and default["full_name"] == "main.default"


def test_metastore_summary_has_an_id(client, token):
    body = client.get(f"{UC}/metastore_summary", headers=token("someone")).json()
    assert len(body["metastore_id"]) == 36
    assert body["owner"] == "admin"


def test_seed_flow_creates_a_memory_store(client, token):
    before = int(time.time() * 1000)
    r = client.post(
        f"{UC}/memory-stores",
        headers=token(),
        content=b'{"name":"Support_Agent_Memory","catalog_name":"main","schema_name":"default",'
        b'"description":"what the support agent learned"}',
    )
    assert r.status_code == 200, r.text
    store = r.json()
    assert store["name"] == "support_agent_memory"
    assert store["full_name"] == "main.default.support_agent_memory"
    assert store["owner"] == store["created_by"] == store["updated_by"] == "admin"
    assert store["created_at"] >= before - 1000 and store["updated_at"] == store["created_at"]
    assert len(store["memory_store_id"]) == 36
    got = client.get(f"{UC}/memory-stores/MAIN.Default.support_agent_memory", headers=token()).json()
    assert got == store


def test_catalog_crud_and_owner_transfer(client, token):
    r = client.post(
        f"{UC}/catalogs", headers=token(), json={"name": "Corp", "comment": "c", "properties": {"a": "1"}}
    )
    assert r.status_code == 200, r.text
    created = r.json()
    assert created["name"] == "corp" and created["properties"] == {"a": "1"}
    time.sleep(0.005)
    r = client.patch(f"{UC}/catalogs/corp", headers=token(), json={"comment": "new", "owner": "alice"})
    assert r.status_code == 200, r.text
    updated = r.json()
    assert updated["comment"] == "new" and updated["owner"] == "alice"
    assert updated["properties"] == {"a": "1"}
    assert updated["updated_at"] > created["updated_at"] and updated["created_at"] == created["created_at"]
    # the new owner may now change it and create schemas in it; a stranger may not
    assert client.get(f"{UC}/catalogs/corp", headers=token("alice")).status_code == 200
    r = client.post(f"{UC}/schemas", headers=token("alice"), json={"name": "support", "catalog_name": "corp"})
    assert r.status_code == 200 and r.json()["owner"] == "alice"
    assert client.get(f"{UC}/catalogs/corp", headers=token("bob")).status_code == 403
    r = client.patch(f"{UC}/catalogs/corp", headers=token("alice"), json={"owner": "bob"})
    assert r.json()["updated_by"] == "alice" and r.json()["owner"] == "bob"
    assert (
        client.patch(f"{UC}/catalogs/corp", headers=token("alice"), json={"comment": "x"}).status_code == 403
    )


def test_duplicates_are_already_exists_case_insensitively(client, token):
    ok(client.post(f"{UC}/catalogs", headers=token(), json={"name": "dup"}))
    r = client.post(f"{UC}/catalogs", headers=token(), json={"name": "DUP"})
    assert r.status_code == 409 and r.json()["error_code"] == "ALREADY_EXISTS"
    ok(client.post(f"{UC}/schemas", headers=token(), json={"name": "s", "catalog_name": "dup"}))
    r = client.post(f"{UC}/schemas", headers=token(), json={"name": "S", "catalog_name": "dup"})
    assert r.status_code == 409
    body = {"name": "m", "catalog_name": "dup", "schema_name": "s"}
    assert client.post(f"{UC}/memory-stores", headers=token(), json=body).status_code == 200
    assert (
        client.post(f"{UC}/memory-stores", headers=token(), json=body).json()["error_code"]
        == "ALREADY_EXISTS"
    )


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("catalogs", {"name": "bad name"}, "name"),
        ("catalogs", {"name": ""}, "name"),
        ("catalogs", {"name": "x" * 256}, "name"),
        ("catalogs", {"name": "a.b"}, "name"),
        ("schemas", {"name": "ok", "catalog_name": "no/pe"}, "catalog_name"),
        ("memory-stores", {"name": "ok", "catalog_name": "main", "schema_name": "de fault"}, "schema_name"),
    ],
)
def test_invalid_names_and_sizes_name_the_field(client, token, path, body, field):
    r = client.post(f"{UC}/{path}", headers=token(), json=body)
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["error_code"] == "INVALID_PARAMETER_VALUE"
    assert field in err["message"]
    assert err["details"][0]["field"] == field


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("catalogs", {"name": "long_comment", "comment": "x" * 5000}, "comment"),
        ("catalogs", {"name": "long_property", "properties": {"k": "x" * 5000}}, "properties.k"),
    ],
)
def test_text_over_its_limit_is_413_naming_the_field(client, token, path, body, field):
    r = client.post(f"{UC}/{path}", headers=token(), json=body)
    assert r.status_code == 413, r.text
    assert r.json()["error_code"] == "PAYLOAD_TOO_LARGE" and r.json()["details"][0]["field"] == field


@pytest.mark.parametrize("field", ["owner", "created_by", "id", "created_at", "full_name"])
def test_unknown_fields_are_refused_no_mass_assignment(client, token, field):
    r = client.post(f"{UC}/catalogs", headers=token(), json={"name": f"mass_{field}", field: "mallory"})
    assert r.status_code == 400
    assert field in r.json()["message"]
    assert client.get(f"{UC}/catalogs/mass_{field}", headers=token()).status_code == 404


def test_wrong_types_and_malformed_json_are_400(client, token):
    r = client.post(f"{UC}/catalogs", headers=token(), json={"name": 5})
    assert r.status_code == 400 and "name" in r.json()["message"]
    r = client.post(f"{UC}/catalogs", headers=token(), content=b"{not json")
    assert r.status_code == 400 and r.json()["error_code"] == "INVALID_PARAMETER_VALUE"


def test_pagination_is_stable_and_clamped(client, token):
    # a principal of its own, who sees exactly its own catalogs and main: the counts are exact
    ms = ok(client.get(f"{UC}/metastore_summary", headers=token()))["metastore_id"]
    ok(
        client.patch(
            f"{UC}/permissions/metastore/{ms}",
            headers=token(),
            json={"changes": [{"principal": "pager", "add": ["CREATE_CATALOG"]}]},
        )
    )
    made = [f"page{i:02d}" for i in range(24)]
    for name in made:
        ok(client.post(f"{UC}/catalogs", headers=token("pager"), json={"name": name}))
    visible = sorted([*made, "main"])
    seen: list[str] = []
    page_token = None
    pages = 0
    while True:
        params = {"max_results": 4, **({"page_token": page_token} if page_token else {})}
        body = ok(client.get(f"{UC}/catalogs", headers=token("pager"), params=params))
        seen += [c["name"] for c in body["catalogs"]]
        pages += 1
        page_token = body.get("next_page_token")
        if not page_token:
            break
    assert seen == visible and pages == 7  # in order, each once, full pages but the last
    # absent or 0 = the default (5 in these tests); above the cap (20) = the cap
    for params in ({"max_results": 0}, {}):
        body = ok(client.get(f"{UC}/catalogs", headers=token("pager"), params=params))
        assert [c["name"] for c in body["catalogs"]] == visible[:5] and body["next_page_token"]
    body = ok(client.get(f"{UC}/catalogs", headers=token("pager"), params={"max_results": 999}))
    assert [c["name"] for c in body["catalogs"]] == visible[:20] and body["next_page_token"]
    r = client.get(f"{UC}/catalogs", headers=token(), params={"max_results": -1})
    assert r.status_code == 400 and "max_results" in r.json()["message"]
    r = client.get(f"{UC}/catalogs", headers=token(), params={"page_token": "!!nope"})
    assert r.status_code == 400 and "page_token" in r.json()["message"]


def test_last_page_has_no_token(client, token):
    ok(client.post(f"{UC}/catalogs", headers=token(), json={"name": "lasts"}))
    ok(client.patch(f"{UC}/catalogs/lasts", headers=token(), json={"owner": "last"}))
    body = ok(client.get(f"{UC}/catalogs", headers=token("last"), params={"max_results": 1}))
    assert [c["name"] for c in body["catalogs"]] == ["lasts"] and body["next_page_token"]
    body = ok(
        client.get(
            f"{UC}/catalogs",
            headers=token("last"),
            params={"max_results": 1, "page_token": body["next_page_token"]},
        )
    )
    assert [c["name"] for c in body["catalogs"]] == ["main"] and "next_page_token" not in body
    body = ok(client.get(f"{UC}/catalogs", headers=token("last"), params={"max_results": 2}))
    assert [c["name"] for c in body["catalogs"]] == ["lasts", "main"] and "next_page_token" not in body


def test_lists_show_only_what_the_caller_may_see(client, token):
    ok(client.post(f"{UC}/catalogs", headers=token(), json={"name": "carols"}))
    ok(client.patch(f"{UC}/catalogs/carols", headers=token(), json={"owner": "carol"}))
    names = [c["name"] for c in client.get(f"{UC}/catalogs", headers=token("carol")).json()["catalogs"]]
    assert names == ["carols", "main"]  # main: account users may use it (bootstrap)
    assert [c["name"] for c in client.get(f"{UC}/catalogs", headers=token("nobody")).json()["catalogs"]] == [
        "main"
    ]


def test_schema_and_store_lists_require_their_parent_names(client, token, known_store):
    r = client.get(f"{UC}/schemas", headers=token())
    assert r.status_code == 400 and "catalog_name" in r.json()["message"]
    r = client.get(f"{UC}/memory-stores", headers=token(), params={"catalog_name": "main"})
    assert r.status_code == 400 and "schema_name" in r.json()["message"]
    names, params = [], {"catalog_name": "main", "schema_name": "default"}
    while True:  # every page: the module's other tests add stores of their own
        body = ok(client.get(f"{UC}/memory-stores", headers=token(), params=params))
        names += [m["name"] for m in body["memory_stores"]]
        if "next_page_token" not in body:
            break
        params["page_token"] = body["next_page_token"]
    assert "known" in names


def test_no_existence_leak_without_use_on_the_parent(client, token, known_store):
    ok(client.post(f"{UC}/catalogs", headers=token(), json={"name": "hidden"}))
    ok(client.post(f"{UC}/schemas", headers=token(), json={"name": "s", "catalog_name": "hidden"}))
    ok(
        client.post(
            f"{UC}/memory-stores",
            headers=token(),
            json={"name": "m", "catalog_name": "hidden", "schema_name": "s"},
        )
    )
    # (a catalog's only parent is the metastore: a missing catalog is 404 for everyone)
    assert client.get(f"{UC}/catalogs/does_not_exist", headers=token("stranger")).status_code == 404
    # a stranger gets 403 whether or not the object exists
    for path in [
        "catalogs/hidden",
        "schemas/hidden.s",
        "schemas/hidden.nope",
        "schemas/nope.nope",
        "memory-stores/hidden.s.m",
        "memory-stores/hidden.s.nope",
        "memory-stores/hidden.nope.m",
        "memory-stores/nope.nope.nope",
        f"memory-stores/{known_store}",
    ]:
        r = client.get(f"{UC}/{path}", headers=token("stranger"))
        assert r.status_code == 403, (path, r.text)
        assert r.json()["error_code"] == "PERMISSION_DENIED"
    # with USE on the parents (account users on main.default), a missing store is 404
    r = client.get(f"{UC}/memory-stores/main.default.nope", headers=token("stranger"))
    assert (r.status_code, r.json()["error_code"]) == (404, "NOT_FOUND")
    # the admin sees 404 for what does not exist: NOT_FOUND on a memory-store route (its parents
    # missing too), RESOURCE_DOES_NOT_EXIST for catalogs and schemas (docs/reference/errors.md)
    for path, code in [
        ("catalogs/does_not_exist", "RESOURCE_DOES_NOT_EXIST"),
        ("schemas/main.nope", "RESOURCE_DOES_NOT_EXIST"),
        ("memory-stores/main.default.nope", "NOT_FOUND"),
        ("memory-stores/nope.nope.nope", "NOT_FOUND"),
    ]:
        r = client.get(f"{UC}/{path}", headers=token())
        assert (r.status_code, r.json()["error_code"]) == (404, code), path


def test_permission_denied_says_what_is_missing(client, token):
    r = client.post(f"{UC}/catalogs", headers=token("eve"), json={"name": "eves"})
    assert r.status_code == 403
    assert "CREATE_CATALOG" in r.json()["message"]


def test_delete_refuses_non_empty_unless_forced(client, token):
    ok(client.post(f"{UC}/catalogs", headers=token(), json={"name": "gone"}))
    ok(client.post(f"{UC}/schemas", headers=token(), json={"name": "s1", "catalog_name": "gone"}))
    ok(
        client.post(
            f"{UC}/memory-stores",
            headers=token(),
            json={"name": "m1", "catalog_name": "gone", "schema_name": "s1"},
        )
    )
    r = client.delete(f"{UC}/schemas/gone.s1", headers=token())
    assert r.status_code == 400 and "not empty" in r.json()["message"]
    r = client.delete(f"{UC}/catalogs/gone", headers=token())
    assert r.status_code == 400 and "force" in r.json()["message"]
    r = client.delete(f"{UC}/catalogs/gone", headers=token(), params={"force": "true"})
    assert r.status_code == 200 and r.json() == {}
    assert client.get(f"{UC}/memory-stores/gone.s1.m1", headers=token()).status_code == 404
    assert client.get(f"{UC}/catalogs/gone", headers=token()).status_code == 404


def test_store_update_and_delete(client, token):
    ok(
        client.post(
            f"{UC}/memory-stores",
            headers=token(),
            json={"name": "tmp", "catalog_name": "main", "schema_name": "default"},
        )
    )
    r = client.patch(
        f"{UC}/memory-stores/main.default.tmp",
        headers=token(),
        json={"description": "d", "properties": {"k": "v"}},
    )
    assert r.status_code == 200 and r.json()["description"] == "d" and r.json()["properties"] == {"k": "v"}
    r = client.patch(f"{UC}/memory-stores/main.default.tmp", headers=token(), json={"owner": ""})
    assert r.status_code == 400 and "owner" in r.json()["message"]
    assert client.delete(f"{UC}/memory-stores/main.default.tmp", headers=token()).json() == {}
    r = client.delete(f"{UC}/memory-stores/main.default.tmp", headers=token())
    assert (r.status_code, r.json()["error_code"]) == (404, "NOT_FOUND")
    r = client.patch(f"{UC}/memory-stores/main.default.tmp", headers=token(), json={"description": "d"})
    assert (r.status_code, r.json()["error_code"]) == (404, "NOT_FOUND")


def test_a_stores_details_are_its_row_as_every_other_read_shows_it(client, token):
    """A store's details (read with its chain, as JSON) match what its update answers and what
    its schema's list shows (read by the namespace's own statement), column for column."""
    body = {"name": "every_column", "catalog_name": "main", "schema_name": "default"}
    ok(client.post(f"{UC}/memory-stores", headers=token(), json=body))
    time.sleep(0.002)  # an update a few milliseconds later: updated_at differs from created_at
    changed = ok(
        client.patch(
            f"{UC}/memory-stores/main.default.every_column",
            headers=token(),
            json={
                "description": 'every column set: ünïcode, "quotes"',
                "properties": {"team": "support", "tier": "1"},
                "scope_binding": "end_user",
                "shared_scopes": ["team:a", "tenant:b"],
                "legal_hold": True,
                "default_ttl_seconds": 86_400,
            },
        )
    )
    details = ok(client.get(f"{UC}/memory-stores/main.default.every_column", headers=token()))
    where = {"catalog_name": "main", "schema_name": "default"}
    listed = ok(client.get(f"{UC}/memory-stores", headers=token(), params=where))
    [in_list] = [m for m in listed["memory_stores"] if m["name"] == "every_column"]
    assert details == changed == in_list
    assert details["updated_at"] > details["created_at"]
    assert (details["legal_hold"], details["default_ttl_seconds"]) == (True, 86_400)
    assert details["properties"] == {"team": "support", "tier": "1"}
    store = f"{UC}/memory-stores/main.default.every_column"
    ok(client.patch(store, headers=token(), json={"legal_hold": False}))
    assert client.delete(store, headers=token()).status_code == 200


def test_times_read_as_json_round_to_the_millisecond_as_the_sql_reads_them(database_url):
    """`store_of_row` reads a timestamptz from its JSON text (in whatever time zone the session
    writes it) to the same epoch millisecond as the namespace's statements compute: half a
    millisecond rounds away from zero, before 1970 too."""
    import asyncio

    import asyncpg

    from catalog.governance.namespace.repo import _epoch_ms

    times = [
        "2026-12-05 19:00:00.000500+00",
        "2026-12-05 19:00:00.000499+00",
        "2026-12-05 19:00:00.999500+00",
        "2026-12-05 19:00:00.123456+00",
        "2026-12-05 19:00:00+00",
        "1969-12-31 23:59:59.998500+00",
        "1969-12-31 23:59:59.998501+00",
        "1901-03-04 05:06:07.000001+00",
    ]

    async def read() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(database_url)
        try:
            await conn.execute("SET TIME ZONE 'Asia/Kolkata'")  # a half-hour offset in the JSON text
            return await conn.fetch(
                "SELECT to_jsonb(t)::text AS doc, (extract(epoch FROM t) * 1000)::bigint AS ms "
                "FROM unnest($1::text[]) AS u(x), LATERAL (SELECT x::timestamptz AS t) AS v",
                times,
            )
        finally:
            await conn.close()

    rows = asyncio.run(read())
    assert [_epoch_ms(row["doc"].strip('"')) for row in rows] == [row["ms"] for row in rows]
    assert rows[0]["ms"] % 1000 == 1 and rows[1]["ms"] % 1000 == 0  # the half rounded up, not down


def test_schema_update_and_empty_delete(client, token):
    ok(client.post(f"{UC}/schemas", headers=token(), json={"name": "tmp_schema", "catalog_name": "main"}))
    r = client.patch(f"{UC}/schemas/main.tmp_schema", headers=token(), json={"comment": "hello"})
    assert r.json()["comment"] == "hello"
    assert client.delete(f"{UC}/schemas/main.tmp_schema", headers=token()).status_code == 200
    r = client.get(f"{UC}/schemas/main.tmp_schema.extra", headers=token())
    assert r.status_code == 400 and "full_name" in r.json()["message"]


def test_store_owner_may_act_without_use_on_parents(client, token, known_store):
    ok(
        client.post(
            f"{UC}/memory-stores",
            headers=token(),
            json={"name": "owned", "catalog_name": "main", "schema_name": "default"},
        )
    )
    ok(client.patch(f"{UC}/memory-stores/main.default.owned", headers=token(), json={"owner": "dave"}))
    assert client.get(f"{UC}/memory-stores/main.default.owned", headers=token("dave")).status_code == 200
    assert client.get(f"{UC}/memory-stores/{known_store}", headers=token("dave")).status_code == 403
