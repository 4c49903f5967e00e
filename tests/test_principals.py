"""SCIM users: `GET /Me` (any authenticated principal: the token's subject and its groups) and
`GET /Users`, `GET /Users/{id}` (the metastore admin: the principals the server knows)."""

from __future__ import annotations

import uuid

import httpx
import pytest

from catalog.auth import mint_dev_token
from catalog.governance.principals import repo
from catalog.settings import Settings

SCIM = "/api/2.0/preview/scim/v2"
AUDIT = "/api/2.1/unity-catalog/system/audit"
USER_SCHEMA = "urn:ietf:params:scim:schemas:core:2.0:User"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def group(client, token, name: str, members: list[str]) -> str:
    r = client.post(
        f"{SCIM}/Groups",
        headers=token(),
        json={"displayName": name, "members": [{"value": m} for m in members]},
    )
    assert r.status_code == 200, r.text
    return r.json()["id"]


def event(client, token, request_id: str) -> dict:  # type: ignore[type-arg]
    events = client.get(AUDIT, headers=token(), params={"page_size": 50}).json()["events"]
    return next(e for e in events if e["request_id"] == request_id)


def users(client, token, **params: object) -> dict:  # type: ignore[type-arg]
    r = client.get(f"{SCIM}/Users", headers=token(), params=params)
    assert r.status_code == 200, r.text
    return r.json()


def test_me_is_the_token_subject_with_its_groups(client, token):
    alice = unique("alice")
    inner = group(client, token, unique("inner"), [alice])
    outer_name = unique("outer")
    outer = group(client, token, outer_name, [inner])
    r = client.get(f"{SCIM}/Me", headers=token(alice))
    assert r.status_code == 200, r.text
    me = r.json()
    assert {k: me[k] for k in ("id", "userName", "displayName", "active", "schemas")} == {
        "id": alice,
        "userName": alice,
        "displayName": alice,
        "active": True,
        "schemas": [USER_SCHEMA],
    }
    assert sorted((g["value"], g["type"], g["$ref"]) for g in me["groups"]) == sorted(
        [(inner, "direct", f"Groups/{inner}"), (outer, "indirect", f"Groups/{outer}")]
    )
    assert next(g["display"] for g in me["groups"] if g["value"] == outer) == outer_name
    audited = event(client, token, r.headers["x-request-id"])
    assert (audited["principal"], audited["action_name"], audited["decision"]) == (
        alice,
        "principals.me",
        "allow",
    )

    # a principal in no group has none listed (the built-in `account users` holds everyone and
    # is not listed)
    r = client.get(f"{SCIM}/Me", headers=token(unique("loner")))
    assert r.status_code == 200 and r.json()["groups"] == []
    assert client.get(f"{SCIM}/Me").status_code == 401


def test_me_with_a_token_on_behalf_of_a_user_is_that_user(client, token):
    """An app's token acting for carol answers carol, with carol's groups: per-user state keyed by
    `me().id` stays per user. The app is still who made the request: its audit event names it."""
    app, carol, dave = unique("svc-app"), unique("carol"), unique("dave")
    carols = group(client, token, unique("carols-team"), [carol])
    outer = group(client, token, unique("carols-dept"), [carols])
    group(client, token, unique("apps"), [app])  # the app's own group is not carol's

    r = client.get(f"{SCIM}/Me", headers=token(app, on_behalf_of=carol))
    assert r.status_code == 200, r.text
    me = r.json()
    assert (me["id"], me["userName"], me["displayName"]) == (carol, carol, carol)
    assert sorted((g["value"], g["type"]) for g in me["groups"]) == sorted(
        [(carols, "direct"), (outer, "indirect")]
    )
    audited = event(client, token, r.headers["x-request-id"])
    assert (audited["principal"], audited["action_name"], audited["decision"], audited["status_code"]) == (
        app,
        "principals.me",
        "allow",
        200,
    )
    # the end user is kept as the audit log keeps end users (a pseudonym an auditor finds by name)
    assert audited["on_behalf_of"].startswith("ps_") and carol not in str(audited)
    found = client.get(AUDIT, headers=token(), params={"scope": carol, "page_size": 50}).json()["events"]
    assert r.headers["x-request-id"] in [e["request_id"] for e in found]

    # two users of one app are two users; the app alone is the app
    other = client.get(f"{SCIM}/Me", headers=token(app, on_behalf_of=dave)).json()
    assert (other["id"], other["groups"]) == (dave, [])
    itself = client.get(f"{SCIM}/Me", headers=token(app)).json()
    assert itself["id"] == app and [g["display"] for g in itself["groups"]] != []


def test_the_databricks_sdk_current_user_is_the_end_user(live):
    """`WorkspaceClient(host, token).current_user.me()` with the app's forwarded token: the id a
    per-user scope is taken from is the end user's."""
    from databricks.sdk import WorkspaceClient

    settings = Settings(data_dir=live.data_dir)
    admin = httpx.Client(
        base_url=live.url, headers={"Authorization": f"Bearer {mint_dev_token(settings, 'admin')}"}
    )
    with admin:
        r = admin.post(f"{SCIM}/Groups", json={"displayName": "sdk-carols", "members": [{"value": "carol"}]})
        assert r.status_code == 200, r.text
        team = r.json()["id"]

    def me(sub: str, on_behalf_of: str | None = None):  # type: ignore[no-untyped-def]
        bearer = mint_dev_token(settings, sub, on_behalf_of=on_behalf_of)
        return WorkspaceClient(host=live.url, token=bearer, auth_type="pat").current_user.me()

    carol = me("svc-app", on_behalf_of="carol")
    assert (carol.id, carol.user_name, carol.display_name) == ("carol", "carol", "carol")
    assert [(g.value, g.display) for g in carol.groups] == [(team, "sdk-carols")]
    assert me("svc-app", on_behalf_of="erin").id == "erin"
    assert (me("svc-app").id, me("svc-app").groups) == ("svc-app", [])


