"""Grants, effective permissions and groups over HTTP, and their effect on every route."""

from __future__ import annotations

import asyncio

import asyncpg
import httpx
import pytest
from rest import UC

SCIM = "/api/2.0/preview/scim/v2/Groups"


def grant(client, token, kind, name, principal, add=(), remove=(), as_="admin", expect=200):
    """Change one principal's privileges; the answer must have status `expect`."""
    r = client.patch(
        f"{UC}/permissions/{kind}/{name}",
        headers=token(as_),
        json={"changes": [{"principal": principal, "add": list(add), "remove": list(remove)}]},
    )
    assert r.status_code == expect, r.text
    return r


def create_store(client, token, name, catalog="corp", schema="support"):
    body = {"name": name, "catalog_name": catalog, "schema_name": schema}
    r = client.post(f"{UC}/memory-stores", headers=token(), json=body)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def corp(client, token):
    """Catalog `corp`, schema `corp.support` and store `corp.support.mem`, owned by the admin and
    granted to nobody. Tests grant on them to principals of their own."""
    assert client.post(f"{UC}/catalogs", headers=token(), json={"name": "corp"}).status_code == 200
    r = client.post(f"{UC}/schemas", headers=token(), json={"name": "support", "catalog_name": "corp"})
    assert r.status_code == 200, r.text
    create_store(client, token, "mem")
    return "corp.support.mem"


def test_bootstrap_grants_account_users_use_on_main(client, token):
    r = client.get(f"{UC}/permissions/catalog/main", headers=token())
    assert r.json()["privilege_assignments"] == [
        {"principal": "account users", "privileges": ["USE_CATALOG"]}
    ]
    r = client.get(f"{UC}/permissions/schema/main.default", headers=token())
    assert r.json()["privilege_assignments"] == [{"principal": "account users", "privileges": ["USE_SCHEMA"]}]
    # so a brand-new principal may use main.default at once
    assert client.get(f"{UC}/schemas/main.default", headers=token("newcomer")).status_code == 200


def test_grant_then_revoke_takes_effect_on_the_next_request(client, token, corp):
    store = f"{UC}/memory-stores/corp.support.mem"
    assert client.get(store, headers=token("alice")).status_code == 403
    r = grant(client, token, "catalog", "corp", "alice", add=["USE CATALOG", "use_schema"])
    assert {"principal": "alice", "privileges": ["USE_CATALOG", "USE_SCHEMA"]} in r.json()[
        "privilege_assignments"
    ]
    r = client.get(store, headers=token("alice"))
    assert r.status_code == 403 and "READ_MEMORY_STORE" in r.json()["message"]
    grant(client, token, "schema", "corp.support", "alice", add=["READ_MEMORY_STORE"])
    assert client.get(store, headers=token("alice")).status_code == 200
    grant(client, token, "schema", "corp.support", "alice", remove=["READ_MEMORY_STORE"])
    assert client.get(store, headers=token("alice")).status_code == 403


def test_patch_is_all_or_nothing_and_validates_privileges(client, token, corp):
    cases = [
        ({"principal": "bob", "add": ["NOT_A_PRIVILEGE"]}, "unknown privilege"),
        ({"principal": "bob", "add": ["USE_CATALOG"]}, "cannot be granted on a schema"),
        ({"principal": "", "add": ["USE_SCHEMA"]}, "principal"),
    ]
    for bad, message in cases:
        r = client.patch(
            f"{UC}/permissions/schema/corp.support",
            headers=token(),
            json={"changes": [{"principal": "bob", "add": ["USE_SCHEMA"]}, bad]},
        )
        assert r.status_code == 400 and message in r.json()["message"], r.text
    r = client.get(f"{UC}/permissions/schema/corp.support", headers=token(), params={"principal": "bob"})
    assert r.json()["privilege_assignments"] == []  # the valid first change was not applied either
    grant(client, token, "schema", "corp.support", "bob", add=["USE_SCHEMA"])  # alone, it is
    r = client.get(f"{UC}/permissions/schema/corp.support", headers=token(), params={"principal": "bob"})
    assert r.json()["privilege_assignments"] == [{"principal": "bob", "privileges": ["USE_SCHEMA"]}]
    r = client.patch(
        f"{UC}/permissions/metastore/{_metastore_id(client, token)}",
        headers=token(),
        json={"changes": [{"principal": "bob", "add": ["READ_MEMORY_STORE"]}]},
    )
    assert r.status_code == 400
    r = client.patch(f"{UC}/permissions/table/corp", headers=token(), json={"changes": []})
    assert r.status_code == 400 and "securable_type" in r.json()["message"]
    r = client.patch(f"{UC}/permissions/catalog/corp", headers=token(), json={"changes": [], "owner": "x"})
    assert r.status_code == 400


