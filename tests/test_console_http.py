"""The web console over plain HTTP, for what a browser test cannot check well: cookie flags, CSRF
refusals and their audit events, tokens in URLs, bad form input, one audit event per request.
(tests/test_console.py drives the same pages in a real browser.)"""

from __future__ import annotations

import asyncio
import json
import re
import time

import asyncpg
import jwt
import pytest
from console_api import Api

from catalog.auth import mint_dev_token

COOKIE = "catalog_console"


def sql(url: str, statement: str, *args):  # type: ignore[no-untyped-def]
    async def run():  # type: ignore[no-untyped-def]
        conn = await asyncpg.connect(url)
        try:
            return await conn.fetch(statement, *args)
        finally:
            await conn.close()

    return asyncio.run(run())


def events_of(database_url: str, response) -> list:  # type: ignore[no-untyped-def]
    """The audit events of one answered request (by its X-Request-Id)."""
    return sql(
        database_url,
        "SELECT * FROM audit_events WHERE request_id = $1 ORDER BY seq",
        response.headers["x-request-id"],
    )


@pytest.fixture(scope="module")
def api(client, token) -> Api:
    return Api(client, lambda who: token(who))


@pytest.fixture(scope="module")
def world(api):
    """`main.default.forms` (the admin's), `main.default.hidden` (nobody else may see it), and
    `main.default.shared` that bob may read."""
    api.create_store("forms", description="a store for the form tests")
    api.create_store("hidden")
    api.create_store("shared")
    api.grant("memory_store", "main.default.shared", "bob", "READ_MEMORY_STORE")
    return {"forms": "main.default.forms", "hidden": "main.default.hidden", "shared": "main.default.shared"}


@pytest.fixture
def web(client):
    """The module's client with no console cookie before or after the test."""
    client.cookies.clear()
    yield client
    client.cookies.clear()


def sign_in(web, settings, who: str = "admin") -> str:  # type: ignore[no-untyped-def]
    """Sign `who` in (the client keeps the cookie); the session's CSRF token, read from a page."""
    r = web.post("/console/sign-in", data={"token": mint_dev_token(settings, who)}, follow_redirects=False)
    assert r.status_code == 303, r.text
    page = web.get("/console/")
    assert page.status_code == 200, page.text
    return re.search(r'name="csrf" value="([^"]+)"', page.text)[1]  # type: ignore[index]


def set_cookie(response) -> str:  # type: ignore[no-untyped-def]
    cookies = [v for k, v in response.headers.multi_items() if k == "set-cookie" and v.startswith(COOKIE)]
    assert len(cookies) == 1, response.headers
    return cookies[0]


