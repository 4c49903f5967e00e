"""SQL for the namespace. The only module of this slice that talks to PostgreSQL; SQLSTATE
classes (never message text) become the catalog's errors here. It answers rows of its own
(`CatalogRow`, `SchemaRow`, `StoreRow`: ids as text, times in epoch milliseconds); the service
shapes them into the wire types."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import Any, TypeAlias

import asyncpg

from catalog.access.securables import SecurableType
from catalog.db import atomic
from catalog.db.locks import POLICY_LOG
from catalog.errors import AlreadyExists, NotFound

Conn: TypeAlias = asyncpg.Connection | asyncpg.Pool

_MS = "(extract(epoch FROM {col}) * 1000)::bigint"


def _audit_columns(alias: str) -> str:
    """owner, properties and the who/when columns of one table, times in epoch milliseconds."""
    return (
        f"{alias}.owner, {alias}.properties, "
        f"(extract(epoch FROM {alias}.created_at) * 1000)::bigint AS created_at, {alias}.created_by, "
        f"(extract(epoch FROM {alias}.updated_at) * 1000)::bigint AS updated_at, {alias}.updated_by"
    )


@dataclass(frozen=True, slots=True)
class NamespaceRow:
    """The columns every namespace table has: its owner, properties and who changed it when."""

    owner: str
    properties: dict[str, str]
    created_at: int
    created_by: str
    updated_at: int
    updated_by: str


def _common(row: Mapping[str, Any]) -> dict[str, Any]:
    return {field.name: row[field.name] for field in fields(NamespaceRow)}


# --- metastore ---------------------------------------------------------------------------------


async def bootstrap(conn: asyncpg.Connection, admin: str) -> bool:
    """First start on an empty database: the metastore row, catalog `main` and schema
    `main.default`, all owned by `admin`, usable by `account users`. Returns True when this call
    created them."""
    async with atomic(conn):
        created = await conn.fetchval(
            "INSERT INTO metastore (admin) VALUES ($1) ON CONFLICT (singleton) DO NOTHING RETURNING id",
            admin,
        )
        if created is None:
            return False
        catalog_id = await conn.fetchval(
            "INSERT INTO catalogs (name, comment, owner, created_by, updated_by) "
            "VALUES ('main', 'Default catalog', $1, $1, $1) RETURNING id",
            admin,
        )
        schema_id = await conn.fetchval(
            "INSERT INTO schemas (catalog_id, name, comment, owner, created_by, updated_by) "
            "VALUES ($1, 'default', 'Default schema', $2, $2, $2) RETURNING id",
            catalog_id,
            admin,
        )
        # as in a Databricks workspace: every authenticated principal may use main and main.default
        await conn.executemany(
            "INSERT INTO grants (securable_type, securable_id, principal, privilege, granted_by) "
            "VALUES ($1, $2, 'account users', $3, $4)",
            [("CATALOG", catalog_id, "USE_CATALOG", admin), ("SCHEMA", schema_id, "USE_SCHEMA", admin)],
        )
    return True


async def get_metastore(conn: Conn) -> asyncpg.Record:
    row = await conn.fetchrow(
        f"SELECT id, admin, {_MS.format(col='created_at')} AS created_at FROM metastore"
    )
    assert row is not None, "metastore is bootstrapped at start"
    return row


# --- catalogs ----------------------------------------------------------------------------------

_CATALOG_SELECT = f"SELECT c.id, c.name, c.comment, {_audit_columns('c')} FROM catalogs c"


@dataclass(frozen=True, slots=True)
class CatalogRow(NamespaceRow):
    id: str
    name: str
    comment: str | None


def _catalog(row: asyncpg.Record) -> CatalogRow:
    return CatalogRow(id=str(row["id"]), name=row["name"], comment=row["comment"], **_common(row))


async def insert_catalog(
    conn: Conn, *, name: str, comment: str | None, properties: dict[str, str], owner: str
) -> CatalogRow:
    try:
        catalog_id = await conn.fetchval(
            "INSERT INTO catalogs (name, comment, properties, owner, created_by, updated_by) "
            "VALUES ($1, $2, $3, $4, $4, $4) RETURNING id",
            name,
            comment,
            properties,
            owner,
        )
    except asyncpg.UniqueViolationError as exc:
        raise AlreadyExists(f"catalog {name} already exists") from exc
    row = await conn.fetchrow(_CATALOG_SELECT + " WHERE c.id = $1", catalog_id)
    assert row is not None
    return _catalog(row)


async def get_catalog(conn: Conn, name: str) -> CatalogRow | None:
    row = await conn.fetchrow(_CATALOG_SELECT + " WHERE c.name = $1", name)
    return _catalog(row) if row else None


async def list_catalogs(conn: Conn, after: str | None, limit: int) -> list[CatalogRow]:
    rows = await conn.fetch(
        _CATALOG_SELECT + " WHERE ($1::text IS NULL OR c.name > $1) ORDER BY c.name LIMIT $2", after, limit
    )
    return [_catalog(row) for row in rows]


async def count_schemas(conn: Conn, catalog_name: str) -> int:
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM schemas s JOIN catalogs c ON c.id = s.catalog_id WHERE c.name = $1",
            catalog_name,
        )
    )


# --- schemas -----------------------------------------------------------------------------------

_SCHEMA_SELECT = (
    f"SELECT s.id, s.name, c.name AS catalog_name, s.comment, {_audit_columns('s')} "
    "FROM schemas s JOIN catalogs c ON c.id = s.catalog_id"
)


@dataclass(frozen=True, slots=True)
class SchemaRow(NamespaceRow):
    id: str
    name: str
    catalog_name: str
    comment: str | None


def _schema(row: asyncpg.Record) -> SchemaRow:
    return SchemaRow(
        id=str(row["id"]),
        name=row["name"],
        catalog_name=row["catalog_name"],
        comment=row["comment"],
        **_common(row),
    )


async def insert_schema(
    conn: Conn,
    *,
    catalog_id: str,
    name: str,
    comment: str | None,
    properties: dict[str, str],
    owner: str,
) -> SchemaRow:
    try:
        schema_id = await conn.fetchval(
            "INSERT INTO schemas (catalog_id, name, comment, properties, owner, created_by, updated_by) "
            "VALUES ($1, $2, $3, $4, $5, $5, $5) RETURNING id",
            catalog_id,
            name,
            comment,
            properties,
            owner,
        )
    except asyncpg.UniqueViolationError as exc:
        raise AlreadyExists(f"schema {name} already exists") from exc
    except asyncpg.ForeignKeyViolationError as exc:
        raise NotFound("catalog does not exist") from exc
    row = await conn.fetchrow(_SCHEMA_SELECT + " WHERE s.id = $1", schema_id)
    assert row is not None
    return _schema(row)


async def get_schema(conn: Conn, catalog: str, name: str) -> SchemaRow | None:
    row = await conn.fetchrow(_SCHEMA_SELECT + " WHERE c.name = $1 AND s.name = $2", catalog, name)
    return _schema(row) if row else None


async def list_schemas(conn: Conn, catalog: str, after: str | None, limit: int) -> list[SchemaRow]:
    rows = await conn.fetch(
        _SCHEMA_SELECT + " WHERE c.name = $1 AND ($2::text IS NULL OR s.name > $2) ORDER BY s.name LIMIT $3",
        catalog,
        after,
        limit,
    )
    return [_schema(row) for row in rows]


async def count_stores(conn: Conn, schema_id: str) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM memory_stores WHERE schema_id = $1", schema_id))


# --- memory stores -----------------------------------------------------------------------------

_STORE_SELECT = (
    "SELECT m.id, m.name, s.name AS schema_name, c.name AS catalog_name, m.description, "
    f"m.scope_binding, m.shared_scopes, m.legal_hold, m.default_ttl_seconds, {_audit_columns('m')} "
    "FROM memory_stores m JOIN schemas s ON s.id = m.schema_id JOIN catalogs c ON c.id = s.catalog_id"
)


@dataclass(frozen=True, slots=True)
class StoreRow(NamespaceRow):
    """A memory store or a session store (each list asks for one kind)."""

    id: str
    name: str
    catalog_name: str
    schema_name: str
    description: str | None
    scope_binding: str
    shared_scopes: list[str]
    legal_hold: bool
    default_ttl_seconds: int | None


def _store(row: Mapping[str, Any]) -> StoreRow:
    return StoreRow(
        id=str(row["id"]),
        name=row["name"],
        catalog_name=row["catalog_name"],
        schema_name=row["schema_name"],
        description=row["description"],
        scope_binding=row["scope_binding"],
        shared_scopes=list(row["shared_scopes"]),
        legal_hold=row["legal_hold"],
        default_ttl_seconds=row["default_ttl_seconds"],
        **_common(row),
    )


async def store_binding(conn: Conn, store_id: str) -> tuple[str, list[str]]:
    row = await conn.fetchrow(
        "SELECT scope_binding, shared_scopes FROM memory_stores WHERE id = $1", store_id
    )
    return (row["scope_binding"], list(row["shared_scopes"])) if row else ("caller", [])


async def set_store_binding(conn: Conn, store_id: str, binding: str | None, shared: list[str] | None) -> None:
    await conn.execute(
        "UPDATE memory_stores SET scope_binding = coalesce($2, scope_binding), "
        "shared_scopes = coalesce($3, shared_scopes) WHERE id = $1",
        store_id,
        binding,
        shared,
    )


async def drop_shared_scopes(conn: Conn, subject: str) -> int:
    """Take the scopes of a data subject (`subject`, and those starting `subject:`) out of every
    store's shared scopes, keeping the others in their order; how many stores changed."""
    status: str = await conn.execute(
        "UPDATE memory_stores SET shared_scopes = array(SELECT s FROM unnest(shared_scopes) "
        "WITH ORDINALITY AS t(s, n) WHERE NOT (s = $1 OR starts_with(s, $1 || ':')) ORDER BY n) "
        "WHERE EXISTS (SELECT 1 FROM unnest(shared_scopes) AS t(s) "
        "WHERE s = $1 OR starts_with(s, $1 || ':'))",
        subject,
    )
    return int(status.split()[-1])