def _metastore_id(client, token):
    return client.get(f"{UC}/metastore_summary", headers=token()).json()["metastore_id"]


def test_only_managers_may_grant(client, token, corp):
    grant(client, token, "schema", "corp.support", "eve", add=["READ_MEMORY_STORE"], as_="eve", expect=403)
    grant(client, token, "catalog", "corp", "mgr", add=["USE_CATALOG", "USE_SCHEMA"])
    grant(client, token, "schema", "corp.support", "mgr", add=["MANAGE"])
    r = grant(client, token, "memory_store", "corp.support.mem", "carl", add=["READ_MEMORY_STORE"], as_="mgr")
    assert {"principal": "carl", "privileges": ["READ_MEMORY_STORE"]} in r.json()["privilege_assignments"]
    # MANAGE gives no data access
    assert client.get(f"{UC}/memory-stores/corp.support.mem", headers=token("mgr")).status_code == 403
    # reading grants needs some privilege on the object
    assert (
        client.get(f"{UC}/permissions/memory_store/corp.support.mem", headers=token("mgr")).status_code == 200
    )
    assert (
        client.get(f"{UC}/permissions/memory_store/corp.support.mem", headers=token("eve")).status_code == 403
    )


def test_metastore_grants(client, token):
    ms = _metastore_id(client, token)
    assert client.post(f"{UC}/catalogs", headers=token("creator"), json={"name": "made"}).status_code == 403
    r = client.patch(
        f"{UC}/permissions/metastore/{ms}",
        headers=token(),
        json={"changes": [{"principal": "creator", "add": ["CREATE_CATALOG"]}]},
    )
    assert r.status_code == 200
    r = client.post(f"{UC}/catalogs", headers=token("creator"), json={"name": "made"})
    assert r.status_code == 200 and r.json()["owner"] == "creator"
    r = client.patch(
        f"{UC}/permissions/metastore/{ms}",
        headers=token("creator"),
        json={"changes": [{"principal": "x", "add": ["CREATE_CATALOG"]}]},
    )
    assert r.status_code == 403  # only the admin grants on the metastore


def test_effective_permissions_explain_inheritance_and_groups(client, token, corp):
    r = client.post(
        SCIM, headers=token(), json={"displayName": "support_team", "members": [{"value": "dora"}]}
    )
    assert r.status_code == 200, r.text
    grant(client, token, "catalog", "corp", "support_team", add=["USE_CATALOG", "USE_SCHEMA"])
    grant(client, token, "schema", "corp.support", "support_team", add=["READ_MEMORY_STORE"])
    grant(client, token, "memory_store", "corp.support.mem", "dora", add=["WRITE_MEMORY_STORE"])
    body = client.get(
        f"{UC}/effective-permissions/memory_store/corp.support.mem", headers=token("dora")
    ).json()
    by = {a["principal"]: a["privileges"] for a in body["privilege_assignments"]}
    assert by["support_team"] == [
        {
            "privilege": "READ_MEMORY_STORE",
            "inherited_from_type": "SCHEMA",
            "inherited_from_name": "corp.support",
        }
    ]
    assert by["dora"] == [{"privilege": "WRITE_MEMORY_STORE"}]
    assert client.get(f"{UC}/memory-stores/corp.support.mem", headers=token("dora")).status_code == 200
    # asking about someone else needs MANAGE, ownership or admin
    r = client.get(
        f"{UC}/effective-permissions/memory_store/corp.support.mem",
        headers=token("dora"),
        params={"principal": "alice"},
    )
    assert r.status_code == 403
    r = client.get(
        f"{UC}/effective-permissions/memory_store/corp.support.mem",
        headers=token(),
        params={"principal": "dora"},
    )
    assert r.status_code == 200 and r.json() == body
    # the denial message names the path that is missing, the grant path names the group
    r = client.get(f"{UC}/memory-stores/corp.support.mem", headers=token("outsider"))
    assert "requires USE_CATALOG on catalog corp" in r.json()["message"]


