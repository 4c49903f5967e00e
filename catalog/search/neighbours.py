"""What hybrid ranking reads from PostgreSQL about its candidates beyond the two ranked lists:
the cosine similarity of candidates only BM25 found, and entries' numbered neighbours.

Numbered neighbours: an entry whose path ends in a number (`/dialog/D1:3`, `/log/0007`) has as
neighbours the entries of the same store, scope and session whose paths are the same but for that
number plus or minus one, written plain or padded to the same width (`/dialog/D1:2`,
`/dialog/D1:4`; `/log/0006`, `/log/0008`). Entries written as a sequence under one folder (a
dialogue's turns, a log's lines) are read as one: the turn that answers a question is the
neighbour of the turn that asked it. Transcript items have no such paths (their path is the
role), so that corpus has no neighbours here.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import asyncpg
import numpy as np

from catalog.search.corpus import ENTRIES, Corpus

_NUMBERED = re.compile(r"^(.*\D)?(\d+)$")


def neighbour_paths(path: str) -> list[str]:
    """The paths of `path`'s numbered neighbours (what `neighbours()` looks up, in Python)."""
    match = _NUMBERED.match(path)
    if match is None:
        return []
    prefix, digits = match.group(1) or "", match.group(2)
    out: list[str] = []
    for number in (int(digits) - 1, int(digits) + 1):
        if number < 0:
            continue
        for text in (str(number), str(number).zfill(len(digits))):
            if prefix + text not in out:
                out.append(prefix + text)
    return out


# The same rule as neighbour_paths(), in SQL: the prefix ends in a non-digit, so the second group
# holds every trailing digit; lpad pads to the original width (never truncates: width is at least
# the new number's length). Each neighbour is looked up by its key, one index probe per wanted
# path (`OFFSET 0` keeps the subquery a lookup per hit): the planner, with no statistics on a
# freshly filled table, otherwise joined every hit with its whole scope first (45 hits in a scope
# of 419 turns: 170 ms).
_NEIGHBOURS_SQL = """
SELECT hit.id::text, other.id::text
FROM {table} hit
CROSS JOIN LATERAL regexp_match(hit.path, '^(.*[^0-9])?([0-9]+)$') AS m(parts)
CROSS JOIN LATERAL (VALUES (m.parts[2]::numeric - 1), (m.parts[2]::numeric + 1)) AS step(number)
CROSS JOIN LATERAL (
  SELECT DISTINCT wanted FROM unnest(ARRAY[
    coalesce(m.parts[1], '') || step.number::text,
    coalesce(m.parts[1], '') || lpad(step.number::text,
                                     greatest(length(m.parts[2]), length(step.number::text)), '0')
  ]) AS wanted
) AS want(path)
CROSS JOIN LATERAL (
  SELECT o.id FROM {table} o
  WHERE o.store_id = hit.store_id AND o.scope = hit.scope AND o.session_id = hit.session_id
    AND o.path = want.path AND ($2::text IS NULL OR starts_with(o.path, $2))
  OFFSET 0
) AS other
WHERE hit.id = ANY($1::uuid[]) AND m.parts IS NOT NULL AND step.number >= 0
"""


async def neighbours(
    pool: asyncpg.Pool, ids: Sequence[str], path_prefix: str | None, corpus: Corpus = ENTRIES
) -> dict[str, list[str]]:
    """Each given entry's numbered neighbours that the search's path prefix admits (same store,
    scope and session by construction)."""
    if corpus is not ENTRIES or not ids:
        return {}
    rows = await pool.fetch(_NEIGHBOURS_SQL.format(table=corpus.table), list(ids), path_prefix)
    out: dict[str, list[str]] = {}
    for hit, other in rows:
        out.setdefault(hit, []).append(other)
    return out


async def similarities(
    pool: asyncpg.Pool, ids: Sequence[str], vector: np.ndarray, corpus: Corpus = ENTRIES
) -> dict[str, float]:
    """The cosine similarity of each given row that has a vector to `vector`."""
    if not ids:
        return {}
    rows = await pool.fetch(
        f"SELECT id::text, 1 - (embedding <=> $2) FROM {corpus.table} "
        "WHERE id = ANY($1::uuid[]) AND embedding IS NOT NULL",
        list(ids),
        vector,
    )
    return {row[0]: float(row[1]) for row in rows}
