"""The real `databricks-sdk` WorkspaceClient against a live server (catalogs and schemas)."""

from __future__ import annotations

import pytest
from databricks.sdk import WorkspaceClient
from databricks.sdk.errors import AlreadyExists, InvalidParameterValue, NotFound, PermissionDenied

from catalog.auth import mint_dev_token
from catalog.settings import Settings


def client_for(live, sub: str) -> WorkspaceClient:
    settings = Settings(data_dir=live.data_dir)
    return WorkspaceClient(host=live.url, token=mint_dev_token(settings, sub), auth_type="pat")


def test_catalogs_and_schemas_through_the_sdk(live):
    w = client_for(live, "admin")
    created = w.catalogs.create(name="SDK_Cat", comment="from the sdk", properties={"team": "support"})
    assert (
        created.name == "sdk_cat" and created.owner == "admin" and created.properties == {"team": "support"}
    )
    with pytest.raises(AlreadyExists):
        w.catalogs.create(name="sdk_cat")
    assert w.catalogs.get("sdk_cat").comment == "from the sdk"
    assert "sdk_cat" in [c.name for c in w.catalogs.list()]

    updated = w.catalogs.update("sdk_cat", comment="changed", owner="alice")
    assert updated.comment == "changed" and updated.owner == "alice"

    schema = w.schemas.create(name="agents", catalog_name="sdk_cat", comment="s")
    assert schema.full_name == "sdk_cat.agents" and schema.owner == "admin"
    for i in range(7):
        w.schemas.create(name=f"extra{i}", catalog_name="sdk_cat")
    names = [s.name for s in w.schemas.list(catalog_name="sdk_cat")]  # the SDK follows next_page_token
    assert names == sorted(names) and len(names) == 8
    assert w.schemas.get("sdk_cat.agents").comment == "s"
    assert w.schemas.update("sdk_cat.agents", comment="t").comment == "t"
    w.schemas.delete("sdk_cat.agents")
    with pytest.raises(NotFound):
        w.schemas.get("sdk_cat.agents")
    w.catalogs.delete("sdk_cat", force=True)
    with pytest.raises(NotFound):
        w.catalogs.get("sdk_cat")


def test_renames_through_the_sdk(live):
    """`catalogs.update(name, new_name=)` and `schemas.update(full_name, new_name=)`: ids and
    grants stay, the old names are gone, a taken name is AlreadyExists, a bad one is refused."""
    from databricks.sdk.service.catalog import PermissionsChange, Privilege

    w = client_for(live, "admin")
    catalog = w.catalogs.create(name="sdk_before", properties={"team": "support"})
    schema = w.schemas.create(name="team_before", catalog_name="sdk_before")
    w.grants.update(
        "catalog",
        "sdk_before",
        changes=[PermissionsChange(principal="renata", add=[Privilege.USE_CATALOG, Privilege.USE_SCHEMA])],
    )
    renata = client_for(live, "renata")
    assert renata.schemas.get("sdk_before.team_before").schema_id == schema.schema_id

    renamed = w.catalogs.update("sdk_before", new_name="SDK_After")
    # (the SDK's CatalogInfo has no id: the same object keeps its creation time and properties)
    assert (renamed.name, renamed.full_name, renamed.created_at, renamed.properties) == (
        "sdk_after",
        "sdk_after",
        catalog.created_at,
        {"team": "support"},
    )
    moved = renata.schemas.get("sdk_after.team_before")  # the grant followed the catalog
    assert (moved.full_name, moved.catalog_name, moved.schema_id) == (
        "sdk_after.team_before",
        "sdk_after",
        schema.schema_id,
    )
    updated = w.schemas.update("sdk_after.team_before", new_name="team_after", comment="moved")
    assert (updated.name, updated.full_name, updated.schema_id, updated.comment) == (
        "team_after",
        "sdk_after.team_after",
        schema.schema_id,
        "moved",
    )
    assert [s.full_name for s in renata.schemas.list(catalog_name="sdk_after")] == ["sdk_after.team_after"]
    with pytest.raises(NotFound):
        w.catalogs.get("sdk_before")
    with pytest.raises(NotFound):
        w.schemas.get("sdk_after.team_before")

    w.schemas.create(name="taken", catalog_name="sdk_after")
    with pytest.raises(AlreadyExists):
        w.schemas.update("sdk_after.team_after", new_name="taken")
    with pytest.raises(AlreadyExists):
        w.catalogs.update("sdk_after", new_name="main")
    with pytest.raises(InvalidParameterValue):
        w.catalogs.update("sdk_after", new_name="no spaces")
    with pytest.raises(PermissionDenied):  # USE is not MANAGE
        renata.schemas.update("sdk_after.team_after", new_name="hers")
    assert w.schemas.get("sdk_after.team_after").schema_id == schema.schema_id
    w.catalogs.delete("sdk_after", force=True)