def test_groups_lifecycle_nesting_and_refusals(client, token, corp):
    inner = client.post(
        SCIM, headers=token(), json={"displayName": "inner", "members": [{"value": "ivan"}]}
    ).json()
    outer = client.post(
        SCIM,
        headers=token(),
        json={
            "schemas": ["urn:ietf:params:scim:schemas:core:2.0:Group"],
            "displayName": "outer",
            "members": [{"value": inner["id"]}],
        },
    ).json()
    assert outer["members"] == [{"value": inner["id"], "display": "inner", "type": "Group"}]
    grant(client, token, "catalog", "corp", "outer", add=["USE_CATALOG"])
    assert client.get(f"{UC}/catalogs/corp", headers=token("ivan")).status_code == 200
    # a cycle is refused
    r = client.patch(
        f"{SCIM}/{inner['id']}",
        headers=token(),
        json={"Operations": [{"op": "add", "path": "members", "value": [{"value": outer["id"]}]}]},
    )
    assert r.status_code == 400 and "cycle" in r.json()["message"]
    r = client.patch(
        f"{SCIM}/{inner['id']}",
        headers=token(),
        json={"Operations": [{"op": "add", "path": "members", "value": [{"value": inner["id"]}]}]},
    )
    assert r.status_code == 400
    # only the admin manages groups; members may read theirs
    r = client.post(SCIM, headers=token("ivan"), json={"displayName": "mine"})
    assert r.status_code == 403
    assert client.get(f"{SCIM}/{outer['id']}", headers=token("ivan")).status_code == 200
    assert client.get(f"{SCIM}/{outer['id']}", headers=token("stranger")).status_code == 403
    listed = client.get(SCIM, headers=token("ivan")).json()
    assert sorted(g["displayName"] for g in listed["Resources"]) == ["inner", "outer"]
    filtered = client.get(SCIM, headers=token(), params={"filter": 'displayName eq "outer"'}).json()
    assert filtered["totalResults"] == 1 and filtered["Resources"][0]["id"] == outer["id"]
    # removing the member takes effect on the next request
    r = client.patch(
        f"{SCIM}/{inner['id']}",
        headers=token(),
        json={"Operations": [{"op": "remove", "path": 'members[value eq "ivan"]'}]},
    )
    assert r.status_code == 200 and r.json()["members"] == []
    assert client.get(f"{UC}/catalogs/corp", headers=token("ivan")).status_code == 403
    # duplicates, reserved names, unknown ids
    assert client.post(SCIM, headers=token(), json={"displayName": "inner"}).status_code == 409
    assert client.post(SCIM, headers=token(), json={"displayName": "account users"}).status_code == 400
    assert client.get(f"{SCIM}/not-a-uuid", headers=token()).status_code == 404
    assert client.delete(f"{SCIM}/{outer['id']}", headers=token()).json() == {}
    assert client.get(f"{SCIM}/{outer['id']}", headers=token()).status_code == 404


def test_nesting_deeper_than_the_engine_follows_is_refused(client, token, corp):
    ids = []
    previous = None
    for level in range(9):
        members = [{"value": previous}] if previous else [{"value": "deep_user"}]
        r = client.post(SCIM, headers=token(), json={"displayName": f"level{level}", "members": members})
        assert r.status_code == 200, r.text
        previous = r.json()["id"]
        ids.append(previous)
    grant(client, token, "catalog", "corp", "level8", add=["USE_CATALOG"])
    # nine levels deep: the grant on the outermost group still reaches the principal
    assert client.get(f"{UC}/catalogs/corp", headers=token("deep_user")).status_code == 200
    r = client.post(SCIM, headers=token(), json={"displayName": "level9", "members": [{"value": ids[-1]}]})
    assert r.status_code == 400 and "nest at most 9" in r.json()["message"]


def test_deleting_an_object_drops_its_grants(client, token, corp):
    first = create_store(client, token, "temp")
    grant(client, token, "memory_store", "corp.support.temp", "tina", add=["READ_MEMORY_STORE"])
    r = client.get(f"{UC}/permissions/memory_store/corp.support.temp", headers=token())
    assert r.json()["privilege_assignments"] == [{"principal": "tina", "privileges": ["READ_MEMORY_STORE"]}]
    assert client.get(f"{UC}/memory-stores/corp.support.temp", headers=token("tina")).status_code == 403
    r = client.delete(f"{UC}/memory-stores/corp.support.temp", headers=token())
    assert r.status_code == 200 and r.json() == {}
    # a new store of the same name is another object: the old grants do not come back with the name
    second = create_store(client, token, "temp")
    assert second["memory_store_id"] != first["memory_store_id"]
    r = client.get(f"{UC}/permissions/memory_store/corp.support.temp", headers=token())
    assert r.status_code == 200 and r.json()["privilege_assignments"] == []