async def set_default_ttl(conn: Conn, store_id: str, seconds: int) -> None:
    """0 clears it."""
    await conn.execute(
        "UPDATE memory_stores SET default_ttl_seconds = nullif($2, 0) WHERE id = $1", store_id, seconds
    )


async def set_legal_hold(conn: Conn, store_id: str, held: bool) -> None:
    await conn.execute("UPDATE memory_stores SET legal_hold = $2 WHERE id = $1", store_id, held)


async def legal_hold(conn: Conn, store_id: str) -> bool:
    return bool(await conn.fetchval("SELECT legal_hold FROM memory_stores WHERE id = $1", store_id))


async def trust_policy(conn: Conn, store_id: str) -> dict[str, Any] | None:
    """The store's trust policy as stored (None: none)."""
    value: dict[str, Any] | None = await conn.fetchval(
        "SELECT trust_policy FROM memory_stores WHERE id = $1", store_id
    )
    return value


async def set_trust_policy(conn: Conn, store_id: str, policy: dict[str, Any] | None, by: str) -> bool:
    """Set (None: remove) the store's trust policy; whether the store exists."""
    status: str = await conn.execute(
        "UPDATE memory_stores SET trust_policy = $2::jsonb, updated_at = clock_timestamp(), updated_by = $3 "
        "WHERE id = $1",
        store_id,
        policy,
        by,
    )
    return status.split()[-1] != "0"


