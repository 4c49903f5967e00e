"""`entries:search`: keyword (Tantivy BM25), semantic (pgvector) or both fused.

Only the given scopes of the given store are searched, and every hit is re-read from PostgreSQL
before it is returned, so a deleted entry or an old version is never answered. Keyword search
first waits for the index to hold every write committed before the request (read-your-writes).
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from catalog.audit.writer import note_result
from catalog.auth import Principal
from catalog.context import Context
from catalog.entries import repo
from catalog.entries.schemas import MAX_QUERY, MAX_TOP_K, SearchRequest, SearchResponse, SearchResult
from catalog.entries.service import (
    resolve_store,
    to_entry,
    validate_path_prefix,
    validate_scopes,
    validate_session,
)
from catalog.errors import InvalidParameter
from catalog.search.fusion import fuse

log = logging.getLogger("catalog.search")

# candidates taken from each mode before fusion (LoCoMo scores the same with 30 as with 50 or 100)
MIN_CANDIDATES = 30


async def keyword_hits(
    ctx: Context,
    store_id: str,
    scopes: list[str],
    query: str,
    limit: int,
    session: str | None,
    prefix: str | None,
) -> list[tuple[str, float]]:
    assert ctx.search is not None
    indexer = ctx.search.indexer
    try:
        await indexer.wait_fresh()
    except TimeoutError:
        log.warning("full-text index is behind; searching what it holds")
    index = indexer.index
    assert index is not None
    return await asyncio.to_thread(
        index.search, store_id, scopes, query, limit, session_id=session, path_prefix=prefix
    )


async def semantic_hits(
    ctx: Context,
    store_id: str,
    scopes: list[str],
    query: str,
    limit: int,
    session: str | None,
    prefix: str | None,
) -> list[tuple[str, float]]:
    assert ctx.search is not None
    (vector,), _ = await asyncio.gather(
        ctx.search.embedder.embed([query]), ctx.search.vectors_fresh(store_id, scopes)
    )
    return await ctx.search.vectors.search(
        store_id, scopes, vector, limit, session_id=session, path_prefix=prefix
    )


async def search_entries(
    ctx: Context, principal: Principal, full_name: str, body: SearchRequest
) -> SearchResponse:
    hits = await search_rows(ctx, principal, full_name, body)
    return SearchResponse(
        results=[SearchResult(memory_entry=to_entry(row), score=score) for row, score in hits]
    )


async def search_rows(
    ctx: Context, principal: Principal, full_name: str, body: SearchRequest
) -> list[tuple[asyncpg.Record, float]]:
    """The hits, best first: the current rows from PostgreSQL with their scores."""
    scopes = validate_scopes(body.scope, body.scopes)
    query = body.query.strip()
    if not query:
        raise InvalidParameter("query must not be empty", "query")
    if len(query) > MAX_QUERY:
        raise InvalidParameter(f"query must be at most {MAX_QUERY} characters", "query")
    if not 1 <= body.top_k <= MAX_TOP_K:
        raise InvalidParameter(f"top_k must be between 1 and {MAX_TOP_K}", "top_k")
    prefix = validate_path_prefix(body.path_prefix)
    session = validate_session(body.session_id) if body.session_id is not None else None
    store = await resolve_store(ctx, principal, full_name, "entries.read", scopes)
    assert ctx.search is not None
    store_id = store.node.id
    candidates = max(MIN_CANDIDATES, body.top_k * 3)
    args = (ctx, store_id, scopes, query, candidates, session, prefix)

    if body.mode == "keyword":
        ranked = await keyword_hits(*args)
    elif body.mode == "semantic":
        ranked = await semantic_hits(*args)
    else:
        keyword, semantic = await asyncio.gather(keyword_hits(*args), semantic_hits(*args))
        ranked = fuse(keyword, semantic, ctx.search.weights)

    if body.min_score is not None:
        ranked = [(doc, score) for doc, score in ranked if score >= body.min_score]
    results: list[tuple[asyncpg.Record, float]] = []
    first, rest = ranked[: body.top_k * 2], ranked[body.top_k * 2 :]
    for chunk in (first, rest):
        if len(results) == body.top_k or not chunk:
            break
        rows = await repo.by_ids(ctx.pool, [doc for doc, _ in chunk])
        for doc, score in chunk:
            row = rows.get(doc)
            # a hit deleted or moved since it was indexed is dropped; the entry shown is the current one
            if row is None or str(row["store_id"]) != store_id or row["scope"] not in scopes:
                continue
            results.append((row, round(score, 6)))
            if len(results) == body.top_k:
                break
    note_result(len(results))
    return results
