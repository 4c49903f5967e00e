"""Passages: how a long text is cut so that every part of it is searchable.

The model reads at most 256 tokens of a text, and BM25 and the keyword score favour long texts (a
long reply holds more of any query's words than a short statement does). So a text longer than a
passage is cut into passages of about `window` words, each overlapping the one before by
`overlap` words (a fact on a boundary is whole in one of them), at most `most` (the last takes the
rest). Two cuts: the full-text index holds one document per `KEYWORD` passage (short: a passage
competes with a short statement on equal terms) and an entry scores as its best passage; the
model embeds each `VECTOR` passage (about what it reads well) and the entry's vector is their
mean, so that it is made of the whole text, not of its first 256 tokens. A text of up to
`window + overlap` words is one passage: short entries (chat turns, notes) are indexed whole.

A "word" is a run of non-space characters; one longer than `LONG_WORD` characters (a pasted blob,
or text in a script written without spaces) is taken as pieces of `LONG_WORD` characters, so such
texts are cut too. Every passage is a substring of the text.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

LONG_WORD = 24  # characters that count as one more word

_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Cut:
    window: int  # words of a passage
    overlap: int  # words a passage repeats of the one before
    most: int  # passages of one text at most (the last takes the rest)


KEYWORD = Cut(window=48, overlap=12, most=128)
VECTOR = Cut(window=80, overlap=16, most=32)
# A text of n vector passages has as its vector the mean of theirs, and its cosine to a query is
# counted less PASSAGE_PENALTY x ln(n): a long text (an assistant's reply) is near more queries
# than a short statement by its length alone, as the best of n draws is above one draw. Chosen on
# the development conversations of both benchmarks (docs/benchmarks.md), 0 for one passage.
PASSAGE_PENALTY = 0.12


def _words(text: str) -> list[tuple[int, int]]:
    """(start, end) of each word, a long run of non-space characters taken in pieces."""
    out: list[tuple[int, int]] = []
    for match in _WORD.finditer(text):
        start, end = match.span()
        out.extend((at, min(at + LONG_WORD, end)) for at in range(start, end, LONG_WORD))
    return out


def spans(text: str, cut: Cut) -> list[tuple[int, int]]:
    """The passages of `text` as (start, end) character offsets, in order; one span covering the
    whole text when it is short."""
    words = _words(text)
    if len(words) <= cut.window + cut.overlap:
        return [(0, len(text))]
    out: list[tuple[int, int]] = []
    first = 0  # index of the first word of the next passage
    while first < len(words):
        if len(out) == cut.most - 1:
            out.append((words[first][0], len(text)))
            break
        last = min(first + cut.window, len(words))
        out.append((words[first][0], words[last - 1][1]))
        if last >= len(words):
            break
        first = max(last - cut.overlap, first + 1)  # the next one repeats `overlap` words
    return out


def passages(text: str, cut: Cut) -> list[str]:
    """The passages of `text` (see `spans`)."""
    return [text[start:end] for start, end in spans(text, cut)]


def is_short(text: str) -> bool:
    """Whether `text` is one passage of the vector index (at most `VECTOR.window + VECTOR.overlap`
    words): a turn, a note; what ranking lifts next to a hit (`catalog.search.neighbours`)."""
    return len(_words(text)) <= VECTOR.window + VECTOR.overlap


def penalty(passages: int) -> float:
    """What a vector search takes off the cosine of a text of `passages` vector passages."""
    return PASSAGE_PENALTY * math.log(max(passages, 1))