async def insert_store(
    conn: Conn,
    *,
    schema_id: str,
    name: str,
    description: str | None,
    properties: dict[str, str],
    owner: str,
    scope_binding: str = "caller",
    shared_scopes: list[str] | None = None,
    kind: str = "memory",
) -> StoreRow:
    try:
        store_id = await conn.fetchval(
            "INSERT INTO memory_stores "
            "(schema_id, name, description, properties, owner, created_by, updated_by, scope_binding, "
            "shared_scopes, kind) VALUES ($1, $2, $3, $4, $5, $5, $5, $6, $7, $8) RETURNING id",
            schema_id,
            name,
            description,
            properties,
            owner,
            scope_binding,
            shared_scopes or [],
            kind,
        )
    except asyncpg.UniqueViolationError as exc:
        # names are unique per schema across memory and session stores
        raise AlreadyExists(f"a memory or session store named {name} already exists") from exc
    except asyncpg.ForeignKeyViolationError as exc:
        raise NotFound("schema does not exist") from exc
    row = await conn.fetchrow(_STORE_SELECT + " WHERE m.id = $1", store_id)
    assert row is not None
    return _store(row)


def _epoch_ms(text: str) -> int:
    """A timestamptz as JSON writes it, in epoch milliseconds rounded as `_MS` rounds them (half
    away from zero, from exact microseconds)."""
    micros = (datetime.fromisoformat(text) - _EPOCH) // timedelta(microseconds=1)
    return (micros + 500) // 1000 if micros >= 0 else -((-micros + 500) // 1000)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def store_of_row(row: Mapping[str, Any], catalog_name: str, schema_name: str) -> StoreRow:
    """A store from its row as JSON (`to_jsonb`, as the access seam reads it with the store's
    chain: `Securable.row`), in the schema and catalog it was found by."""
    times = {"created_at": _epoch_ms(row["created_at"]), "updated_at": _epoch_ms(row["updated_at"])}
    return _store({**row, **times, "catalog_name": catalog_name, "schema_name": schema_name})


