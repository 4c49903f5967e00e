"""Batch writes: up to `MAX_BATCH` writes of one store in one request, each a change of its own."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from catalog import telemetry
from catalog.auth import Principal
from catalog.context import Context
from catalog.entries import operations as ops
from catalog.entries import provenance, repo
from catalog.entries.repo import EntryRow, Fields, Key
from catalog.entries.service.core import (
    _before_write,
    _expire,
    _fields,
    _judge,
    _judged,
    _key,
    _texts,
    _written,
    resolve_store,
)
from catalog.errors import AlreadyExists, CatalogError, FieldError, InvalidParameter, ResourceConflict
from catalog.governance.namespace.service import is_held
from catalog.recorder import audited, note_result
from catalog.wire.entry_keys import validate_scope

MAX_BATCH = 100


@dataclass(frozen=True)
class BatchResult:
    path: str
    status: str  # CREATED, UPDATED, UNCHANGED or FAILED
    error_code: str | None = None
    message: str | None = None
    held: bool = False  # written, and held for review by the store's trust policy


@telemetry.memory_operation("create_memory")
async def batch_write(ctx: Context, principal: Principal, op: ops.Batch) -> list[BatchResult]:
    """Up to `MAX_BATCH` writes into one scope, authorized once, committed together with the
    request's audit event; each entry succeeds or fails on its own (a savepoint each), so one
    conflict does not undo the others. Committed at once, they are indexed and embedded as one
    unit of background work."""
    scope = validate_scope(op.scope)
    if not 1 <= len(op.writes) <= MAX_BATCH:
        raise InvalidParameter(f"entries must hold 1-{MAX_BATCH} entries", "entries")
    store = await resolve_store(ctx, principal, op.store, "entries.write", [scope])
    readable = ctx.access.visible(principal, "entries.read", store, [scope])
    held = await is_held(ctx, store)
    results: list[BatchResult | None] = [None] * len(op.writes)
    checked: list[tuple[int, Key, Fields, ops.Write]] = []
    seen: set[Key] = set()
    for i, write_op in enumerate(op.writes):
        try:
            fields = _fields(write_op)
            if write_op.mode == "APPEND" and not fields.contents:
                raise InvalidParameter("write_mode APPEND needs contents to append", "contents")
            key = _key(store, write_op.key)
            if key in seen:
                raise InvalidParameter(f"path {key.path} is given twice in this batch", "path")
            if write_op.derived_from or write_op.origin is not None:
                raise InvalidParameter(
                    "derived_from is not taken in a batch: write the entry alone", "derived_from"
                )
            seen.add(key)
            verdict = await _judge(ctx, principal, store, op.channel, _texts(fields))
            fields = _judged(fields, provenance.of_change(principal, op.channel, verdict=verdict), verdict)
            checked.append((i, key, fields, write_op))
        except FieldError as exc:
            field = f"entries[{i}].{exc.field}" if exc.field else f"entries[{i}]"
            results[i] = BatchResult(write_op.key.path, "FAILED", exc.error_code, f"{field}: {exc.message}")
    async with audited(ctx.pool) as conn:
        for i, key, fields, write_op in checked:
            try:
                async with repo.savepoint(conn):  # a failure undoes this entry's write only
                    results[i] = await _batch_one(conn, principal, key, fields, write_op, readable, held)
            except CatalogError as exc:
                results[i] = BatchResult(key.path, "FAILED", exc.error_code, exc.message)
        note_result(sum(1 for r in results if r is not None and r.status != "FAILED"))
    _written(ctx)
    return [r for r in results if r is not None]


async def _batch_one(
    conn: asyncpg.Connection,
    principal: Principal,
    key: Key,
    fields: Fields,
    op: ops.Write,
    readable: bool,
    held: bool,
) -> BatchResult:
    ready = await _before_write(conn, key)
    existing = await repo.get(conn, key)
    row: EntryRow | None
    if op.mode == "EXCLUSIVE":
        row = await repo.insert_exclusive(conn, key, fields, principal.name)
        if row is None:
            raise AlreadyExists(f"an entry already exists at {key.path} in scope {key.scope}")
    elif op.mode == "OVERWRITE":
        if existing is not None and held:
            raise ResourceConflict("the memory store is under legal hold: an entry cannot be overwritten")
        row = await repo.upsert_overwrite(conn, key, fields, principal.name)
    else:
        row = await repo.upsert_append(conn, key, fields, principal.name, dedupe=readable)
        if row is None:
            return BatchResult(key.path, "UNCHANGED")
    await _expire(conn, row, op.ttl_seconds, ready.default_ttl)
    return BatchResult(key.path, "UPDATED" if existing is not None else "CREATED", held=row.held)
