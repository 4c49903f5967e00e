"""Hardened inputs: each case here was once a 500 or an accepted request that should have been
refused (found by fuzzing the API over its OpenAPI document, and by hand)."""

from __future__ import annotations

import base64
import json

import pytest
from fake_embedder import HashEncoder
from litestar.testing import TestClient
from rest import UC

from catalog.app import create_app
from catalog.wire.inputs import MAX_JSON_DEPTH

AGENTS = "/api/2.0/agents/memory-stores"
SCIM = "/api/2.0/preview/scim/v2/Groups"
STORE = f"{UC}/memory-stores/inp.s.m"


@pytest.fixture(scope="module")
def world(client, token):
    """A catalog with two schemas, a store with entries in two scopes, agents stores, a group."""
    for path, body in [
        (f"{UC}/catalogs", {"name": "inp"}),
        (f"{UC}/schemas", {"name": "s", "catalog_name": "inp"}),
        (f"{UC}/schemas", {"name": "t", "catalog_name": "inp"}),
        (f"{UC}/memory-stores", {"name": "m", "catalog_name": "inp", "schema_name": "s"}),
        (f"{UC}/memory-stores", {"name": "n", "catalog_name": "inp", "schema_name": "s"}),
    ]:
        assert client.post(path, headers=token(), json=body).status_code == 200
    for i in range(8):
        assert (
            client.post(f"{UC}/catalogs", headers=token(), json={"name": f"inp_page_{i}"}).status_code == 200
        )
        for scope in ("u", "v"):
            r = client.post(
                f"{STORE}/entries", headers=token(), params={"scope": scope}, json={"path": f"/e{i}.md"}
            )
            assert r.status_code == 200, r.text
        for name in (f"inp-agent-{i}",):
            r = client.post(AGENTS, headers=token(), params={"managed_memory_store_id": name}, json={})
            assert r.status_code == 200, r.text
    r = client.post(SCIM, headers=token(), json={"displayName": "inp_group"})
    assert r.status_code == 200, r.text
    return {"group_id": r.json()["id"]}


def assert_400(r, field: str | None = None, text: str | None = None) -> None:
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["error_code"] == "INVALID_PARAMETER_VALUE", body
    if field is not None:
        assert f"`{field}`" in body["message"] or field in body["message"], body
        assert body["details"] and body["details"][0]["field"] == field, body
    if text is not None:
        assert text in body["message"], body


# --- JSON nested too deep ------------------------------------------------------------------------------