def test_sdk_sees_permission_denied(live):
    stranger = client_for(live, "stranger")
    with pytest.raises(PermissionDenied):
        stranger.catalogs.create(name="not_yours")
    assert [c.name for c in stranger.catalogs.list()] == ["main"]  # account users may use main


def test_grants_and_groups_through_the_sdk(live):
    from databricks.sdk.service.catalog import PermissionsChange, Privilege
    from databricks.sdk.service.iam import ComplexValue

    admin = client_for(live, "admin")
    admin.catalogs.create(name="gov")
    admin.schemas.create(name="team", catalog_name="gov")
    group = admin.groups.create(display_name="sdk_team", members=[ComplexValue(value="sally")])
    assert group.id and group.display_name == "sdk_team"
    assert [m.value for m in admin.groups.get(group.id).members] == ["sally"]

    sally = client_for(live, "sally")
    with pytest.raises(PermissionDenied):
        sally.schemas.get("gov.team")
    admin.grants.update(
        "catalog",
        "gov",
        changes=[PermissionsChange(principal="sdk_team", add=[Privilege.USE_CATALOG, Privilege.USE_SCHEMA])],
    )
    assert sally.schemas.get("gov.team").name == "team"
    listed = admin.grants.get("catalog", "gov")
    assert [(a.principal, sorted(p.value for p in a.privileges)) for a in listed.privilege_assignments] == [
        ("sdk_team", ["USE_CATALOG", "USE_SCHEMA"])
    ]
    effective = sally.grants.get_effective("schema", "gov.team")
    (assignment,) = effective.privilege_assignments
    assert assignment.principal == "sdk_team"
    (use_schema,) = assignment.privileges
    assert use_schema.privilege == Privilege.USE_SCHEMA
    assert use_schema.inherited_from_type.value == "CATALOG" and use_schema.inherited_from_name == "gov"
    admin.grants.update(
        "catalog", "gov", changes=[PermissionsChange(principal="sdk_team", remove=[Privilege.USE_SCHEMA])]
    )
    with pytest.raises(PermissionDenied):
        sally.schemas.get("gov.team")
    admin.groups.delete(group.id)


def test_users_through_the_sdk(live):
    """`current_user.me()` for anyone; `users.list` (which pages by startIndex and asks for
    count=10000) and `users.get` for the metastore admin."""
    newcomer = client_for(live, "newcomer@example.com")
    me = newcomer.current_user.me()
    assert (me.id, me.user_name, me.active, me.groups) == ("newcomer@example.com",) * 2 + (True, [])

    admin = client_for(live, "admin")
    (found,) = admin.users.list(filter='userName eq "newcomer@example.com"')
    assert found.id == found.user_name == "newcomer@example.com"
    everyone = [u.user_name for u in admin.users.list()]
    assert {"admin", "newcomer@example.com"} <= set(everyone) and everyone == sorted(everyone)
    assert admin.users.get("newcomer@example.com").display_name == "newcomer@example.com"
    with pytest.raises(NotFound):
        admin.users.get("nobody-ever")
    with pytest.raises(PermissionDenied):
        list(newcomer.users.list())
