"""Operations and the error shape: health, OpenAPI, request ids, log lines, body limits."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any

import pytest
from rest import UC

from catalog.errors import (
    Aborted,
    AlreadyExists,
    CatalogError,
    InvalidParameter,
    NotFound,
    PayloadTooLarge,
    PermissionDenied,
    RequestLimitExceeded,
    TemporarilyUnavailable,
    Unauthenticated,
    error_body,
)
from catalog.web.middleware import JsonFormatter, RequestMiddleware


@pytest.mark.parametrize(
    ("error", "status", "code"),
    [
        (InvalidParameter("x"), 400, "INVALID_PARAMETER_VALUE"),
        (Unauthenticated("x"), 401, "UNAUTHENTICATED"),
        (PermissionDenied("x"), 403, "PERMISSION_DENIED"),
        (NotFound("x"), 404, "RESOURCE_DOES_NOT_EXIST"),
        (AlreadyExists("x"), 409, "ALREADY_EXISTS"),
        (Aborted("x"), 409, "ABORTED"),
        (PayloadTooLarge("x"), 413, "PAYLOAD_TOO_LARGE"),
        (RequestLimitExceeded("x"), 429, "REQUEST_LIMIT_EXCEEDED"),
        (TemporarilyUnavailable("x"), 503, "TEMPORARILY_UNAVAILABLE"),
        (CatalogError("x"), 500, "INTERNAL_ERROR"),
    ],
)
def test_error_codes_and_statuses_are_pinned(error, status, code):
    assert (error.status_code, error.error_code) == (status, code)
    assert error_body(error.error_code, "m") == {"error_code": code, "message": "m", "details": []}


def test_every_response_has_a_request_id(client, token):
    ids = set()
    for r in [
        client.get("/healthz"),
        client.get(f"{UC}/catalogs"),
        client.get(f"{UC}/catalogs", headers=token()),
        client.get("/nope"),
    ]:
        assert len(r.headers["x-request-id"]) == 32
        ids.add(r.headers["x-request-id"])
    assert len(ids) == 4


def test_openapi_is_3_1_and_lists_the_namespace_routes(client):
    doc = client.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    assert f"{UC}/memory-stores/{{full_name}}" in doc["paths"]
    assert "text/html" in client.get("/docs").headers["content-type"]


def test_the_api_explorer_loads_everything_from_the_server_itself(client):
    """/docs works without internet: every file the page names is this server's, answered 200
    without a token (Swagger UI's files come with the package swagger-ui-bundle-v2)."""
    page = client.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    named = re.findall(r"<(?:script|link|img)\b[^>]*\b(?:src|href)=\"([^\"]*)\"", page.text)
    assert {"/docs/assets/swagger-ui.css", "/docs/assets/swagger-ui-bundle.js"} <= set(named)
    assert [u for u in named if not u.startswith("/") or u.startswith("//")] == []
    types = {".css": "text/css", ".js": "text/javascript", ".ico": "image/svg+xml"}
    for url in named:
        r = client.get(url)
        assert r.status_code == 200, url
        assert r.headers["content-type"].startswith(types[url[url.rindex(".") :]]), url
    assert "SwaggerUIBundle(" in page.text and "validatorUrl: null" in page.text
    assert client.get("/docs/assets/nothing.js").status_code == 404


def test_openapi_describes_degraded_search_answers(client):
    """Every search answer may carry `degraded` (the legs that may have missed rows)."""
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    for name in (
        "SearchResponse",
        "AgentSearchResult",
        "ConversationSearchResponse",
        "SessionItemSearchResponse",
    ):
        degraded = schemas[name]["properties"]["degraded"]
        assert "incomplete" in degraded["description"], name
        assert "degraded" not in schemas[name].get("required", []), name
        items = next(option for option in degraded["anyOf"] if option.get("type") == "array")["items"]
        assert set(items["enum"]) == {"keyword", "semantic"}, name


def test_the_404_code_follows_the_route(client, token):
    """One rule (docs/reference/errors.md, "Not found"): a memory-store route answers a missing store or entry
    NOT_FOUND in both dialects, catalogs and schemas RESOURCE_DOES_NOT_EXIST; the OpenAPI document
    says which per route, and the audit event records the code answered."""
    agents = "/api/2.0/agents/memory-stores"
    for method, url, params, code in [
        ("GET", f"{UC}/catalogs/nope", {}, "RESOURCE_DOES_NOT_EXIST"),
        ("GET", f"{UC}/schemas/main.nope", {}, "RESOURCE_DOES_NOT_EXIST"),
        ("GET", f"{UC}/memory-stores/main.default.nope", {}, "NOT_FOUND"),
        ("GET", f"{UC}/memory-stores/main.default.nope/entries", {"scope": "u"}, "NOT_FOUND"),
        ("GET", f"{agents}/nope-store", {}, "NOT_FOUND"),
        ("GET", f"{agents}/nope-store/entries/not-a-uuid", {}, "NOT_FOUND"),
    ]:
        r = client.request(method, url, params=params, headers=token())
        assert (r.status_code, r.json()["error_code"]) == (404, code), url
    events = client.get(f"{UC}/system/audit", headers=token(), params={"page_size": 100}).json()["events"]
    event = next(e for e in events if e["request_id"] == r.headers["x-request-id"])
    assert (event["status_code"], event["error_code"]) == (404, "NOT_FOUND")

    paths = client.get("/openapi.json").json()["paths"]

    def why(path: str, method: str) -> str:
        return paths[path][method]["responses"]["404"]["description"]

    assert why(f"{UC}/catalogs/{{name}}", "get").startswith("RESOURCE_DOES_NOT_EXIST")
    assert why(f"{UC}/schemas/{{full_name}}", "delete").startswith("RESOURCE_DOES_NOT_EXIST")
    assert why(f"{UC}/memory-stores", "post").startswith("RESOURCE_DOES_NOT_EXIST")  # a missing schema
    for path, method in [
        (f"{UC}/memory-stores/{{full_name}}", "get"),
        (f"{UC}/memory-stores/{{full_name}}", "patch"),
        (f"{UC}/memory-stores/{{full_name}}/entries:get", "get"),
        (f"{UC}/memory-stores/{{full_name}}/entries", "delete"),
        (f"{agents}/{{store_id}}", "get"),
        (f"{agents}/{{store_id}}/entries/{{entry_id}}", "patch"),
    ]:
        assert why(path, method).startswith("NOT_FOUND"), (path, method)


def test_databricks_config_probe_is_json_404(client):
    r = client.get("/.well-known/databricks-config")
    assert r.status_code == 404
    assert r.json()["error_code"] == "RESOURCE_DOES_NOT_EXIST"


def test_unknown_route_and_method_keep_the_error_shape(client, token):
    r = client.get(f"{UC}/no-such-thing", headers=token())
    assert r.status_code == 404 and set(r.json()) == {"error_code", "message", "details"}
    r = client.put(f"{UC}/catalogs/main", headers=token(), json={})
    assert r.status_code == 405 and set(r.json()) == {"error_code", "message", "details"}


def test_request_body_over_the_limit_is_413(client, token, settings):
    big = json.dumps({"name": "big", "comment": "x" * (settings.max_body_bytes + 10)})
    r = client.post(f"{UC}/catalogs", headers=token(), content=big)
    assert r.status_code == 413
    assert r.json()["error_code"] == "PAYLOAD_TOO_LARGE"
    assert client.get(f"{UC}/catalogs/big", headers=token()).status_code == 404


def test_json_body_without_content_type_is_accepted(client, token):
    # curl -d sends application/x-www-form-urlencoded; the API still reads JSON
    r = client.post(
        f"{UC}/catalogs",
        headers={**token(), "content-type": "application/x-www-form-urlencoded"},
        content=b'{"name":"curl_style"}',
    )
    assert r.status_code == 200, r.text


def test_internal_errors_show_no_trace_and_are_logged_with_the_request_id(client, token, caplog, monkeypatch):
    from catalog.governance.namespace import service

    async def boom(*args, **kwargs):
        raise RuntimeError("secret detail in a stack trace")

    monkeypatch.setattr(service.repo, "get_metastore", boom)
    with caplog.at_level(logging.ERROR, logger="catalog.errors"):
        r = client.get(f"{UC}/metastore_summary", headers=token())
    assert r.status_code == 500
    body = r.json()
    assert body["error_code"] == "INTERNAL_ERROR"
    assert "secret" not in r.text and "Traceback" not in r.text
    request_id = r.headers["x-request-id"]
    assert request_id in body["message"]
    assert any(getattr(rec, "request_id", None) == request_id for rec in caplog.records)


def test_one_structured_log_line_per_request(client, token, caplog):
    with caplog.at_level(logging.INFO, logger="catalog.request"):
        r = client.get(f"{UC}/catalogs/main", headers=token("admin"))
    lines = [rec for rec in caplog.records if rec.name == "catalog.request"]
    assert len(lines) == 1
    line = json.loads(JsonFormatter().format(lines[0]))
    assert line["method"] == "GET"
    assert line["route"] == f"{UC}/catalogs/{{name}}"
    assert line["status"] == 200 and line["principal"] == "admin"
    assert line["request_id"] == r.headers["x-request-id"]
    assert isinstance(line["duration_ms"], float)


def test_a_request_counts_as_worked_on_until_its_response_starts_and_in_flight_until_it_ends():
    """A stream being answered (its response started, its body still to come) is in flight (the
    cap on requests counts it) but no longer worked on here (the model's inline rule reads that:
    an open stream must not send every other request's query to a lane)."""
    seen: list[tuple[str, int, int]] = []

    async def scenario() -> None:
        go, fail, streaming = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def app(scope: Any, receive: Any, send: Any) -> None:
            seen.append(("working", middleware.in_flight, middleware.working))
            if scope["path"] == "/fails":
                raise RuntimeError("before any response")
            await send({"type": "http.response.start", "status": 200, "headers": []})
            seen.append(("streaming", middleware.in_flight, middleware.working))
            streaming.set()
            await go.wait()
            await send({"type": "http.response.body", "body": b"x", "more_body": False})

        middleware = RequestMiddleware(app)

        async def receive() -> dict[str, Any]:
            await fail.wait()
            return {"type": "http.disconnect"}

        async def send(message: Any) -> None:
            pass

        def request(path: str) -> dict[str, Any]:
            return {"type": "http", "method": "GET", "path": path, "headers": [], "query_string": b""}

        stream = asyncio.ensure_future(middleware(request("/stream"), receive, send))
        await streaming.wait()
        with pytest.raises(RuntimeError):  # one that fails before its response: counted off too
            await middleware(request("/fails"), receive, send)
        seen.append(("failed", middleware.in_flight, middleware.working))
        go.set()
        await stream
        seen.append(("ended", middleware.in_flight, middleware.working))

    asyncio.run(scenario())
    assert seen == [
        ("working", 1, 1),
        ("streaming", 1, 0),
        ("working", 2, 1),
        ("failed", 1, 0),
        ("ended", 0, 0),
    ]