def test_ownership_transfer_moves_the_rights(client, token, corp):
    create_store(client, token, "owned")
    assert client.get(f"{UC}/memory-stores/corp.support.owned", headers=token("olive")).status_code == 403
    r = client.patch(f"{UC}/memory-stores/corp.support.owned", headers=token(), json={"owner": "olive"})
    assert r.status_code == 200 and r.json()["owner"] == "olive", r.text
    assert client.get(f"{UC}/memory-stores/corp.support.owned", headers=token("olive")).status_code == 200
    # the owner holds the rights on the object itself, no more: a sibling stays closed to it
    assert client.get(f"{UC}/memory-stores/corp.support.mem", headers=token("olive")).status_code == 403


def test_a_grant_reaches_a_second_server_process_on_the_next_request(
    client, token, corp, database_url, tmp_path, live_server
):
    other = live_server(tmp_path / "second", env={"CATALOG_DATABASE_URL": database_url})
    try:
        # the second process signs with its own dev key: mint with its CLI
        headers = {"Authorization": f"Bearer {other.cli('token', '--sub', 'paula').stdout.strip()}"}
        url = f"{other.url}{UC}/catalogs/corp"
        assert httpx.get(url, headers=headers).status_code == 403
        grant(client, token, "catalog", "corp", "paula", add=["USE_CATALOG"])
        assert httpx.get(url, headers=headers).status_code == 200
        grant(client, token, "catalog", "corp", "paula", remove=["USE_CATALOG"])
        assert httpx.get(url, headers=headers).status_code == 403
    finally:
        other.stop()


def test_policy_log_follows_every_change(client, token, corp, database_url):
    """Every change to grants, groups and memberships appends its row to `policy_log`, in order."""

    async def rows_after(seq: int) -> list[tuple[int, str, str, str, str]]:
        conn = await asyncpg.connect(database_url)
        try:
            rows = await conn.fetch(
                "SELECT seq, kind, op, b, c FROM policy_log WHERE seq > $1 ORDER BY seq", seq
            )
            return [(r["seq"], r["kind"], r["op"], r["b"], r["c"]) for r in rows]
        finally:
            await conn.close()

    def logged(action) -> set[tuple[str, str, str, str]]:  # type: ignore[no-untyped-def]
        """What `action` appended (other tests' changes cannot interleave: one client, in turn)."""
        before = max([row[0] for row in asyncio.run(rows_after(0))], default=0)
        action()
        return {row[1:] for row in asyncio.run(rows_after(before))}

    assert logged(
        lambda: grant(client, token, "catalog", "corp", "logan", add=["USE_CATALOG", "USE_SCHEMA"])
    ) == {("grant", "add", "logan", "USE_CATALOG"), ("grant", "add", "logan", "USE_SCHEMA")}
    assert logged(lambda: grant(client, token, "catalog", "corp", "logan", remove=["USE_SCHEMA"])) == {
        ("grant", "remove", "logan", "USE_SCHEMA")
    }
    group: dict[str, str] = {}

    def create_group() -> None:
        r = client.post(
            SCIM, headers=token(), json={"displayName": "loggers", "members": [{"value": "logan"}]}
        )
        assert r.status_code == 200, r.text
        group.update(r.json())

    assert logged(create_group) == {("group", "add", "loggers", ""), ("member", "add", "principal", "logan")}

    def remove_member() -> None:
        r = client.patch(
            f"{SCIM}/{group['id']}",
            headers=token(),
            json={"Operations": [{"op": "remove", "path": 'members[value eq "logan"]'}]},
        )
        assert r.status_code == 200, r.text

    assert logged(remove_member) == {("member", "remove", "principal", "logan")}

    def delete_group() -> None:
        r = client.delete(f"{SCIM}/{group['id']}", headers=token())
        assert r.status_code == 200 and r.json() == {}, r.text

    assert logged(delete_group) == {("group", "remove", "loggers", "")}
