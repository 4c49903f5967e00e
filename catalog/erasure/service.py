"""Erasure: a scope, or a data subject, taken out of every slice that keeps rows of it.

Rules:
- one transaction, with the request's audit event, erases a scope from each slice that keeps it,
  through that slice's own functions: entries with their history (`catalog.entries`), the
  lineage edges with the scope at either end (`catalog.lineage`), conversations with their
  items (`catalog.dialects.conversations`) and the sessions of the actor the scope is
  (`catalog.dialects.sessions`); all of it or nothing. This slice sits above them all and none of
  them knows of it;
- in one store (`delete_scope`: WRITE on the store, action `entries.write`, the scope held to its
  scope binding) the erasure is refused whole while the store is under legal hold;
- everywhere (`erase`, `erase_subject`: the metastore admin) a store under legal hold keeps what
  it holds of the scope and is named in the answer (`held`);
- a data subject is the scope `subject` and every scope starting `subject:`; once they are
  erased, unless a held store keeps some of them, the subject's audit key is destroyed
  (`catalog.recorder.pseudonyms.forget`), so its events (which hold pseudonyms) can no longer be
  tied to it;
- erasing a subject also takes it out of what names its scopes without being their data, in the
  same transaction, in every store (a legal hold keeps a store's data, not who may reach it nor
  what a report said): the scope patterns of grants limited to scopes that match only its scopes
  (a grant keeps its other patterns; one left with none is revoked, never widened to every scope)
  and the policy log's history of them (`catalog.governance.permissions`), the stores' shared
  scopes (`catalog.governance.namespace`), and the reports and errors of memory pipelines' runs
  (`catalog.dialects.pipelines`, which sits above this slice and registers with `catalog.erasers`).
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from catalog import erasers, telemetry
from catalog.access import SecurableType
from catalog.auth import Principal
from catalog.context import Context
from catalog.dialects import conversations, sessions
from catalog.entries import service as entries
from catalog.errors import InvalidParameter
from catalog.governance.namespace.service import ensure_not_held, erase_shared_scopes
from catalog.governance.permissions import service as permissions
from catalog.lineage import erase_scope as erase_lineage
from catalog.recorder import audited, note_params, note_result
from catalog.recorder.pseudonyms import forget as forget_subject
from catalog.wire.entry_keys import validate_scope


@dataclass(frozen=True)
class Erased:
    stores: list[tuple[str, int]]  # (store full name, entries deleted), by name
    others: dict[str, int]  # the scope's conversations and sessions deleted with them, by kind
    held: list[str]  # stores under legal hold that keep something of the scope (entries, sessions, ...)


@dataclass(frozen=True)
class ErasedSubject(Erased):
    key_destroyed: bool  # the subject's audit key is gone (nothing of it is held)


def _written(ctx: Context) -> None:
    """Wake the indexer: the erased entries leave the search index as any deletion does."""
    assert ctx.search is not None
    ctx.search.written()


async def _held(conn: asyncpg.Connection, scope: str, *, subject: bool = False) -> list[str]:
    """The stores under legal hold that keep anything of the scope (entries, conversations,
    sessions), by name: erasure leaves them alone."""
    held = set(await entries.held_stores(conn, scope, subject=subject))
    held.update(await conversations.held_stores(conn, scope, subject=subject))
    held.update(await sessions.held_stores(conn, scope, subject=subject))
    return sorted(held)


async def _others(
    conn: asyncpg.Connection, store_id: str | None, scope: str, *, subject: bool = False
) -> dict[str, int]:
    """Erase the scope's conversations and sessions (in one store, or every store when None)."""
    return {
        "conversations": await conversations.erase_scope(conn, store_id, scope, subject=subject),
        "sessions": await sessions.erase_scope(conn, store_id, scope, subject=subject),
    }


@telemetry.erasure("scope_in_store")
async def delete_scope(ctx: Context, principal: Principal, store_name: str, scope: str) -> int:
    """Every entry of one scope in one store, with its history, lineage edges, conversations and
    sessions there (right to be forgotten); how many entries."""
    scope = validate_scope(scope)
    store = await entries.resolve_store(ctx, principal, store_name, "entries.write", [scope])
    await ensure_not_held(ctx, store, "deleted")
    async with audited(ctx.pool) as conn:
        deleted = await entries.delete_scope(conn, store.node.id, scope)
        await erase_lineage(conn, store.node.id, scope)  # its edges at either end, in this store
        await _others(conn, store.node.id, scope)
        note_result(deleted)
    _written(ctx)
    return deleted


@telemetry.erasure("scope")
async def erase(ctx: Context, principal: Principal, scope: str) -> Erased:
    """A scope from every store not under legal hold (metastore admin)."""
    scope = validate_scope(scope)
    note_params({"scope": scope})  # the body named it: auditors find the erasure by it (`?scope=`)
    await ctx.access.resolve(principal, "system.erase_scope", SecurableType.METASTORE)
    async with audited(ctx.pool) as conn:
        held = await _held(conn, scope)
        erased = await entries.erase_scope(conn, scope)
        await erase_lineage(conn, None, scope)  # its edges at either end, in every store
        others = await _others(conn, None, scope)
        note_result(sum(count for _, count in erased))
    _written(ctx)
    return Erased(erased, others, held)


@telemetry.erasure("subject")
async def erase_subject(ctx: Context, principal: Principal, subject: str) -> ErasedSubject:
    """A data subject from every store not under legal hold (metastore admin): the scope
    `subject` and every scope starting `subject:` (entries with their history, conversations,
    sessions, lineage edges), and everywhere its scope patterns in grants, its shared scopes and
    the pipeline runs' reports naming it, in one transaction; then, unless a held store keeps some
    of it, the subject's audit key is destroyed."""
    subject = validate_scope(subject, "subject")
    if ":" in subject:
        raise InvalidParameter(
            "subject is what comes before the first ':' of a scope, without ':'", "subject"
        )
    await ctx.access.resolve(principal, "system.erase_subject", SecurableType.METASTORE)
    async with audited(ctx.pool) as conn:
        held = await _held(conn, subject, subject=True)
        erased = await entries.erase_scope(conn, subject, subject=True)
        await erase_lineage(conn, None, subject, subject=True)
        others = await _others(conn, None, subject, subject=True)
        await permissions.erase_subject(conn, subject)
        await erase_shared_scopes(conn, subject)
        for _, eraser in erasers.subject_erasers():
            await eraser(conn, subject)
        destroyed = False if held else await forget_subject(conn, subject)
        note_result(sum(count for _, count in erased))
    _written(ctx)
    return ErasedSubject(erased, others, held, destroyed)
