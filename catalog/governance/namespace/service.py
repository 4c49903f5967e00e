"""Catalogs, schemas and memory stores: validate, authorize, then one repository call, whose
rows are shaped here into the wire types (`CatalogInfo`, `SchemaInfo`, `MemoryStoreInfo`).

Renames (`new_name` on an update): the object keeps its id, so what is below it keeps its ids,
grants, entries, lineage and search documents, and answers under the new full names at once. The
new name follows the name rule (400 naming `new_name`); a taken one is 409 ALREADY_EXISTS; the
same name is no rename. Audit events keep the full names they were recorded with (history).
The agents schema (`CATALOG_AGENTS_SCHEMA`) and its catalog are not renamed: the agent-memory
dialect finds its stores by that setting, and a rename would take them away from it (400).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

import asyncpg

from catalog import telemetry
from catalog.access import Access, Securable, SecurableType, trust
from catalog.auth import Principal
from catalog.context import Context
from catalog.errors import InvalidParameter, NotFound, ResourceConflict
from catalog.governance.namespace import repo
from catalog.governance.namespace.repo import CatalogRow, SchemaRow, StoreRow
from catalog.governance.namespace.schemas import (
    MAX_COMMENT,
    MAX_PROPERTIES,
    MAX_PROPERTY_KEY,
    MAX_PROPERTY_VALUE,
    MAX_SHARED_SCOPES,
    CatalogCreate,
    CatalogInfo,
    CatalogUpdate,
    ListCatalogsResponse,
    ListMemoryStoresResponse,
    ListSchemasResponse,
    MemoryStoreCreate,
    MemoryStoreInfo,
    MemoryStoreUpdate,
    MetastoreSummary,
    SchemaCreate,
    SchemaInfo,
    SchemaUpdate,
    TrustPolicyInfo,
    TrustRuleInfo,
    TrustTest,
    TrustVerdict,
)
from catalog.recorder.writer import audited, note_params
from catalog.wire.inputs import MAX_SCOPE, blank, has_control, within
from catalog.wire.names import split_full_name, validate_name
from catalog.wire.pagination import Pages, collect_page, page_size

T = TypeVar("T")

CATALOG, SCHEMA, STORE = SecurableType.CATALOG, SecurableType.SCHEMA, SecurableType.MEMORY_STORE


def _text(value: str | None, field: str) -> str | None:
    return within(value, field, MAX_COMMENT)


def _properties(value: dict[str, str] | None) -> dict[str, str] | None:
    if value is None:
        return None
    if len(value) > MAX_PROPERTIES:
        raise InvalidParameter(f"properties may hold at most {MAX_PROPERTIES} entries", "properties")
    for key, item in value.items():
        if not key or len(key) > MAX_PROPERTY_KEY:
            raise InvalidParameter(f"property keys must be 1-{MAX_PROPERTY_KEY} characters", "properties")
        within(item, f"properties.{key}", MAX_PROPERTY_VALUE)
    return value


def _owner(value: str | None) -> str | None:
    if value is not None and (blank(value) or len(value) > 255):
        raise InvalidParameter("owner must be a principal or group name of 1-255 characters", "owner")
    return value


# --- the wire shapes of the repo's rows -------------------------------------------------------------


def _catalog_info(ctx: Context, row: CatalogRow) -> CatalogInfo:
    return CatalogInfo(
        name=row.name,
        full_name=row.name,
        id=row.id,
        metastore_id=ctx.metastore_id,
        owner=row.owner,
        properties=row.properties,
        comment=row.comment,
        created_at=row.created_at,
        created_by=row.created_by,
        updated_at=row.updated_at,
        updated_by=row.updated_by,
    )


def _schema_info(ctx: Context, row: SchemaRow) -> SchemaInfo:
    return SchemaInfo(
        name=row.name,
        full_name=f"{row.catalog_name}.{row.name}",
        catalog_name=row.catalog_name,
        schema_id=row.id,
        metastore_id=ctx.metastore_id,
        owner=row.owner,
        properties=row.properties,
        comment=row.comment,
        created_at=row.created_at,
        created_by=row.created_by,
        updated_at=row.updated_at,
        updated_by=row.updated_by,
    )


def _store_info(ctx: Context, row: StoreRow) -> MemoryStoreInfo:
    return MemoryStoreInfo(
        name=row.name,
        full_name=f"{row.catalog_name}.{row.schema_name}.{row.name}",
        catalog_name=row.catalog_name,
        schema_name=row.schema_name,
        memory_store_id=row.id,
        metastore_id=ctx.metastore_id,
        owner=row.owner,
        properties=row.properties,
        description=row.description,
        scope_binding=row.scope_binding,
        shared_scopes=row.shared_scopes,
        legal_hold=row.legal_hold,
        default_ttl_seconds=row.default_ttl_seconds,
        created_at=row.created_at,
        created_by=row.created_by,
        updated_at=row.updated_at,
        updated_by=row.updated_by,
    )


# --- metastore ---------------------------------------------------------------------------------


async def metastore_summary(ctx: Context, principal: Principal) -> MetastoreSummary:
    await ctx.access.resolve(principal, "metastore.summary", SecurableType.METASTORE, [])
    row = await repo.get_metastore(ctx.pool)
    return MetastoreSummary(
        metastore_id=str(row["id"]),
        name="metastore",
        owner=row["admin"],
        created_at=row["created_at"],
        global_metastore_id=f"catalog:{row['id']}",
    )


# --- catalogs ----------------------------------------------------------------------------------


async def create_catalog(ctx: Context, principal: Principal, body: CatalogCreate) -> CatalogInfo:
    name = validate_name(body.name)
    comment = _text(body.comment, "comment")
    properties = _properties(body.properties) or {}
    await ctx.access.resolve(principal, "catalog.create", SecurableType.METASTORE, [])
    async with audited(ctx.pool) as conn:
        row = await repo.insert_catalog(
            conn, name=name, comment=comment, properties=properties, owner=principal.name
        )
    return _catalog_info(ctx, row)


async def get_catalog(ctx: Context, principal: Principal, name: str) -> CatalogInfo:
    name = validate_name(name)
    await ctx.access.resolve(principal, "catalog.get", CATALOG, [name])
    return _catalog_info(ctx, await _must(repo.get_catalog(ctx.pool, name), f"catalog {name}"))


async def list_catalogs(
    ctx: Context, principal: Principal, max_results: int | None, page_token: str | None
) -> ListCatalogsResponse:
    size = page_size(max_results, default=ctx.settings.page_default, cap=ctx.settings.page_cap)
    root = await ctx.access.resolve(principal, "catalog.list", SecurableType.METASTORE, [])

    def visible(c: CatalogRow) -> bool:
        return ctx.access.visible(
            principal, "catalog.get", Access.child(root, CATALOG, c.name, c.id, c.owner)
        )

    pages = Pages(ctx.pool, "catalogs")
    rows, token = await collect_page(
        lambda after, limit: repo.list_catalogs(ctx.pool, after, limit),
        lambda c: c.name,
        visible,
        pages=pages,
        after=await pages.after(page_token, str),
        size=size,
    )
    return ListCatalogsResponse(catalogs=[_catalog_info(ctx, row) for row in rows], next_page_token=token)


async def update_catalog(ctx: Context, principal: Principal, name: str, body: CatalogUpdate) -> CatalogInfo:
    name = validate_name(name)
    comment, properties, owner = (
        _text(body.comment, "comment"),
        _properties(body.properties),
        _owner(body.owner),
    )
    new_name = _new_name(body.new_name)
    securable = await ctx.access.resolve(principal, "catalog.update", CATALOG, [name])
    rename = _rename(ctx, securable, new_name)
    await _update(ctx, principal, securable, comment, properties, owner, rename=rename)
    name = rename[-1] if rename else name
    return _catalog_info(ctx, await _must(repo.get_catalog(ctx.pool, name), f"catalog {name}"))


async def delete_catalog(ctx: Context, principal: Principal, name: str, force: bool) -> None:
    name = validate_name(name)
    securable = await ctx.access.resolve(principal, "catalog.delete", CATALOG, [name])
    if not force and (count := await repo.count_schemas(ctx.pool, name)):
        raise InvalidParameter(
            f"catalog {name} is not empty ({count} schemas); delete with force=true", "force"
        )
    await _delete(ctx, securable)


# --- schemas -----------------------------------------------------------------------------------


async def create_schema(ctx: Context, principal: Principal, body: SchemaCreate) -> SchemaInfo:
    catalog_name = validate_name(body.catalog_name, "catalog_name")
    name = validate_name(body.name)
    comment = _text(body.comment, "comment")
    properties = _properties(body.properties) or {}
    parent = await ctx.access.resolve(principal, "schema.create", CATALOG, [catalog_name])
    async with audited(ctx.pool) as conn:
        row = await repo.insert_schema(
            conn,
            catalog_id=parent.node.id,
            name=name,
            comment=comment,
            properties=properties,
            owner=principal.name,
        )
    return _schema_info(ctx, row)


async def get_schema(ctx: Context, principal: Principal, full_name: str) -> SchemaInfo:
    catalog_name, name = split_full_name(full_name, 2)
    await ctx.access.resolve(principal, "schema.get", SCHEMA, [catalog_name, name])
    row = await _must(repo.get_schema(ctx.pool, catalog_name, name), f"schema {full_name}")
    return _schema_info(ctx, row)


async def list_schemas(
    ctx: Context,
    principal: Principal,
    catalog_name: str | None,
    max_results: int | None,
    page_token: str | None,
) -> ListSchemasResponse:
    if not catalog_name:
        raise InvalidParameter("catalog_name is required", "catalog_name")
    catalog_name = validate_name(catalog_name, "catalog_name")
    size = page_size(max_results, default=ctx.settings.page_default, cap=ctx.settings.page_cap)
    parent = await ctx.access.resolve(principal, "schema.list", CATALOG, [catalog_name])

    def visible(s: SchemaRow) -> bool:
        return ctx.access.visible(
            principal, "schema.get", Access.child(parent, SCHEMA, s.name, s.id, s.owner)
        )

    pages = Pages(ctx.pool, "schemas", catalog_name=catalog_name)
    rows, token = await collect_page(
        lambda after, limit: repo.list_schemas(ctx.pool, catalog_name, after, limit),
        lambda s: s.name,
        visible,
        pages=pages,
        after=await pages.after(page_token, str),
        size=size,
    )
    return ListSchemasResponse(schemas=[_schema_info(ctx, row) for row in rows], next_page_token=token)


async def update_schema(ctx: Context, principal: Principal, full_name: str, body: SchemaUpdate) -> SchemaInfo:
    catalog_name, name = split_full_name(full_name, 2)
    comment, properties, owner = (
        _text(body.comment, "comment"),
        _properties(body.properties),
        _owner(body.owner),
    )
    new_name = _new_name(body.new_name)
    securable = await ctx.access.resolve(principal, "schema.update", SCHEMA, [catalog_name, name])
    rename = _rename(ctx, securable, new_name)
    await _update(ctx, principal, securable, comment, properties, owner, rename=rename)
    name = rename[-1] if rename else name
    row = await _must(repo.get_schema(ctx.pool, catalog_name, name), f"schema {catalog_name}.{name}")
    return _schema_info(ctx, row)


async def delete_schema(ctx: Context, principal: Principal, full_name: str, force: bool) -> None:
    catalog_name, name = split_full_name(full_name, 2)
    securable = await ctx.access.resolve(principal, "schema.delete", SCHEMA, [catalog_name, name])
    if not force and (count := await repo.count_stores(ctx.pool, securable.node.id)):
        raise InvalidParameter(
            f"schema {securable.full_name} is not empty ({count} memory stores); delete with force=true",
            "force",
        )
    await _delete(ctx, securable)


# --- memory stores -----------------------------------------------------------------------------


@telemetry.memory_operation("create_memory_store")
async def create_store(
    ctx: Context, principal: Principal, body: MemoryStoreCreate, *, kind: str = "memory"
) -> MemoryStoreInfo:
    """`kind`: `memory`, or `session` for a session store (the agent dialect's session stores)."""
    catalog_name = validate_name(body.catalog_name, "catalog_name")
    schema_name = validate_name(body.schema_name, "schema_name")
    name = validate_name(body.name)
    description = _text(body.description, "description")
    properties = _properties(body.properties) or {}
    shared = _shared_scopes(body.shared_scopes)
    parent = await ctx.access.resolve(principal, "memory_store.create", SCHEMA, [catalog_name, schema_name])
    async with audited(ctx.pool) as conn:
        row = await repo.insert_store(
            conn,
            schema_id=parent.node.id,
            name=name,
            description=description,
            properties=properties,
            owner=principal.name,
            scope_binding=body.scope_binding,
            shared_scopes=shared,
            kind=kind,
        )
    return _store_info(ctx, row)


def _shared_scopes(value: list[str] | None) -> list[str] | None:
    if value is None:
        return None
    if len(value) > MAX_SHARED_SCOPES:
        raise InvalidParameter(f"at most {MAX_SHARED_SCOPES} shared scopes", "shared_scopes")
    for scope in value:
        if not scope or len(scope) > MAX_SCOPE or has_control(scope):
            raise InvalidParameter(
                f"shared scopes must be 1-{MAX_SCOPE} characters without control characters",
                "shared_scopes",
            )
    return list(dict.fromkeys(value))


async def get_store(
    ctx: Context, principal: Principal, full_name: str, *, kind: str = "memory"
) -> MemoryStoreInfo:
    parts = split_full_name(full_name, 3)
    securable = await ctx.access.resolve(
        principal, "memory_store.get", STORE, parts, store_kind=kind, whole=True
    )
    return await _store_must(ctx, securable, full_name)


async def see_store(ctx: Context, principal: Principal, full_name: str) -> tuple[MemoryStoreInfo, Securable]:
    """A memory store as a list shows it, for a caller holding any privilege on it (READ, WRITE or
    MANAGE: what `list_stores` shows it for), and its securable, to decide what else to show."""
    parts = split_full_name(full_name, 3)
    securable = await ctx.access.resolve(principal, "memory_store.see", STORE, parts, whole=True)
    return await _store_must(ctx, securable, full_name), securable


async def list_stores(
    ctx: Context,
    principal: Principal,
    catalog_name: str | None,
    schema_name: str | None,
    max_results: int | None,
    page_token: str | None,
    *,
    kind: str = "memory",
) -> ListMemoryStoresResponse:
    for field, value in (("catalog_name", catalog_name), ("schema_name", schema_name)):
        if not value:
            raise InvalidParameter(f"{field} is required", field)
    parts = [
        validate_name(catalog_name or "", "catalog_name"),
        validate_name(schema_name or "", "schema_name"),
    ]
    size = page_size(max_results, default=ctx.settings.page_default, cap=ctx.settings.page_cap)
    parent = await ctx.access.resolve(principal, "memory_store.list", SCHEMA, parts)

    def visible(m: StoreRow) -> bool:
        child = Access.child(parent, STORE, m.name, m.id, m.owner)
        return ctx.access.visible(principal, "memory_store.see", child)

    list_name = "memory_stores" if kind == "memory" else f"{kind}_stores"
    pages = Pages(ctx.pool, list_name, catalog_name=parts[0], schema_name=parts[1])
    rows, token = await collect_page(
        lambda after, limit: repo.list_stores(ctx.pool, parent.node.id, after, limit, kind),
        lambda m: m.name,
        visible,
        pages=pages,
        after=await pages.after(page_token, str),
        size=size,
    )
    return ListMemoryStoresResponse(
        memory_stores=[_store_info(ctx, row) for row in rows], next_page_token=token
    )


async def update_store(
    ctx: Context,
    principal: Principal,
    full_name: str,
    body: MemoryStoreUpdate,
    *,
    add_properties: dict[str, str] | None = None,
    kind: str = "memory",
) -> MemoryStoreInfo:
    """`add_properties` are merged into the store's properties in the same change."""
    parts = split_full_name(full_name, 3)
    description = _text(body.description, "description")
    properties, owner = _properties(body.properties), _owner(body.owner)
    shared = _shared_scopes(body.shared_scopes)
    new_name = _new_name(body.new_name)
    if body.legal_hold is not None:  # setting or releasing a hold is audited as such, allowed or not
        note_params({"legal_hold": str(body.legal_hold).lower()})
    securable = await ctx.access.resolve(principal, "memory_store.update", STORE, parts, store_kind=kind)
    rename = _rename(ctx, securable, new_name)
    if add_properties:
        if properties is None:
            current = await repo.get_store(ctx.pool, securable.node.id)
            properties = dict(current.properties) if current is not None else {}
        properties = _properties({**properties, **add_properties})
    await _update(
        ctx,
        principal,
        securable,
        description,
        properties,
        owner,
        (body.scope_binding, shared),
        body.legal_hold,
        body.default_ttl_seconds,
        rename=rename,
    )
    return await _store_must(ctx, securable, full_name)


@telemetry.memory_operation("delete_memory_store")
async def delete_store(ctx: Context, principal: Principal, full_name: str, *, kind: str = "memory") -> None:
    parts = split_full_name(full_name, 3)
    securable = await ctx.access.resolve(principal, "memory_store.delete", STORE, parts, store_kind=kind)
    await ensure_not_held(ctx, securable, "deleted")
    await _delete(ctx, securable)


async def is_held(ctx: Context, store: Securable) -> bool:
    """Whether the store is under legal hold."""
    return await repo.legal_hold(ctx.pool, store.node.id)


async def ensure_not_held(
    ctx: Context, store: Securable, what: str, *, kind: str = "memory store", things: str = "entries"
) -> None:
    """409 RESOURCE_CONFLICT naming the hold when the store is under legal hold."""
    if await is_held(ctx, store):
        raise held_conflict(store, what, kind=kind, things=things)


def held_conflict(
    store: Securable, what: str, *, kind: str = "memory store", things: str = "entries"
) -> ResourceConflict:
    """The 409 of a change a legal hold refuses (for a caller that read the hold itself)."""
    return ResourceConflict(
        f"{kind} {store.full_name} is under legal hold: its {things} cannot be {what} "
        "until the hold is released"
    )


held_stores_keeping = repo.held_stores_keeping  # each slice answers erasure which held stores keep a scope


# --- shared --------------------------------------------------------------------------------------


def _new_name(value: str | None) -> str | None:
    """A rename's new name, checked like any name; the audit event of the request records it,
    allowed or not (its securable is the object under its old name)."""
    if value is None:
        return None
    new_name = validate_name(value, "new_name")
    note_params({"new_name": new_name})
    return new_name


def _rename(ctx: Context, securable: Securable, new_name: str | None) -> tuple[str, ...] | None:
    """The name parts the object will have, or None when there is nothing to rename (no new name,
    or its own name). The agents schema and its catalog, and the default conversation store and
    what holds it, are refused (400 naming `new_name`)."""
    parts = tuple(securable.full_name.split("."))
    if new_name is None or new_name == parts[-1]:
        return None
    agents = ctx.settings.agents_schema.lower()
    if securable.type != STORE and agents.split(".")[: len(parts)] == list(parts):
        raise InvalidParameter(
            f"{securable.kind} {securable.full_name} holds the agents schema {agents} "
            "(CATALOG_AGENTS_SCHEMA), where the agent-memory dialect finds its stores: it cannot be "
            "renamed while that setting names it",
            "new_name",
        )
    default = (ctx.settings.default_conversation_store or "").lower()
    if default and default.split(".")[: len(parts)] == list(parts):
        raise InvalidParameter(
            f"{securable.kind} {securable.full_name} holds the default conversation store {default} "
            "(CATALOG_DEFAULT_CONVERSATION_STORE), where conversations created without a store go: it "
            "cannot be renamed while that setting names it",
            "new_name",
        )
    return (*parts[:-1], new_name)


async def _update(
    ctx: Context,
    principal: Principal,
    securable: Securable,
    text: str | None,
    properties: dict[str, str] | None,
    owner: str | None,
    binding: tuple[str | None, list[str] | None] = (None, None),
    legal_hold: bool | None = None,
    default_ttl: int | None = None,
    *,
    rename: tuple[str, ...] | None = None,
) -> None:
    """One change (and its audit event) in one transaction; `rename`: the new name parts."""
    async with audited(ctx.pool) as conn:
        found = await repo.update_object(
            conn,
            securable.type,
            securable.node.id,
            text=text,
            properties=properties,
            owner=owner,
            updated_by=principal.name,
        )
        if not found:
            raise NotFound(f"{securable.kind} {securable.full_name} does not exist")
        if binding != (None, None):
            await repo.set_store_binding(conn, securable.node.id, *binding)
        if legal_hold is not None:
            await repo.set_legal_hold(conn, securable.node.id, legal_hold)
        if default_ttl is not None:
            await repo.set_default_ttl(conn, securable.node.id, default_ttl)
        if rename is not None:
            new_full_name = ".".join(rename)
            if not await repo.rename_object(
                conn, securable.type, securable.node.id, securable.full_name, new_full_name
            ):
                raise NotFound(f"{securable.kind} {securable.full_name} does not exist")


async def _delete(ctx: Context, securable: Securable) -> None:
    async with audited(ctx.pool) as conn:
        if not await repo.delete_object(conn, securable.type, securable.node.id):
            raise NotFound(f"{securable.kind} {securable.full_name} does not exist")


async def _must(result: Awaitable[T | None], what: str) -> T:
    value = await result
    if value is None:
        raise NotFound(f"{what} does not exist")
    return value


async def _store_must(ctx: Context, store: Securable, full_name: str) -> MemoryStoreInfo:
    """The store as it is now: as read with its chain when it was (`whole`), else read now (404
    naming `full_name` when it has just gone)."""
    if store.row is not None:
        catalog_name, schema_name, _ = store.full_name.split(".")
        return _store_info(ctx, repo.store_of_row(store.row, catalog_name, schema_name))
    return _store_info(ctx, await _must(repo.get_store(ctx.pool, store.node.id), f"memory store {full_name}"))


async def erase_shared_scopes(conn: asyncpg.Connection, subject: str) -> int:
    """A data subject's scopes out of every store's shared scopes, in the caller's transaction
    (erasure: held stores too, a hold keeps a store's data, not who may reach it); how many
    stores changed."""
    return await repo.drop_shared_scopes(conn, subject)


async def scope_binding(ctx: Context, store: Securable) -> tuple[str, list[str]]:
    """A memory store's scope binding (`caller` or `end_user`) and its shared scopes: as read with
    the store's chain (`locate`, the same statement), else from its row."""
    if store.scope_rules is not None:
        binding, shared = store.scope_rules
        return binding, list(shared)
    return await repo.store_binding(ctx.pool, store.node.id)


# --- a store's trust policy (catalog.access.trust) -----------------------------------------------


async def trust_policy(ctx: Context, store: Securable) -> trust.TrustPolicy | None:
    """A memory store's trust policy (None: none): as read with the store's chain (`locate`, the
    same statement), else from its row."""
    if store.scope_rules is not None:
        return trust.parse(store.trust_policy)
    return trust.parse(await repo.trust_policy(ctx.pool, store.node.id))


def _policy_info(ctx: Context, store: Securable, policy: trust.TrustPolicy | None) -> TrustPolicyInfo:
    if policy is None:
        return TrustPolicyInfo(memory_store=store.full_name)
    own = {id(rule) for rule in trust.BUILTIN}
    rules = [
        TrustRuleInfo(
            name=rule.name, phrases=list(rule.phrases), description=rule.description, builtin=id(rule) in own
        )
        for rule in trust.rules_of(policy)
    ]
    active = policy.screen.classifier and trust.classifier_ready(ctx.llm)
    return TrustPolicyInfo(memory_store=store.full_name, policy=policy, rules=rules, classifier_active=active)


async def get_trust_policy(ctx: Context, principal: Principal, full_name: str) -> TrustPolicyInfo:
    """The store's policy and the screen's rules in effect: readable by whoever holds any privilege
    on the store (a writer may learn why a write was held)."""
    store = await ctx.access.resolve(principal, "trust_policy.read", STORE, split_full_name(full_name, 3))
    return _policy_info(ctx, store, await trust_policy(ctx, store))


async def set_trust_policy(
    ctx: Context, principal: Principal, full_name: str, policy: trust.TrustPolicy | None
) -> TrustPolicyInfo:
    """Set the store's policy (None: remove it; the entries it held stay held until reviewed)."""
    checked = None if policy is None else trust.check(policy)
    note_params({"trust_policy": "removed" if checked is None else "set"})
    store = await ctx.access.resolve(principal, "trust_policy.update", STORE, split_full_name(full_name, 3))
    value = None if checked is None else trust.to_json(checked)
    async with audited(ctx.pool) as conn:
        if not await repo.set_trust_policy(conn, store.node.id, value, principal.name):
            raise NotFound(f"memory store {store.full_name} does not exist")
    return _policy_info(ctx, store, checked)


async def try_trust_policy(
    ctx: Context, principal: Principal, full_name: str, body: TrustTest
) -> TrustVerdict:
    """How a write of `text` through `via` would be judged (by `body.policy`, else the store's);
    nothing is written. With the classifier on, the upstream model judges it as a write's would."""
    proposed = None if body.policy is None else trust.check(body.policy)
    store = await ctx.access.resolve(principal, "trust_policy.read", STORE, split_full_name(full_name, 3))
    policy = proposed if proposed is not None else await trust_policy(ctx, store)
    klass = trust.class_of(body.via, "end-user" if body.on_behalf_of else None)
    if policy is None:
        return TrustVerdict(source_class=klass, via=body.via, decision="trust", held=False, policy=False)
    verdict = await trust.judge(policy, klass, body.via, [body.text], ctx.llm)
    return TrustVerdict(
        source_class=klass,
        via=body.via,
        decision=verdict.decision,
        held=verdict.held,
        rules=list(verdict.rules),
        classifier=verdict.classifier,
    )
