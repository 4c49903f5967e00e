"""Transcript search: a store's conversation or session items as episodic memory.

Rules:
- what is searched is the text of message items (user, assistant, system, developer), kept in
  `transcript_items` by triggers on the item tables in the appending transaction, and indexed by
  the search engine like entries (`catalog.search.corpus.TRANSCRIPTS`): BM25 over Tantivy,
  cosine over pgvector, fused; a search sent after an append's answer sees the append;
- a memory store's conversations are searched in the Unity Catalog dialect, by scope; a session
  store's sessions in the agent dialect, by actor (the same thing as a scope). Either needs
  READ_MEMORY_STORE on the store (action `transcripts.search`) and holds the scopes to the
  store's scope binding, as reading the items one by one does;
- hits are read back from PostgreSQL: an item deleted since it was indexed is left out, and no hit
  is ever from another store or scope than asked.
"""

from __future__ import annotations

from catalog.access import Securable, SecurableType
from catalog.auth import Principal
from catalog.context import Context
from catalog.dialects.sessions.service import store_full_name
from catalog.dialects.transcripts import repo
from catalog.dialects.transcripts.repo import TranscriptRow
from catalog.dialects.transcripts.schemas import ConversationSearch, SessionItemSearch
from catalog.entries.service import check_binding, resolve_store, search_input
from catalog.recorder import note_result
from catalog.search import Found, Query
from catalog.search.corpus import TRANSCRIPTS
from catalog.wire.entry_keys import validate_scopes

ACTION = "transcripts.search"
MIN_CANDIDATES = 30  # taken from each mode before fusion, as for entries

Hits = Found[TranscriptRow]


async def search_conversations(
    ctx: Context, principal: Principal, full_name: str, body: ConversationSearch
) -> Hits:
    scopes = validate_scopes(body.scope, body.scopes)
    store = await resolve_store(ctx, principal, full_name, ACTION, scopes)
    thread = f"conversation:{body.conversation_id}" if body.conversation_id is not None else None
    return await _search(
        ctx, store, scopes, body.query, body.top_k, body.mode, thread, body.role, body.min_score
    )


async def search_sessions(
    ctx: Context, principal: Principal, store_name: str, body: SessionItemSearch
) -> Hits:
    scopes = validate_scopes(body.actor_id, body.actor_ids, ("actor_id", "actor_ids"))
    parts = store_full_name(ctx, store_name).split(".")
    store = await ctx.access.resolve(
        principal, ACTION, SecurableType.MEMORY_STORE, parts, store_kind="session"
    )
    await check_binding(ctx, principal, store, scopes)
    thread = f"session:{body.session_id}" if body.session_id is not None else None
    return await _search(
        ctx, store, scopes, body.query, body.top_k, body.mode, thread, body.role, body.min_score
    )


async def _search(
    ctx: Context,
    store: Securable,
    scopes: list[str],
    text: str,
    top_k: int,
    mode: str,
    thread: str | None,
    role: str | None,
    min_score: float | None,
) -> Hits:
    query = search_input(text, top_k)
    assert ctx.search is not None
    store_id = store.node.id
    candidates = max(MIN_CANDIDATES, top_k * 3)
    ranking = await ctx.search.rank(
        Query(store_id, tuple(scopes), query, candidates, mode, thread, role, corpus=TRANSCRIPTS)
    )
    ranked = ranking.hits
    if min_score is not None:
        ranked = [(doc, score) for doc, score in ranked if score >= min_score]
    ranked = ranked[: top_k * 2]
    rows = await repo.by_ids(ctx.pool, store_id, [doc for doc, _ in ranked])
    hits: list[tuple[TranscriptRow, float]] = []
    for doc, score in ranked:
        row = rows.get(doc)
        # an item deleted since it was indexed is dropped
        if row is None or row.store_id != store_id or row.scope not in scopes:
            continue
        if role is not None and row.role != role:
            continue
        hits.append((row, round(score, 6)))
        if len(hits) == top_k:
            break
    note_result(len(hits))
    return Found(hits, ranking.degraded)