def test_a_page_without_a_session_redirects_to_sign_in_and_is_audited_unauthenticated(
    web, world, database_url
):
    r = web.get(f"/console/stores/{world['forms']}", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == f"/console/sign-in?next=%2Fconsole%2Fstores%2F{world['forms']}"
    (event,) = events_of(database_url, r)
    assert event["decision"] == "unauthenticated" and event["status_code"] == 303
    assert event["principal"] is None and "no console session" in event["reason"]
    # the sign-in page itself is open
    page = web.get(r.headers["location"])
    assert page.status_code == 200 and 'name="token"' in page.text
    assert 'value="/console/stores/main.default.forms"' in page.text  # where it goes afterwards


def test_sign_in_sets_an_httponly_strict_cookie_for_the_console_only(web, settings, world):
    r = web.post(
        "/console/sign-in",
        data={"token": mint_dev_token(settings, "admin"), "next": f"/console/stores/{world['forms']}"},
        follow_redirects=False,
    )
    assert r.status_code == 303 and r.headers["location"] == f"/console/stores/{world['forms']}"
    cookie = set_cookie(r)
    attributes = {part.strip().split("=")[0].lower(): part.strip() for part in cookie.split(";")[1:]}
    assert "httponly" in attributes
    assert attributes["samesite"].lower() == "samesite=strict"
    assert attributes["path"] == "Path=/console"
    assert "secure" not in attributes  # plain http here: a Secure cookie would never come back
    assert web.get(f"/console/stores/{world['forms']}").status_code == 200
    # the API does not take the console's cookie for a bearer token
    assert web.get(f"/api/2.1/unity-catalog/memory-stores/{world['forms']}").status_code == 401


def test_over_https_the_cookie_is_secure(web, settings):
    url = str(web.base_url.copy_with(scheme="https")).rstrip("/") + "/console/sign-in"
    r = web.post(url, data={"token": mint_dev_token(settings, "admin")}, follow_redirects=False)
    assert r.status_code == 303, r.text
    assert "secure" in [p.strip().lower() for p in set_cookie(r).split(";")]


def test_another_site_cannot_sign_a_browser_in(web, settings, database_url):
    r = web.post(
        "/console/sign-in",
        data={"token": mint_dev_token(settings, "mallory")},
        headers={"Origin": "https://evil.example"},
        follow_redirects=False,
    )
    assert r.status_code == 403 and "set-cookie" not in r.headers and "cross-origin" in r.text
    (event,) = events_of(database_url, r)
    assert event["decision"] == "deny"
    # from the console's own page it works
    origin = str(web.base_url).rstrip("/")
    r = web.post(
        "/console/sign-in",
        data={"token": mint_dev_token(settings, "mallory")},
        headers={"Origin": origin},
        follow_redirects=False,
    )
    assert r.status_code == 303 and COOKIE in r.headers["set-cookie"]


def test_a_redirect_after_sign_in_stays_in_the_console(web, settings):
    for target in (
        "https://elsewhere.example/",
        "//elsewhere.example/console/",
        "/api/2.1/unity-catalog/catalogs",
    ):
        r = web.post(
            "/console/sign-in",
            data={"token": mint_dev_token(settings, "admin"), "next": target},
            follow_redirects=False,
        )
        assert r.status_code == 303 and r.headers["location"] == "/console/", target


def test_sign_in_with_a_bad_token_is_refused_with_the_reason_and_no_cookie(web, settings, database_url):
    good = mint_dev_token(settings, "admin")
    expired = mint_dev_token(settings, "admin", ttl=60, now=time.time() - 3600)
    # HS256 with the public key's text as the secret: an algorithm the verifier never accepts
    hs256 = jwt.encode({"sub": "admin", "iss": "x", "aud": "y", "iat": 1, "exp": 2**40}, "k" * 32, "HS256")
    for bad, reason in (
        (good[:-4] + "AAAA", "bad token signature"),
        (expired, "token expired"),
        (hs256, "token algorithm not allowed"),
        ("not-a-token", "malformed token"),
    ):
        r = web.post("/console/sign-in", data={"token": bad}, follow_redirects=False)
        assert r.status_code == 401, r.text
        assert reason in r.text and "set-cookie" not in r.headers
        assert 'id="token"' in r.text  # the form again, to try another
        (event,) = events_of(database_url, r)
        assert event["decision"] == "unauthenticated" and event["status_code"] == 401
        assert bad[:40] not in str(dict(event))
    r = web.post("/console/sign-in", data={"token": "  "}, follow_redirects=False)
    assert r.status_code == 400 and "Token: paste a token" in r.text
    r = web.post("/console/sign-in", data={"token": "x" * 5000}, follow_redirects=False)
    assert r.status_code == 400 and "3800 characters" in r.text


def test_a_token_in_a_url_is_never_accepted_nor_recorded(web, settings, world, database_url):
    token = mint_dev_token(settings, "admin")
    # not as a query parameter of a page...
    r = web.get("/console/", params={"token": token}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/console/sign-in")
    assert token not in r.headers["location"]
    # ...nor of the sign-in form (only its body counts)
    r = web.post(f"/console/sign-in?token={token}", data={}, follow_redirects=False)
    assert r.status_code == 400 and "set-cookie" not in r.headers
    r = web.get("/console/sign-in", params={"token": token})
    assert r.status_code == 200 and "set-cookie" not in r.headers
    # a bearer header is not a console session either
    r = web.get("/console/", headers={"Authorization": f"Bearer {token}"}, follow_redirects=False)
    assert r.status_code == 303
    # and the audit log, which cannot be edited, kept only that one was sent
    rows = sql(
        database_url,
        "SELECT count(*) FROM audit_events WHERE audit_events::text LIKE '%' || $1 || '%'",
        token[:60],
    )
    assert rows[0][0] == 0
    (event,) = events_of(database_url, r)
    assert event["decision"] == "unauthenticated"


def test_a_form_without_the_sessions_csrf_token_is_refused_and_audited(
    web, settings, world, api, database_url
):
    csrf = sign_in(web, settings)
    url = f"/console/grants/memory_store/{world['forms']}"
    form = {"op": "add", "principal": "csrf_victim", "privilege": "MANAGE"}
    for sent in (form, {**form, "csrf": ""}, {**form, "csrf": csrf[:-2] + "xx"}):
        r = web.post(url, data=sent, follow_redirects=False)
        assert r.status_code == 403, r.text
        assert "CSRF token" in r.text
        (event,) = events_of(database_url, r)
        assert event["decision"] == "deny" and event["status_code"] == 403 and event["principal"] == "admin"
        assert "CSRF token" in event["reason"]
        assert json.loads(event["request_params"])["full_name"] == world["forms"]
    # posted from another site's page, even with the right token
    r = web.post(
        url, data={**form, "csrf": csrf}, headers={"Origin": "https://evil.example"}, follow_redirects=False
    )
    assert r.status_code == 403 and "cross-origin" in r.text
    assert "csrf_victim" not in api.grants("memory_store", world["forms"])
    # a token of another session does not do either
    other = mint_dev_token(settings, "admin", ttl=7200)
    assert other != web.cookies.get(COOKIE)
    from catalog.console.session import csrf_token

    r = web.post(url, data={**form, "csrf": csrf_token(other)}, follow_redirects=False)
    assert r.status_code == 403
    # with it, the grant is made: one change, one event, committed with it
    r = web.post(url, data={**form, "csrf": csrf}, follow_redirects=False)
    assert (
        r.status_code == 303
        and r.headers["location"] == f"/console/stores/{world['forms']}?done=granted#grants"
    )
    assert api.grants("memory_store", world["forms"])["csrf_victim"] == ["MANAGE"]
    (event,) = events_of(database_url, r)
    assert (event["action_name"], event["decision"], event["status_code"]) == (
        "permissions.update",
        "allow",
        303,
    )
    # sign-out is a form too
    r = web.post("/console/sign-out", data={"csrf": ""}, follow_redirects=False)
    assert r.status_code == 403 and "set-cookie" not in r.headers
    assert web.get("/console/", follow_redirects=False).status_code == 200  # still signed in


@pytest.mark.parametrize(
    ("form", "field"),
    [
        ({"op": "add", "principal": "", "privilege": "MANAGE"}, "principal"),
        ({"op": "add", "principal": "x" * 300, "privilege": "MANAGE"}, "principal"),
        ({"op": "add", "principal": "team", "privilege": "USE_CATALOG"}, "privilege"),
        ({"op": "add", "principal": "team", "privilege": "EVERYTHING"}, "privilege"),
        ({"op": "add", "principal": "team"}, "privilege"),
        ({"op": "grant", "principal": "team", "privilege": "MANAGE"}, "op"),
        ({"op": "add", "principal": "team", "privilege": "MANAGE", "extra": "1"}, "extra"),
    ],
)
def test_bad_form_input_is_a_400_page_naming_the_field(web, settings, world, form, field):
    csrf = sign_in(web, settings)
    r = web.post(f"/console/grants/memory_store/{world['forms']}", data={**form, "csrf": csrf})
    assert r.status_code == 400, r.text
    assert r.headers["content-type"].startswith("text/html")
    assert f'<code id="error-field">{field}</code>' in r.text
    assert "Traceback" not in r.text


def test_bad_input_anywhere_is_400_or_404_never_500(web, settings, world):
    csrf = sign_in(web, settings)
    store = world["forms"]
    grant = {"csrf": csrf, "op": "add", "principal": "t", "privilege": "MANAGE"}
    cases = [
        ("post", f"/console/grants/memory_store/{store}", {"json": {"csrf": csrf}}, 400, "content-type"),
        ("post", "/console/grants/memory_store/no-dots", {"data": grant}, 400, "full_name"),
        ("post", "/console/grants/table/a.b", {"data": {"csrf": csrf}}, 400, "securable_type"),
        ("post", "/console/grants/metastore/x", {"data": {**grant, "privilege": "READ_AUDIT"}}, 400,
         "securable_type"),
        ("get", "/console/audit", {"params": {"since": "yesterday"}}, 400, "since"),
        ("get", "/console/audit", {"params": {"since": "2030-01-02T00:00", "until": "2030-01-01T00:00"}}, 400,
         "until"),
        ("get", "/console/audit", {"params": {"decision": "maybe"}}, 400, "decision"),
        ("get", f"/console/stores/{store}", {"params": {"scope": "u", "mode": "fuzzy"}}, 400, "mode"),
        ("get", f"/console/stores/{store}", {"params": {"scope": "u", "q": "x" * 5000}}, 400, "query"),
        ("get", f"/console/lineage/{store}", {"params": {"depth": "99"}}, 400, "depth"),
        ("get", f"/console/lineage/{store}", {"params": {"direction": "sideways"}}, 400, "direction"),
        ("get", "/console/stores/main.default.nothing_here", {}, 404, None),
        ("get", "/console/catalogs/bad name", {}, 400, "name"),
        ("get", "/console/no/such/page", {}, 404, None),
        ("get", "/console/sign-out", {}, 405, None),
    ]  # fmt: skip
    for method, url, kwargs, status, field in cases:
        r = web.request(method, url, **kwargs)
        assert r.status_code == status, (url, kwargs, r.status_code, r.text[-400:])
        assert r.headers["content-type"].startswith("text/html"), url
        if field:
            assert f'<code id="error-field">{field}</code>' in r.text, (url, r.text[-600:])


def test_a_principal_sees_only_what_it_may(web, settings, world, database_url):
    sign_in(web, settings, "bob")
    listing = web.get("/console/schemas/main.default")
    assert listing.status_code == 200
    assert "main.default.shared" in listing.text and "main.default.hidden" not in listing.text
    r = web.get(f"/console/stores/{world['hidden']}")
    assert r.status_code == 403 and "Not allowed" in r.text
    assert "requires READ_MEMORY_STORE or WRITE_MEMORY_STORE or MANAGE on memory store" in r.text
    (event,) = events_of(database_url, r)
    assert (event["decision"], event["action_name"], event["securable_full_name"]) == (
        "deny",
        "memory_store.see",
        world["hidden"],
    )
    # what bob may read: no grant forms, no look at others' privileges, no audit links
    page = web.get(f"/console/stores/{world['shared']}")
    assert page.status_code == 200
    assert 'id="grant-form"' not in page.text and 'id="effective-principal"' not in page.text
    assert "/console/lineage/" not in page.text
    (event,) = events_of(database_url, page)
    assert (event["decision"], event["action_name"]) == ("allow", "memory_store.see")
    # asking anyway is refused like the API refuses it
    r = web.get(f"/console/stores/{world['shared']}", params={"principal": "admin"})
    assert r.status_code == 403
    assert events_of(database_url, r)[0]["action_name"] == "effective_permissions.other"
    for url in ("/console/audit", f"/console/lineage/{world['shared']}"):
        r = web.get(url)
        assert r.status_code == 403, url
        assert events_of(database_url, r)[0]["decision"] == "deny"


def test_each_console_request_is_one_audit_event(web, settings, world, database_url):
    csrf = sign_in(web, settings)
    responses = [
        web.get("/console/"),
        web.get("/console/catalogs/main"),
        web.get("/console/schemas/main.default"),
        web.get(f"/console/stores/{world['forms']}", params={"scope": "u1"}),
        web.get(
            f"/console/stores/{world['forms']}", params={"scope": "u1", "q": "anything", "mode": "keyword"}
        ),
        web.get("/console/audit"),
        web.get(f"/console/lineage/{world['forms']}"),
        web.get("/console/static/console.css"),
        web.post(
            f"/console/grants/memory_store/{world['forms']}",
            data={"csrf": csrf, "op": "add", "principal": "audited_team", "privilege": "READ_MEMORY_STORE"},
            follow_redirects=False,
        ),
        web.post(
            f"/console/grants/memory_store/{world['forms']}",
            data={
                "csrf": csrf,
                "op": "remove",
                "principal": "audited_team",
                "privilege": "READ_MEMORY_STORE",
            },
            follow_redirects=False,
        ),
        web.get("/console/stores/main.default.missing"),
        web.post("/console/sign-out", data={"csrf": csrf}, follow_redirects=False),
        web.get("/console/", follow_redirects=False),
    ]
    expected_actions = [
        "catalog.list",
        "catalog.get",
        "schema.get",
        "memory_store.see",
        "memory_store.see",
        "audit.read",
        "lineage.read",
        "http.get /console/static/{file_path}",
        "permissions.update",
        "permissions.update",
        "memory_store.see",
        "http.post /console/sign-out",
        "http.get /console",
    ]
    for response, action in zip(responses, expected_actions, strict=True):
        events = events_of(database_url, response)
        assert len(events) == 1, (response.request.url, events)
        assert events[0]["status_code"] == response.status_code, response.request.url
        assert events[0]["action_name"] == action, (response.request.url, events[0]["action_name"])
    assert [r.status_code for r in responses] == [200] * 8 + [303, 303, 404, 303, 303]
    # entries read are counted like the API counts them
    assert events_of(database_url, responses[3])[0]["result_count"] == 0


def test_sign_out_clears_the_cookie(web, settings):
    csrf = sign_in(web, settings)
    r = web.post("/console/sign-out", data={"csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/console/sign-in?why=signed-out"
    cookie = set_cookie(r)
    assert "Max-Age=0" in cookie and "Path=/console" in cookie
    assert web.cookies.get(COOKIE) is None
    assert web.get("/console/", follow_redirects=False).status_code == 303


def test_a_session_whose_token_expired_ends_with_a_fresh_sign_in(web, settings, database_url):
    expiring = mint_dev_token(settings, "admin", ttl=1, now=time.time() - 40)  # past exp + leeway
    web.cookies.set(COOKIE, expiring, path="/console")
    r = web.get("/console/audit", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/console/sign-in?next=%2Fconsole%2Faudit&why=ended"
    assert "Max-Age=0" in set_cookie(r)
    (event,) = events_of(database_url, r)
    assert event["decision"] == "unauthenticated" and "token expired" in event["reason"]
    assert "expired" in web.get(r.headers["location"]).text


def effective_rows(page: str) -> list[tuple[str, ...]]:
    """The rows of the effective privileges table: privilege, how, where, through group."""
    table = re.search(r'<table class="grid" id="effective-table">.*?</table>', page, re.S)
    assert table is not None, page[-2000:]
    return re.findall(
        r"<tr>\s*<th scope=\"row\">(\w+)</th>\s*<td>(.*?)</td>\s*<td>(.*?)</td>\s*<td>(.*?)</td>", table[0]
    )


def test_the_store_page_says_where_each_privilege_comes_from(web, settings, api):
    store = api.create_store("explained")
    api.create_group("explainers", ["erin"])
    api.grant("schema", "main.default", "explainers", "READ_MEMORY_STORE")
    api.grant("memory_store", store, "erin", "WRITE_MEMORY_STORE")
    sign_in(web, settings)
    page = web.get(f"/console/stores/{store}", params={"principal": "erin"}).text
    rows = effective_rows(page)
    assert rows == [
        (
            "READ_MEMORY_STORE",
            "granted READ_MEMORY_STORE",
            "inherited from schema main.default",
            "explainers",
        ),
        ("WRITE_MEMORY_STORE", "granted WRITE_MEMORY_STORE", "directly on this memory store", "—"),
    ]
    # the admin holds everything as the admin; an owner holds it by ownership
    admins = effective_rows(web.get(f"/console/stores/{store}").text)
    assert {row[1:] for row in admins} == {("metastore admin", "inherited from the metastore", "—")}
    api.grant("schema", "main.default", "frank", "CREATE_MEMORY_STORE")
    own = api.create_store("franks", as_="frank")
    sign_in(web, settings, "frank")
    owned = effective_rows(web.get(f"/console/stores/{own}").text)
    assert {row[1:] for row in owned} == {("ownership", "directly on this memory store", "—")}
    assert [row[0] for row in owned] == ["READ_MEMORY_STORE", "WRITE_MEMORY_STORE", "MANAGE"]


def test_the_audit_chart_counts_allowed_and_denied_events(web, settings, api, world):
    for _ in range(3):
        assert api.get_store_as("chart_subject", world["hidden"]).status_code == 403
    api.grant("memory_store", world["hidden"], "chart_reader", "READ_MEMORY_STORE")
    for _ in range(2):
        assert api.get_store_as("chart_reader", world["hidden"]).status_code == 200
    sign_in(web, settings)
    denied = web.get("/console/audit", params={"principal": "chart_subject"}).text
    assert ": 0 allowed, 3 denied" in denied
    assert denied.count('<tr class="decision-deny">') == 3
    allowed = web.get("/console/audit", params={"principal": "chart_reader", "decision": "allow"}).text
    assert ": 2 allowed, 0 denied" in allowed
    svg = re.search(r'<svg id="audit-chart".*?</svg>', allowed, re.S)[0]  # type: ignore[index]
    series = dict(re.findall(r'<g class="series [\w-]+" data-series="(\w+)">(.*?)</g>', svg, re.S))
    assert set(series) == {"allowed", "denied"}
    assert series["allowed"].count("<rect") >= 1 and series["denied"].count("<rect") == 0


def test_a_team_gets_read_access_from_the_catalog_schema_and_store_pages(web, settings, api, client, token):
    """What a new admin does for a team outside `main`: USE on the catalog and the schema, READ on
    the store, each from its page; the team's member can then read the store's entries."""
    assert (
        client.post("/api/2.1/unity-catalog/catalogs", headers=token(), json={"name": "teams"}).status_code
        == 200
    )
    body = {"name": "support", "catalog_name": "teams"}
    assert client.post("/api/2.1/unity-catalog/schemas", headers=token(), json=body).status_code == 200
    body = {"name": "kb", "catalog_name": "teams", "schema_name": "support"}
    assert client.post("/api/2.1/unity-catalog/memory-stores", headers=token(), json=body).status_code == 200
    api.create_group("kb_team", ["kim"])
    csrf = sign_in(web, settings)
    for page, kind, name, privilege in (
        ("/console/catalogs/teams", "catalog", "teams", "USE_CATALOG"),
        ("/console/schemas/teams.support", "schema", "teams.support", "USE_SCHEMA"),
        ("/console/stores/teams.support.kb", "memory_store", "teams.support.kb", "READ_MEMORY_STORE"),
    ):
        form = web.get(page).text
        assert f'action="/console/grants/{kind}/{name}"' in form and f'<option value="{privilege}">' in form
        r = web.post(
            f"/console/grants/{kind}/{name}",
            data={"csrf": csrf, "op": "add", "principal": "kb_team", "privilege": privilege},
            follow_redirects=False,
        )
        assert r.status_code == 303 and r.headers["location"] == f"{page}?done=granted#grants"
        assert "The privilege was granted." in web.get(r.headers["location"]).text
        assert api.grants(kind, name)["kb_team"] == [privilege]
    api.write("teams.support.kb", "faq", "/refunds.md", "Refunds take five days.")
    r = client.get(
        "/api/2.1/unity-catalog/memory-stores/teams.support.kb/entries",
        headers=token("kim"),
        params={"scope": "faq"},
    )
    assert r.status_code == 200 and [e["path"] for e in r.json()["entries"]] == ["/refunds.md"], r.text
    sign_in(web, settings, "kim")
    assert (
        "Refunds take five days." in web.get("/console/stores/teams.support.kb", params={"scope": "faq"}).text
    )


# --- scope limits of grants ----------------------------------------------------------------------------


def grant_rows(page: str) -> dict[str, str]:
    """The grants table, principal → the text of its cell (tags dropped, spaces collapsed)."""
    table = re.search(r'<table class="grid" id="grants-table">.*?</table>', page, re.S)
    assert table is not None, page[-2000:]
    rows = re.findall(r'<th scope="row">([^<]+)</th>\s*<td>(.*?)</td>\s*</tr>', table[0], re.S)
    return {who: " ".join(re.sub(r"<[^>]+>", " ", cell).split()) for who, cell in rows}


def scope_forms(page: str) -> list[tuple[str, str, str]]:
    """(principal, privilege, pattern) of each form that takes one pattern from a grant."""
    return re.findall(
        r'<input type="hidden" name="principal" value="([^"]+)">\s*'
        r'<input type="hidden" name="privilege" value="([^"]+)">\s*'
        r'<input type="hidden" name="scopes" value="([^"]+)">',
        page,
    )


def test_the_grants_panel_shows_and_sets_scope_limits(web, settings, api, database_url):
    store = api.create_store("scoped_forms")
    url = f"/console/grants/memory_store/{store}"
    admin = api.client()
    admin.grants.update(
        "memory_store", store, "ann", add=["READ_MEMORY_STORE"], scopes=["team-a", "team-a:*"]
    )
    admin.grants.update("memory_store", store, "cal", add=["READ_MEMORY_STORE", "MANAGE"])
    csrf = sign_in(web, settings)

    page = web.get(f"/console/stores/{store}").text
    rows = grant_rows(page)
    assert rows["ann"] == "READ_MEMORY_STORE Revoke only in scopes: team-a Remove team-a:* Remove"
    assert rows["cal"] == "MANAGE Revoke READ_MEMORY_STORE Revoke in every scope"
    assert scope_forms(page) == [
        ("ann", "READ_MEMORY_STORE", "team-a"),
        ("ann", "READ_MEMORY_STORE", "team-a:*"),
    ]
    assert 'id="grant-scopes"' in page and 'name="scopes"' in page

    def post(**form: str):  # type: ignore[no-untyped-def]
        return web.post(url, data={"csrf": csrf, **form}, follow_redirects=False)

    def limits(who: str) -> dict[str, list[str]]:
        (assignment,) = admin.grants.get("memory_store", store, principal=who)
        return assignment.scopes

    # granted with the form's patterns (one per line; blank lines and spaces around them left out)
    r = post(
        op="add", principal="bea", privilege="WRITE_MEMORY_STORE", scopes="team-b\r\n  team-b:* \r\n\r\n"
    )
    assert r.status_code == 303 and r.headers["location"] == f"/console/stores/{store}?done=limited#grants"
    assert limits("bea") == {"WRITE_MEMORY_STORE": ["team-b", "team-b:*"]}
    (event,) = events_of(database_url, r)
    assert (event["action_name"], event["decision"], event["status_code"]) == (
        "permissions.update",
        "allow",
        303,
    )
    shown = web.get(r.headers["location"]).text
    assert "The privilege was granted in the scopes given." in shown
    assert (
        grant_rows(shown)["bea"] == "WRITE_MEMORY_STORE Revoke only in scopes: team-b Remove team-b:* Remove"
    )
    # the effective privileges say in which scopes each holds
    effective = web.get(f"/console/stores/{store}", params={"principal": "bea"}).text
    table = re.search(r'<table class="grid" id="effective-table">.*?</table>', effective, re.S)
    assert table is not None
    held = [
        re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row) for row in re.findall(r"<tr>(.*?)</tr>", table[0], re.S)
    ]
    assert held[0][-1] == "In scopes"  # the header
    assert [(row[0], row[-1]) for row in held[1:]] == [("WRITE_MEMORY_STORE", "team-b, team-b:*")]

    # one pattern taken away; the last one has no Remove button (Revoke takes the grant)
    r = post(op="remove", principal="ann", privilege="READ_MEMORY_STORE", scopes="team-a:*")
    assert r.headers["location"] == f"/console/stores/{store}?done=narrowed#grants"
    assert limits("ann") == {"READ_MEMORY_STORE": ["team-a"]}
    shown = web.get(r.headers["location"]).text
    assert "The scopes were taken from the grant." in shown
    assert grant_rows(shown)["ann"] == "READ_MEMORY_STORE Revoke only in scopes: team-a"
    assert ("ann", "READ_MEMORY_STORE", "team-a") not in scope_forms(shown)

    # patterns added to a grant for every scope leave it so, and the page says how to narrow it
    r = post(op="add", principal="cal", privilege="READ_MEMORY_STORE", scopes="team-c")
    assert r.headers["location"] == f"/console/stores/{store}?done=unlimited#grants"
    assert limits("cal") == {}
    assert "Revoke it, then grant it with the scopes it keeps." in web.get(r.headers["location"]).text

    # granted without patterns: every scope again
    r = post(op="add", principal="ann", privilege="READ_MEMORY_STORE")
    assert r.headers["location"] == f"/console/stores/{store}?done=granted#grants"
    assert limits("ann") == {}
    assert (
        grant_rows(web.get(f"/console/stores/{store}").text)["ann"]
        == "READ_MEMORY_STORE Revoke in every scope"
    )

    # bad patterns are a 400 page naming the form's field, and change nothing
    for form in (
        {"op": "add", "principal": "dan", "privilege": "READ_MEMORY_STORE", "scopes": "team-*x"},
        {"op": "add", "principal": "dan", "privilege": "MANAGE", "scopes": "team-d"},
        {"op": "add", "principal": "dan", "privilege": "READ_MEMORY_STORE",
         "scopes": "\n".join(f"s{i}" for i in range(21))},
        {"op": "remove", "principal": "cal", "privilege": "READ_MEMORY_STORE", "scopes": "team-c"},
    ):  # fmt: skip
        r = post(**form)
        assert r.status_code == 400, (form, r.text[-500:])
        assert '<code id="error-field">scopes</code>' in r.text, (form, r.text[-600:])
    assert {a.principal for a in admin.grants.get("memory_store", store)} == {"ann", "bea", "cal"}


def test_the_favicon_is_served_without_a_session_and_never_audited(web, settings, world, database_url):
    """Browsers ask for the icon by themselves, with no token and, outside /console, no cookie:
    a console session's icon requests are answered and leave no (denied) audit event."""
    from pathlib import Path

    import catalog.console

    icon = (Path(catalog.console.__file__).parent / "static" / "favicon.svg").read_bytes()
    r = web.get("/favicon.ico")  # before signing in
    assert r.status_code == 200 and r.content == icon
    assert r.headers["content-type"].startswith("image/svg+xml")
    assert r.headers["x-content-type-options"] == "nosniff"
    assert events_of(database_url, r) == []
    sign_in(web, settings)
    pages, icons = [], []
    for path in (
        "/console/",
        "/console/catalogs/main",
        f"/console/stores/{world['forms']}",
        "/console/audit",
    ):
        page = web.get(path)
        assert page.status_code == 200, path
        href = re.search(r'<link rel="icon" href="([^"]+)"', page.text)
        assert href is not None and href[1] == "/favicon.ico", path
        pages.append(page)
        icons.append(web.get(href[1]))
    assert [i.status_code for i in icons] == [200] * len(icons)
    assert [events_of(database_url, i) for i in icons] == [[]] * len(icons)
    assert [[e["decision"] for e in events_of(database_url, p)] for p in pages] == [["allow"]] * len(pages)
    assert (
        sql(database_url, "SELECT count(*) FROM audit_events WHERE action_name LIKE '%favicon%'")[0][0] == 0
    )
    assert web.post("/favicon.ico").status_code == 405  # an icon to read, nothing else


def test_a_scope_the_stores_binding_refuses_is_said_inside_the_store_page(web, settings, api, database_url):
    """The admin types a user's scope on a store bound to end users: the store page stays, its
    entries panel says why (403, as the API), and the request is audited as that refusal."""
    store = api.create_store("bound_to_users")
    api.client().memory_stores.update(store, scope_binding="end_user")
    api.write(store, "admin", "/memories/mine.md", "The admin's own note.")
    sign_in(web, settings)
    r = web.get(f"/console/stores/{store}", params={"scope": "user-123", "q": "anything"})
    assert r.status_code == 403 and r.headers["content-type"].startswith("text/html")
    assert f"<h1>Memory store {store}</h1>" in r.text and 'id="grants"' in r.text
    refusal = re.search(r'<div class="error" role="alert" id="entries-refused">(.*?)</div>', r.text, re.S)
    assert refusal is not None, r.text[-2000:]
    assert "403 PERMISSION_DENIED" in refusal[1] and "binds scopes to the end user" in refusal[1]
    assert "not &#39;user-123&#39;" in refusal[1]
    assert 'id="entries-scope" name="scope"' in r.text and 'value="user-123"' in r.text  # asked again at once
    assert 'id="error"' not in r.text  # no error page
    (event,) = events_of(database_url, r)
    assert (event["decision"], event["status_code"], event["error_code"]) == (
        "deny",
        403,
        "PERMISSION_DENIED",
    )
    # its own scope is listed on the same page
    mine = web.get(f"/console/stores/{store}", params={"scope": "admin"})
    assert mine.status_code == 200 and "/memories/mine.md" in mine.text and "entries-refused" not in mine.text


def test_a_refused_grant_is_said_inside_the_page_it_was_sent_from(web, settings, api, world, database_url):
    """A grants form refused (bob holds no MANAGE; a pattern the API refuses) answers the page it
    was sent from with the refusal in its grants panel and the refusal's status; the store's
    grants are unchanged."""
    csrf = sign_in(web, settings, "bob")
    form = {"csrf": csrf, "op": "add", "principal": "mallory", "privilege": "READ_MEMORY_STORE"}
    r = web.post(f"/console/grants/memory_store/{world['shared']}", data=form, follow_redirects=False)
    assert r.status_code == 403, r.text[-1500:]
    assert f"<h1>Memory store {world['shared']}</h1>" in r.text
    refusal = re.search(r'id="grants-refused">(.*?)</div>', r.text, re.S)
    assert refusal is not None and "403 PERMISSION_DENIED" in refusal[1] and "MANAGE" in refusal[1]
    (event,) = events_of(database_url, r)
    assert (event["action_name"], event["decision"], event["status_code"]) == (
        "permissions.update",
        "deny",
        403,
    )
    assert "mallory" not in api.grants("memory_store", world["shared"])
    # a bad pattern from the admin: 400 naming the form's field, on the catalog's page
    csrf = sign_in(web, settings)
    bad = {"csrf": csrf, "op": "add", "principal": "t", "privilege": "READ_MEMORY_STORE", "scopes": "a*b"}
    r = web.post("/console/grants/catalog/main", data=bad, follow_redirects=False)
    assert r.status_code == 400 and "<h1>Catalog main</h1>" in r.text
    refusal = re.search(r'id="grants-refused">(.*?)</div>', r.text, re.S)
    assert refusal is not None and '<code id="error-field">scopes</code>' in refusal[1]


def test_a_console_search_keeps_neither_its_words_nor_its_page_token_in_the_log(
    web, settings, world, database_url
):
    sign_in(web, settings)
    r = web.get(
        f"/console/stores/{world['forms']}",
        params={"scope": "carol", "q": "Carol's divorce lawyer", "mode": "keyword", "bogus": "carol"},
    )
    assert r.status_code == 200, r.text
    (event,) = events_of(database_url, r)
    params = (
        json.loads(event["request_params"])
        if isinstance(event["request_params"], str)
        else event["request_params"]
    )
    assert params["q"] == "[redacted]" and params["bogus"] == "[redacted]", params
    assert params["mode"] == "keyword" and params["scope"].startswith("ps_"), params
    assert "Carol" not in str(dict(event)) and "carol" not in str(dict(event)), dict(event)