def _nested(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


@pytest.mark.parametrize(
    ("method", "path", "make"),
    [
        ("POST", f"{STORE}/entries?scope=u", lambda deep: f'{{"path": "/d.md", "contents": {deep}}}'),
        ("POST", f"{STORE}/entries?scope=u", lambda deep: f'{{"path": "/d.md", "derived_from": {deep}}}'),
        ("POST", f"{STORE}/entries:search", lambda deep: f'{{"scope": "u", "query": {deep}}}'),
        ("PATCH", f"{UC}/permissions/catalog/inp", lambda deep: f'{{"changes": {deep}}}'),
        ("PATCH", f"{SCIM}/GROUP", lambda deep: f'{{"Operations": [{{"op": "add", "value": {deep}}}]}}'),
    ],
)
def test_json_nested_deeper_than_the_limit_is_400_naming_the_limit(client, token, world, method, path, make):
    for depth in (MAX_JSON_DEPTH + 1, 1000, 100_000):
        r = client.request(
            method,
            path.replace("GROUP", world["group_id"]),
            headers={**token(), "Content-Type": "application/json"},
            content=make(_nested(depth)).encode(),
        )
        assert_400(r, text=f"JSON nested deeper than {MAX_JSON_DEPTH} levels")


def test_brackets_inside_strings_do_not_count_as_nesting(client, token, world):
    contents = "[" * 5000 + "{" * 5000 + '"\\"[' * 100
    r = client.post(
        f"{STORE}/entries",
        headers=token(),
        params={"scope": "u"},
        json={"path": "/b.md", "contents": contents},
    )
    assert r.status_code == 200, r.text
    assert r.json()["contents"] == contents


# --- page tokens ---------------------------------------------------------------------------------------


def _token(client, token, url, params, key="next_page_token"):
    body = client.get(url, headers=token(), params=params).json()
    assert body.get(key), body
    return body[key]


LISTS = [
    (f"{UC}/catalogs", {"max_results": 2}),
    (f"{UC}/schemas", {"catalog_name": "inp", "max_results": 1}),
    (f"{UC}/memory-stores", {"catalog_name": "inp", "schema_name": "s", "max_results": 1}),
    (f"{STORE}/entries", {"scope": "u", "page_size": 2}),
    (f"{UC}/system/audit", {"page_size": 2}),
    (AGENTS, {"page_size": 2}),
    (f"{AGENTS}/inp-agent-0/entries", {"actor_id": "u", "page_size": 1}),
]


def _forged(last) -> str:
    """The old, unsigned layout: base64 JSON of the last key."""
    return base64.urlsafe_b64encode(json.dumps({"k": last}).encode()).decode().rstrip("=")


@pytest.mark.parametrize(("url", "params"), LISTS, ids=[url.rsplit("/", 2)[-1] for url, _ in LISTS])
def test_forged_malformed_or_altered_page_tokens_are_400(client, token, world, url, params):
    if "inp-agent-0/entries" in url:
        for i in range(3):
            body = {"actor_id": "u", "path": f"/a{i}.md", "content": "x"}
            assert client.post(f"{AGENTS}/inp-agent-0/entries", headers=token(), json=body).status_code == 200
    good = _token(client, token, url, params)
    assert client.get(url, headers=token(), params={**params, "page_token": good}).status_code == 200
    payload, mac = good.split(".")
    altered_payload = _forged(["zzz", "u", ""]) if "entries" in url else _forged("zzz")
    flipped = mac[:-1] + ("A" if mac[-1] != "A" else "B")
    for bad in [
        _forged("inp"),  # unsigned, as tokens used to be
        _forged(10**30),  # a key PostgreSQL cannot compare with
        _forged({"k": [[[[]]]]}),
        "!!nope",
        "a.b",
        f"{altered_payload}.{mac}",
        f"{payload}.{flipped}",
        good + "x",
        "x" * 20000,
    ]:
        r = client.get(url, headers=token(), params={**params, "page_token": bad})
        assert_400(r, "page_token")


def test_a_page_token_is_good_only_for_its_list_and_filters(client, token, world):
    catalogs = _token(client, token, f"{UC}/catalogs", {"max_results": 2})
    schemas = _token(client, token, f"{UC}/schemas", {"catalog_name": "inp", "max_results": 1})
    r = client.get(f"{UC}/schemas", headers=token(), params={"catalog_name": "inp", "page_token": catalogs})
    assert_400(r, "page_token")  # another list
    r = client.get(f"{UC}/catalogs", headers=token(), params={"page_token": schemas})
    assert_400(r, "page_token")
    in_u = _token(client, token, f"{STORE}/entries", {"scope": "u", "page_size": 2})
    assert (
        client.get(f"{STORE}/entries", headers=token(), params={"scope": "u", "page_token": in_u}).status_code
        == 200
    )
    for other in [{"scope": "v"}, {"scope": "u", "path_prefix": "/e"}, {"scopes": ["u", "v"]}]:
        r = client.get(f"{STORE}/entries", headers=token(), params={**other, "page_token": in_u})
        assert_400(r, "page_token")  # the same list with other filters
    r = client.get(
        f"{UC}/memory-stores/inp.s.n/entries", headers=token(), params={"scope": "u", "page_token": in_u}
    )
    assert_400(r, "page_token")  # another store
    audit = _token(client, token, f"{UC}/system/audit", {"page_size": 2, "order": "asc"})
    r = client.get(f"{UC}/system/audit", headers=token(), params={"page_size": 2, "page_token": audit})
    assert_400(r, "page_token")  # the order is a filter: the key means something else


def test_page_tokens_are_good_on_every_server_of_the_database(client, token, settings, world):
    """The key is kept in PostgreSQL (migration 0010): another process on the same database
    accepts a token this one issued."""
    first = _token(client, token, f"{UC}/catalogs", {"max_results": 2})
    with TestClient(create_app(settings, encoder=HashEncoder()), raise_server_exceptions=False) as other:
        r = other.get(f"{UC}/catalogs", headers=token(), params={"max_results": 2, "page_token": first})
        assert r.status_code == 200, r.text
        second = client.get(f"{UC}/catalogs", headers=token(), params={"max_results": 2, "page_token": first})
        assert r.json() == second.json()


# --- integers ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("url", [f"{UC}/system/audit", f"{UC}/system/lineage/openlineage"])
@pytest.mark.parametrize("field", ["start_time", "end_time"])
def test_times_out_of_range_are_400_before_postgresql(client, token, world, url, field):
    for value in (10**30, 10**16, -1):
        assert_400(client.get(url, headers=token(), params={field: value}), field)
    assert client.get(url, headers=token(), params={field: 253402300799999}).status_code == 200


@pytest.mark.parametrize(
    ("url", "field", "params"),
    [
        (f"{UC}/catalogs", "max_results", {}),
        (f"{STORE}/entries", "page_size", {"scope": "u"}),
        (f"{UC}/system/audit", "page_size", {}),
        (AGENTS, "page_size", {}),
        (f"{UC}/system/audit", "status_code", {}),
        (SCIM, "count", {}),
        (SCIM, "startIndex", {}),
    ],
)
def test_integer_parameters_are_decimal_digits_within_bounds(client, token, world, url, field, params):
    for value in (
        "1e3",
        "10.0",
        "0x10",
        "1_000",
        " 5",
        "+5",
        "99999999999999999999999",
        "-99999999999999999999",
    ):
        r = client.get(url, headers=token(), params={**params, field: value})
        assert_400(r, field if value not in (" 5",) else None)
        assert field in r.json()["message"]


def test_if_match_beyond_a_version_is_400_not_500(client, token, world):
    for value in ('"' + "9" * 30 + '"', "9" * 30, '"1" junk', "W/1"):
        r = client.delete(
            f"{STORE}/entries",
            headers={**token(), "If-Match": value},
            params={"scope": "u", "path": "/e0.md"},
        )
        assert_400(r, "If-Match")


def test_lineage_depth_is_1_to_10(client, token, world):
    url = f"{UC}/system/lineage"
    for depth in (0, -1, 11, 10**30):
        assert_400(
            client.get(url, headers=token(), params={"securable_full_name": "inp.s.m", "depth": depth}),
            "depth",
        )
    r = client.get(url, headers=token(), params={"securable_full_name": "inp.s.m", "depth": 1})
    assert r.status_code == 200 and r.json()["edges"] == []


# --- strict types --------------------------------------------------------------------------------------


def test_a_string_for_a_number_is_400_naming_the_field(client, token, world):
    r = client.post(
        f"{STORE}/entries:search", headers=token(), json={"scope": "u", "query": "x", "top_k": "10"}
    )
    assert_400(r, "top_k")
    r = client.post(
        f"{AGENTS}/inp-agent-0/entries:search",
        headers=token(),
        json={"actor_id": "u", "query": "x", "limit": "3"},
    )
    assert_400(r, "limit")
    edit = {"scope": "u", "path": "/e1.md", "insert": {"insert_text": "x", "insert_line": "0"}}
    assert_400(client.patch(f"{STORE}/entries", headers=token(), json=edit), "insert.insert_line")
    r = client.post(f"{UC}/catalogs", headers=token(), json={"name": 5})
    assert_400(r, "name")
    r = client.post(
        f"{STORE}/entries:search", headers=token(), json={"scope": "u", "query": "x", "top_k": 2.5}
    )
    assert_400(r, "top_k")
    r = client.post(
        f"{STORE}/entries:search", headers=token(), json={"scope": "u", "query": "x", "top_k": True}
    )
    assert_400(r, "top_k")


def test_a_whole_number_written_with_a_fraction_is_an_integer(client, token, world):
    """JSON Schema counts 10.0 and 1e1 as integers, and so does the API."""
    for top_k in ("10.0", "1e1"):
        r = client.post(
            f"{STORE}/entries:search",
            headers={**token(), "Content-Type": "application/json"},
            content=f'{{"scope": "u", "query": "e", "top_k": {top_k}}}'.encode(),
        )
        assert r.status_code == 200, r.text


def test_nul_in_a_search_query_is_400_naming_query(client, token, world):
    r = client.post(f"{STORE}/entries:search", headers=token(), json={"scope": "u", "query": "a\u0000b"})
    assert_400(r, "query", "NUL")
    r = client.post(
        f"{AGENTS}/inp-agent-0/entries:search", headers=token(), json={"actor_id": "u", "query": "\u0000"}
    )
    assert_400(r, "query", "NUL")
    r = client.post(f"{UC}/catalogs", headers=token(), json={"name": "x", "properties": {"k\u0000": "v"}})
    assert_400(r, "properties.k\ufffd", "NUL")


# --- lineage sources -----------------------------------------------------------------------------------


def test_derived_from_a_missing_store_is_400_naming_the_source(client, token, world):
    sources = [
        {"memory_store": "inp.s.m", "scope": "u", "path": "/e0.md"},
        {"memory_store": "inp.s.gone", "scope": "u", "path": "/e0.md"},
    ]
    r = client.post(
        f"{STORE}/entries",
        headers=token(),
        params={"scope": "u"},
        json={"path": "/derived.md", "derived_from": sources},
    )
    assert_400(r, "derived_from[1]")
    sources[1]["memory_store"] = "nope.s.m"  # the catalog is missing too
    r = client.post(
        f"{STORE}/entries",
        headers=token(),
        params={"scope": "u"},
        json={"path": "/derived.md", "derived_from": sources},
    )
    assert_400(r, "derived_from[1]")
    sources[1]["memory_store"] = "not-a-full-name"
    r = client.post(
        f"{STORE}/entries",
        headers=token(),
        params={"scope": "u"},
        json={"path": "/derived.md", "derived_from": sources},
    )
    assert_400(r, "derived_from[1].memory_store")
    r = client.get(f"{STORE}/entries:get", headers=token(), params={"scope": "u", "path": "/derived.md"})
    assert r.status_code == 404  # nothing was written


# --- every error is JSON -------------------------------------------------------------------------------


def test_an_undocumented_method_is_405_json_naming_the_allowed_ones(client, token, world):
    r = client.put(f"{UC}/catalogs", headers=token(), json={})
    assert r.status_code == 405 and set(r.json()) == {"error_code", "message", "details"}
    assert set(r.headers["allow"].replace(" ", "").split(",")) == {"GET", "POST", "OPTIONS"}


def test_options_names_every_method_of_the_path(client, token, world):
    """Litestar 2 would answer only the first method registered on a path (catalog/web/routing.py)."""
    for path, methods in [
        (f"{UC}/catalogs", {"GET", "POST"}),
        (f"{UC}/catalogs/inp", {"GET", "PATCH", "DELETE"}),
        (f"{STORE}/entries", {"GET", "POST", "PATCH", "DELETE"}),
        (f"{SCIM}/{world['group_id']}", {"GET", "PATCH", "DELETE"}),
    ]:
        r = client.options(path, headers=token())
        assert set(r.headers["allow"].replace(" ", "").split(",")) == methods | {"OPTIONS"}, path


@pytest.mark.parametrize(
    ("method", "url", "kwargs"),
    [
        ("GET", f"{UC}/catalogs/inp", {"params": {"x": "\u0000"}}),
        ("POST", f"{UC}/catalogs", {"content": b"{not json"}),
        ("POST", f"{UC}/catalogs", {"content": b"\xff\xfe"}),
        ("POST", f"{UC}/catalogs", {"content": b"[1, 2]"}),
        ("POST", f"{UC}/catalogs", {"content": b'"just a string"'}),
        ("PATCH", f"{SCIM}/not-a-uuid", {"json": {"Operations": [{"op": "add", "value": "x"}]}}),
        ("GET", f"{UC}/schemas/a.b.c", {}),
        ("GET", f"{UC}/permissions/table/inp", {}),
    ],
)
def test_malformed_requests_answer_the_json_error_body(client, token, world, method, url, kwargs):
    r = client.request(method, url, headers={**token(), "Content-Type": "application/json"}, **kwargs)
    assert 400 <= r.status_code < 500, r.text
    assert set(r.json()) == {"error_code", "message", "details"}


# --- the wire types and the routers --------------------------------------------------------------------


def _handlers(app):
    for route in app.routes:
        for handler in getattr(route, "route_handlers", []):
            if handler.include_in_schema and "OPTIONS" not in handler.http_methods:
                yield handler


def _structs(annotation, found):
    import typing

    import msgspec

    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        if annotation in found:
            return
        found.add(annotation)
        for field in msgspec.structs.fields(annotation):
            _structs(field.type, found)
    for arg in typing.get_args(annotation):
        _structs(arg, found)


def test_every_request_body_forbids_unknown_fields_at_every_level(settings):
    app = create_app(settings, encoder=HashEncoder())
    bodies: set[type] = set()
    for handler in _handlers(app):
        if (data := handler.parsed_fn_signature.parameters.get("data")) is not None:
            _structs(data.annotation, bodies)
    assert len(bodies) > 20
    assert [b.__name__ for b in bodies if not b.__struct_config__.forbid_unknown_fields] == []


def test_wire_type_names_are_unique_so_the_document_names_each_once(settings):
    """catalog/web/openapi.py keys the component schemas by class name."""
    app = create_app(settings, encoder=HashEncoder())
    found: set[type] = set()
    for handler in _handlers(app):
        signature = handler.parsed_fn_signature
        _structs(signature.return_type.annotation, found)
        if (data := signature.parameters.get("data")) is not None:
            _structs(data.annotation, found)
    names = [t.__name__ for t in found]
    assert sorted(names) == sorted(set(names))
    document = app.openapi_schema.to_schema()
    assert set(names) <= set(document["components"]["schemas"])


def test_every_api_route_goes_through_the_request_gate(settings):
    from catalog.wire.inputs import check_request

    app = create_app(settings, encoder=HashEncoder())
    api = [
        (route.path, handler)
        for route in app.routes
        if route.path.startswith("/api/")
        for handler in getattr(route, "route_handlers", [])
    ]
    assert len(api) > 48  # every operation, and OPTIONS for each path
    assert [path for path, handler in api if handler.resolve_before_request() is not check_request] == []


@pytest.mark.parametrize("scope", [" ", "\u3000", "\t "])
def test_a_blank_scope_is_refused_naming_the_field(client, token, world, scope):
    """A scope of only whitespace names no one: 400 naming the field, and nothing written (a token's
    end user is held to the same rule, so no surface could reach such a scope)."""
    r = client.post(f"{STORE}/entries", headers=token(), params={"scope": scope}, json={"path": "/blank.md"})
    assert r.status_code == 400, r.text
    assert r.json()["details"][0]["field"] == "scope" and "blank" in r.json()["message"], r.json()
    r = client.post(f"{STORE}/entries:search", headers=token(), json={"scope": scope, "query": "blank"})
    assert r.status_code == 400 and r.json()["details"][0]["field"] == "scope", r.text