async def get_store(conn: Conn, store_id: str) -> StoreRow | None:
    row = await conn.fetchrow(_STORE_SELECT + " WHERE m.id = $1", store_id)
    return _store(row) if row else None


async def list_stores(
    conn: Conn, schema_id: str, after: str | None, limit: int, kind: str = "memory"
) -> list[StoreRow]:
    rows = await conn.fetch(
        _STORE_SELECT + " WHERE m.schema_id = $1 AND m.kind = $4 AND ($2::text IS NULL OR m.name > $2) "
        "ORDER BY m.name LIMIT $3",
        schema_id,
        after,
        limit,
        kind,
    )
    return [_store(row) for row in rows]


# --- updates and deletes (one shape for the three tables) --------------------------------------

_TABLES = {
    SecurableType.CATALOG: ("catalogs", "comment"),
    SecurableType.SCHEMA: ("schemas", "comment"),
    SecurableType.MEMORY_STORE: ("memory_stores", "description"),
}


async def update_object(
    conn: Conn,
    securable_type: SecurableType,
    object_id: str,
    *,
    text: str | None,
    properties: dict[str, str] | None,
    owner: str | None,
    updated_by: str,
) -> bool:
    """Set the fields given (None leaves a field as it is); returns False if the row is gone."""
    table, text_column = _TABLES[securable_type]  # whitelisted identifiers only
    status: str = await conn.execute(
        f"UPDATE {table} SET {text_column} = COALESCE($2, {text_column}), "
        "properties = COALESCE($3, properties), owner = COALESCE($4, owner), "
        "updated_by = $5, updated_at = clock_timestamp() WHERE id = $1",
        object_id,
        text,
        properties,
        owner,
        updated_by,
    )
    return status.endswith(" 1")


async def rename_object(
    conn: asyncpg.Connection, securable_type: SecurableType, object_id: str, old: str, new: str
) -> bool:
    """Rename one catalog, schema or store from full name `old` to `new` (the same but for the
    last part), within the caller's transaction; returns False if the row is gone.

    Everything else refers to the object by id (grants, entries, lineage, search, conversations,
    sessions, pipelines), so nothing else changes. Only decisions remember names: the authorizer
    caches them by ids and owners, with reasons that name the chain. The rename therefore appends
    a row to `policy_log` (under the policy writers' lock, as the grant triggers do, so `seq`
    follows commit order): the policy revision moves, and every process sharing the database drops
    its cached decisions before it decides on the next request that sees the new name."""
    table, _ = _TABLES[securable_type]  # whitelisted identifiers only
    try:
        status: str = await conn.execute(
            f"UPDATE {table} SET name = $2 WHERE id = $1", object_id, new.rsplit(".", 1)[-1]
        )
    except asyncpg.UniqueViolationError as exc:
        if securable_type == SecurableType.MEMORY_STORE:  # unique per schema across both kinds
            raise AlreadyExists(f"a memory or session store named {new} already exists") from exc
        raise AlreadyExists(f"{securable_type.value.lower()} {new} already exists") from exc
    if not status.endswith(" 1"):
        return False
    await conn.execute("SELECT pg_advisory_xact_lock($1)", POLICY_LOG)
    await conn.execute(
        "INSERT INTO policy_log (kind, op, a, b, c) VALUES ('namespace', 'rename', $1, $2, $3)",
        object_id,
        old,
        new,
    )
    return True


async def delete_object(conn: Conn, securable_type: SecurableType, object_id: str) -> bool:
    table, _ = _TABLES[securable_type]
    status: str = await conn.execute(f"DELETE FROM {table} WHERE id = $1", object_id)
    return status.endswith(" 1")


async def held_stores_keeping(
    conn: Conn, table: str, column: str, scope: str, *, subject: bool = False
) -> list[str]:
    """The stores under legal hold (full names) that have rows of `table` whose `column` is the
    scope (with `subject`: or starts `scope:`); `table` has a `store_id`. `table` and `column`
    are the calling slice's constants, never input."""
    rows = await conn.fetch(
        "SELECT c.name || '.' || s.name || '.' || m.name FROM memory_stores m "
        "JOIN schemas s ON s.id = m.schema_id JOIN catalogs c ON c.id = s.catalog_id "
        f"WHERE m.legal_hold AND EXISTS (SELECT 1 FROM {table} x WHERE x.store_id = m.id "
        f"AND (x.{column} = $1 OR ($2 AND starts_with(x.{column}, $1 || ':')))) ORDER BY 1",
        scope,
        subject,
    )
    return [row[0] for row in rows]
