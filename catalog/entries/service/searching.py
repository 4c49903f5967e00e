"""Searching a store's entries: a search (ranked by the engine, `catalog.search`, each hit
re-read here so that a deleted entry or an old version is never answered), a search as of a time,
and deleting what a query finds (`delete_matching`)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from catalog import telemetry
from catalog.access import Securable
from catalog.auth import Principal
from catalog.context import Context
from catalog.entries import operations as ops
from catalog.entries import provenance, repo
from catalog.entries.repo import EntryRow, Held
from catalog.entries.schemas import DELETE_MATCHING_FLOOR, MAX_DELETE_MATCHING, MAX_QUERY, MAX_TOP_K
from catalog.entries.service.core import _as_of, _ensure_may_read, _held, _sees, _written, resolve_store
from catalog.errors import InvalidParameter
from catalog.governance.namespace.service import ensure_not_held
from catalog.recorder import audited, note_params, note_result
from catalog.search import Found, Given, Query
from catalog.wire.entry_keys import validate_path_prefix, validate_scopes, validate_session
from catalog.wire.metadata import validate as validate_metadata

MIN_CANDIDATES = 30  # taken from each search mode before fusion (LoCoMo scores the same with more)
REREAD_MARGIN = 3  # hits read beyond `top_k` with the first rows, for those that may be dropped


def search_input(text: str, top_k: int) -> str:
    """A search's query (stripped) and `top_k`, checked: 400 naming the field. Every search of
    the catalog (entries, transcripts) takes them alike."""
    query = text.strip()
    if not query:
        raise InvalidParameter("query must not be empty", "query")
    if len(query) > MAX_QUERY:
        raise InvalidParameter(f"query must be at most {MAX_QUERY} characters", "query")
    if not 1 <= top_k <= MAX_TOP_K:
        raise InvalidParameter(f"top_k must be between 1 and {MAX_TOP_K}", "top_k")
    return query


@telemetry.memory_operation("search_memory")
async def search(ctx: Context, principal: Principal, op: ops.Search) -> Found[EntryRow]:
    """The hits, best first: the current rows from PostgreSQL with their scores, and the legs
    that may have missed entries (`degraded`)."""

    async def authorize(scopes: list[str]) -> Securable:
        return await resolve_store(ctx, principal, op.store, "entries.read", scopes, fresh=True)

    _, found = await _ranked(ctx, op, authorize, op.top_k, principal)
    note_result(len(found.hits))
    return found


async def _ranked(
    ctx: Context,
    op: ops.Search,
    authorize: Callable[[list[str]], Awaitable[Securable]],
    limit: int,
    principal: Principal,
) -> tuple[Securable, Found[EntryRow]]:
    """A search's ranking: its input checked, the store authorized by `authorize` (handed the
    searched scopes), and at most `limit` hits, best first (every search of entries runs it).
    Entries held for review are ranked only when asked for, and answered as `_held` says."""
    scopes = validate_scopes(None, op.scopes)
    query = search_input(op.query, op.top_k)
    prefix = validate_path_prefix(op.path_prefix)
    session = validate_session(op.session_id) if op.session_id is not None else None
    where = validate_metadata(op.where, "filter") or None
    assert ctx.search is not None
    at = _as_of(op.as_of)
    # the model embeds the query while the request is authorized (the longest step of a search)
    vector = ctx.search.embed_query(query) if op.mode != "keyword" else None
    try:
        store = await authorize(scopes)
    except BaseException:
        if vector is not None:
            vector.cancel()
        raise
    store_id = store.node.id
    held = _held(ctx, principal, store, op.include_quarantined)
    candidates = max(MIN_CANDIDATES, limit * 3)
    if at is not None:
        parts = (store_id, scopes, query, candidates, session, prefix, where, vector)
        return store, await _search_then(ctx, op, *parts, at, limit, held)
    ranking = await ctx.search.rank(
        Query(
            store_id,
            tuple(scopes),
            query,
            candidates,
            op.mode,
            session,
            prefix,
            where=where,
            vector=vector,
            explain=op.explain,
            # held entries are inactive in the indexes too: ranked only when asked for
            include_inactive=op.include_superseded or held.include,
            changes=store.changes,
            unembedded=store.unembedded,
            needed=limit + REREAD_MARGIN,
        )
    )
    ranked = ranking.hits
    if op.min_score is not None:
        ranked = [(doc, score) for doc, score in ranked if score >= op.min_score]
    results: list[tuple[EntryRow, float]] = []
    # the rows of the best `limit` hits and a few more, in one statement (a hit is rarely dropped:
    # changed since it was indexed, or held and not the caller's to read); the rest only if needed
    first, rest = ranked[: limit + REREAD_MARGIN], ranked[limit + REREAD_MARGIN :]
    for chunk in (first, rest):
        if len(results) == limit or not chunk:
            break
        rows = await repo.by_ids(ctx.pool, store_id, [doc for doc, _ in chunk])
        for doc, score in chunk:
            row = rows.get(doc)
            # a hit deleted or moved since it was indexed is dropped; the entry shown is the current one
            if row is None or row.store_id != store_id or row.scope not in scopes:
                continue
            if row.held:
                if not _sees(held, row):  # held, and not asked for or not the caller's to read
                    continue
            elif not row.active and not op.include_superseded:  # superseded since (or a neighbour)
                continue
            results.append((row, round(score, 6)))
            if len(results) == limit:
                break
    return store, Found(results, ranking.degraded, ranking.explained)


@dataclass(frozen=True)
class Forgotten:
    rows: list[EntryRow]  # the entries deleted, best match first (a dry run: that would be)
    truncated: bool  # more matched than one request deletes


def delete_matching_floor(value: float | None) -> float:
    """A forget's `min_score`: the recommended floor when none is given, else above 0 and at most
    1 (a floor of 0 would take whatever the ranking reaches)."""
    if value is None:
        return DELETE_MATCHING_FLOOR
    if not 0 < value <= 1:
        raise InvalidParameter("min_score must be greater than 0 and at most 1", "min_score")
    return value


@telemetry.memory_operation("delete_memory")
async def delete_matching(ctx: Context, principal: Principal, op: ops.DeleteMatching) -> Forgotten:
    """Forget by query: delete the entries of the scopes that the same search as `search` answers
    at or above the floor, at most `MAX_DELETE_MATCHING` (best first; `truncated` when more
    matched). It needs WRITE, and READ too, since the answer says what matched; a store under
    legal hold refuses it (a dry run as well: it answers what the request would do). The entries
    go together in one transaction with the request's audit event (their versions stay in the
    history, as for any delete); an entry changed or deleted since it was ranked is left alone
    and not named. A dry run names the entries and deletes nothing."""
    floor = delete_matching_floor(op.min_score)
    query = ops.Search(
        store=op.store,
        scopes=op.scopes,
        query=op.query,
        top_k=MAX_DELETE_MATCHING,
        path_prefix=op.path_prefix,
        session_id=op.session_id,
        min_score=floor,
        mode=op.mode,
    )

    async def authorize(scopes: list[str]) -> Securable:
        store = await resolve_store(ctx, principal, op.store, "entries.write", scopes, fresh=True)
        await _ensure_may_read(ctx, principal, store, "a delete by query")
        await ensure_not_held(ctx, store, "deleted")
        return store

    store, found = await _ranked(ctx, query, authorize, MAX_DELETE_MATCHING + 1, principal)
    matched = [row for row, _ in found.hits]
    rows, truncated = matched[:MAX_DELETE_MATCHING], len(matched) > MAX_DELETE_MATCHING
    note_params(
        {
            "mode": op.mode,
            "min_score": str(floor),
            "dry_run": str(op.dry_run).lower(),
            "truncated": str(truncated).lower(),
        }
    )
    if op.dry_run or not rows:
        note_result(len(rows))
        return Forgotten(rows, truncated)
    deleted: list[EntryRow] = []
    origin = provenance.of_deletion(principal, op.channel)
    async with audited(ctx.pool) as conn:
        for row in rows:
            gone, _ = await repo.delete(conn, store.node.id, row.id, row.version, principal.name, origin)
            if gone:
                deleted.append(row)
        note_result(len(deleted))
    _written(ctx)
    return Forgotten(deleted, truncated)


AS_OF_SEARCH_MAX = 20_000  # entries of the searched scopes an as-of search ranks, at most


async def _search_then(
    ctx: Context,
    op: ops.Search,
    store_id: str,
    scopes: list[str],
    query: str,
    candidates: int,
    session: str | None,
    prefix: str | None,
    where: dict[str, Any] | None,
    vector: asyncio.Future[Any] | None,
    at: int,
    limit: int,
    held: Held,
) -> Found[EntryRow]:
    """A search of the store as it was at `at`: the versions alive then, from the history,
    ranked exactly (`SearchEngine.rank_given`); the hits are those versions (held for review then
    only as `held` says)."""
    assert ctx.search is not None
    try:
        rows = await repo.as_of(
            ctx.pool,
            store_id,
            scopes,
            at,
            session_id=session,
            path_prefix=prefix,
            where=where,
            limit=AS_OF_SEARCH_MAX + 1,
            include_inactive=op.include_superseded,  # in their state then
            held=held,
        )
        if len(rows) > AS_OF_SEARCH_MAX:
            raise InvalidParameter(
                f"an as-of search ranks at most {AS_OF_SEARCH_MAX:,} entries of its scopes; these held more "
                "then: narrow it with path_prefix, session_id or fewer scopes",
                "as_of",
            )
        given = [
            Given(r.id, r.version, r.scope, r.session_id, r.path, r.contents, r.description, r.created_at)
            for r in rows
        ]
        q = Query(store_id, tuple(scopes), query, candidates, op.mode, vector=vector, explain=op.explain)
        ranking = await ctx.search.rank_given(q, given)
    except BaseException:
        if vector is not None:
            vector.cancel()
        raise
    by_id = {r.id: r for r in rows}
    results = [
        (by_id[doc], round(score, 6))
        for doc, score in ranking.hits
        if op.min_score is None or score >= op.min_score
    ][:limit]
    return Found(results, ranking.degraded, ranking.explained)
