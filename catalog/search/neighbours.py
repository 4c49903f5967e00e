"""Numbered neighbours, which hybrid ranking lifts towards a better hit among them.

Rule: an entry whose path ends in a number (`/dialog/D1:3`, `/log/0007`) has as
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

from catalog.search import repo
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


async def neighbours(
    pool: asyncpg.Pool, store_id: str, ids: Sequence[str], path_prefix: str | None, corpus: Corpus = ENTRIES
) -> dict[str, list[str]]:
    """Each given entry's (of the store) numbered neighbours that the search's path prefix admits
    (same store, scope and session by construction), looked up in PostgreSQL by the same rule
    (`repo.numbered_neighbours`)."""
    if corpus is not ENTRIES or not ids:
        return {}
    out: dict[str, list[str]] = {}
    for hit, other in await repo.numbered_neighbours(pool, store_id, ids, path_prefix, corpus):
        out.setdefault(hit, []).append(other)
    return out
