"""Neighbours, which hybrid ranking lifts towards a better hit among them.

Rule: an entry written in a session (a conversation: `session_id` set) has as neighbours the
entries of the same store, scope and session written just before and just after it
(`entries.written`, the order entries were first written in), within `GAP_SECONDS` of it, that
are short: no longer than one passage of the vector index (`passages.is_short`). A session's
turns are read as one: the turn that answers a question is the neighbour of the turn that asked
it. Entries written without a session (notes, preferences, facts) have no neighbours: two notes
written one after the other are no dialogue, and one must not be lifted above the floor for
standing next to the other. A long text
next to a hit is a document of its own, found by what it says, never lifted for where it stands
(on long user-assistant conversations lifting an assistant's long reply next to the user's
statement that matched pushed other evidence out). Nothing here reads a path: entries named
`/t12.md` or `/notes/a` are neighbours by how they were written, as `/dialog/D1:3` is.

Transcript items (the other corpus) have no neighbours here; an as-of search finds the
neighbours among the versions it ranks by the same rule, in creation order
(`SearchEngine.rank_given`).
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from catalog.search import repo
from catalog.search.corpus import ENTRIES, Corpus
from catalog.search.passages import VECTOR, is_short

GAP_SECONDS = 3600.0  # neighbours are written within this long of each other


async def neighbours(
    pool: asyncpg.Pool,
    store_id: str,
    ids: Sequence[str],
    path_prefix: str | None,
    corpus: Corpus = ENTRIES,
    *,
    include_inactive: bool = False,
) -> dict[str, list[str]]:
    """Each given entry's (of the store) neighbours that the search's path prefix admits (active
    ones, unless `include_inactive`), looked up in PostgreSQL (`repo.written_neighbours`)."""
    if corpus is not ENTRIES or not ids:
        return {}
    rows = await repo.written_neighbours(
        pool,
        store_id,
        ids,
        path_prefix,
        include_inactive=include_inactive,
        gap_seconds=GAP_SECONDS,
        short_words=VECTOR.window + VECTOR.overlap,
    )
    return _grouped(rows)


def _grouped(pairs: Sequence[tuple[str, str]]) -> dict[str, list[str]]:
    """(hit, neighbour) pairs as each hit's neighbours."""
    out: dict[str, list[str]] = {}
    for hit, other in pairs:
        out.setdefault(hit, []).append(other)
    return out


def among(rows: Sequence[tuple[str, str, str, int, str | None]], ids: Sequence[str]) -> dict[str, list[str]]:
    """The rule above among given rows (id, scope, session, created epoch ms, contents), in
    creation order (an as-of search ranks versions, which have no write order of their own)."""
    ordered = sorted(rows, key=lambda r: (r[1], r[2], r[3], r[0]))
    wanted = set(ids)
    out: dict[str, list[str]] = {}
    for i, (entry_id, scope, session, created, _) in enumerate(ordered):
        if entry_id not in wanted or not session:
            continue
        near = []
        for j in (i - 1, i + 1):
            if 0 <= j < len(ordered):
                other_id, other_scope, other_session, other_created, contents = ordered[j]
                if (
                    (other_scope, other_session) == (scope, session)
                    and abs(other_created - created) <= GAP_SECONDS * 1000
                    and is_short(contents or "")
                ):
                    near.append(other_id)
        if near:
            out[entry_id] = near
    return out