def test_users_are_the_principals_the_server_knows(client, token):
    signed_in, grantee, member, group_name = unique("carol"), unique("dave"), unique("erin"), unique("team")
    assert client.get(f"{SCIM}/Me", headers=token(signed_in)).status_code == 200
    r = client.patch(
        "/api/2.1/unity-catalog/permissions/catalog/main",
        headers=token(),
        json={
            "changes": [
                {"principal": grantee, "add": ["USE_CATALOG"]},
                {"principal": group_name, "add": ["USE_CATALOG"]},
            ]
        },
    )
    assert r.status_code == 200, r.text
    group(client, token, group_name, [member])

    everyone: set[str] = set()
    while True:
        page = users(client, token, startIndex=len(everyone) + 1)
        if not page["Resources"]:
            break
        everyone |= {u["userName"] for u in page["Resources"]}
    assert len(everyone) == page["totalResults"]
    assert {"admin", signed_in, grantee, member} <= everyone
    assert group_name not in everyone and "account users" not in everyone  # groups are no users

    for name in (signed_in, grantee, member):
        found = users(client, token, filter=f'userName eq "{name}"')
        assert (found["totalResults"], found["itemsPerPage"], found["startIndex"]) == (1, 1, 1)
        (user,) = found["Resources"]
        assert (user["id"], user["userName"]) == (name, name)
        r = client.get(f"{SCIM}/Users/{name}", headers=token())
        assert r.status_code == 200 and r.json()["id"] == name
    (in_team,) = users(client, token, filter=f'id eq "{member}"')["Resources"]
    assert [(g["display"], g["type"]) for g in in_team["groups"]] == [(group_name, "direct")]
    assert users(client, token, filter='userName eq "never-seen"') == {
        "Resources": [],
        "totalResults": 0,
        "startIndex": 1,
        "itemsPerPage": 0,
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:ListResponse"],
    }
    r = client.get(f"{SCIM}/Users/never-seen", headers=token())
    assert (r.status_code, r.json()["error_code"]) == (404, "RESOURCE_DOES_NOT_EXIST")


def test_users_are_for_the_metastore_admin_only(client, token):
    stranger = unique("stranger")
    for path in (f"{SCIM}/Users", f"{SCIM}/Users/admin"):
        r = client.get(path, headers=token(stranger))
        assert (r.status_code, r.json()["error_code"]) == (403, "PERMISSION_DENIED"), path
        assert "list or read the principals" in r.json()["message"]
        audited = event(client, token, r.headers["x-request-id"])
        assert (audited["action_name"], audited["decision"], audited["status_code"]) == (
            "principals.read",
            "deny",
            403,
        )
    # a missing user is 403 too for a stranger (what the server knows is the admin's to see)
    assert client.get(f"{SCIM}/Users/never-seen", headers=token(stranger)).status_code == 403


def test_users_page_by_start_index_and_count(client, token, settings):
    prefix = unique("pager")
    for i in range(5):
        assert client.get(f"{SCIM}/Me", headers=token(f"{prefix}-{i}")).status_code == 200
    total = users(client, token)["totalResults"]
    assert total >= 6  # the admin and the five
    walked, start = [], 1
    while start <= total:
        page = users(client, token, startIndex=start, count=3)
        assert page["startIndex"] == start and page["totalResults"] == total
        assert page["itemsPerPage"] == len(page["Resources"]) == min(3, total - start + 1)
        walked += [u["id"] for u in page["Resources"]]
        start += page["itemsPerPage"]
    assert walked == sorted(walked) and len(set(walked)) == total
    assert [f"{prefix}-{i}" for i in range(5)] == [n for n in walked if n.startswith(prefix)]
    # past the end: nothing; a count above the cap is the cap (the SDK asks for 10,000)
    assert users(client, token, startIndex=total + 1)["Resources"] == []
    assert users(client, token, count=10_000)["itemsPerPage"] == min(total, settings.page_cap)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"startIndex": 0}, "startIndex"),
        ({"count": -1}, "count"),
        ({"count": "ten"}, "count"),
        ({"filter": 'userName co "a"'}, "filter"),
        ({"filter": 'emails eq "a@b"'}, "filter"),
    ],
)
def test_users_list_refuses_what_it_does_not_support(client, token, params, field):
    r = client.get(f"{SCIM}/Users", headers=token(), params=params)
    assert (r.status_code, r.json()["error_code"]) == (400, "INVALID_PARAMETER_VALUE"), r.text
    assert field in r.json()["message"]


def test_a_subject_is_recorded_once_per_process(client, token, monkeypatch):
    """The record of token subjects costs one write per subject, not one per request."""
    assert client.get(f"{SCIM}/Me", headers=token()).status_code == 200  # the admin is recorded
    recorded: list[str] = []
    original = repo.record

    async def spy(conn, name):  # type: ignore[no-untyped-def]
        recorded.append(name)
        await original(conn, name)

    monkeypatch.setattr(repo, "record", spy)
    newcomer = unique("newcomer")
    for _ in range(3):
        assert client.get("/api/2.1/unity-catalog/catalogs", headers=token(newcomer)).status_code == 200
    assert recorded == [newcomer]
    assert users(client, token, filter=f'userName eq "{newcomer}"')["totalResults"] == 1
    # a request that fails authentication records nothing
    bad = client.get("/api/2.1/unity-catalog/catalogs", headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401 and recorded == [newcomer]
