"""Scores: what each search mode answers, as a relevance in [0, 1] that means the same for every
query, so that `min_score` is an absolute floor (RECOMMENDED_FLOOR says "nothing relevant").

- keyword: the share of the query's term weight an entry's best passage holds
  (`catalog.search.passages`). Each distinct query term (after stopwords and stemming) weighs its
  idf within the searched scopes (BM25's idf formula over the passages the search may return, not
  the whole index: a user's own name is in most of that user's entries and says little there); a
  passage holding terms of 60% of that weight has coverage 0.6. The score is coverage ** 0.7 (an
  entry holding the query's rarer half already scores ~0.6). BM25 picks the candidates and breaks
  ties. A term absent from the scopes keeps its full weight: a question about someone the scopes
  never mention scores low everywhere in them.
- semantic: the cosine similarity of the query's vector and the entry's (the mean of its
  passages'), less 0.12 x ln(its passages) (`passages.PASSAGE_PENALTY`: a long text is near more
  queries by its length alone), through a logistic curve centred on 0.3 (cosine 0.15 -> 0.27,
  0.3 -> 0.5, 0.45 -> 0.73, 0.6 -> 0.88). Cosine alone separates poorly: on LoCoMo the best cosine
  in a scope that does not answer a question is 0.34 at the median, against 0.57 in the scope
  that does.
- hybrid: 0.4 x semantic + 0.6 x keyword, or 0.6 x the better of the two where that is more (a
  strong match of one leg is not hidden by the other's silence), then context: an entry that is a
  neighbour of a better hit (a short entry written just before or after it in its session:
  `catalog.search.neighbours`) is lifted 80% of the way towards that hit's score, so the turn that
  answers a question comes with the turn that asked it (a neighbour that was no candidate starts
  from 0). A lift never goes past the hit, so the best score of a search is always one entry's own.

Measured on the development conversations of both benchmarks (bench/locomo.py, bench/beam.py;
docs/benchmarks.md): the weights, the passages' penalty and the neighbours' rule were chosen so
that a gain on one corpus costs the other nothing; at the recommended floor 0.5, 91% of LoCoMo's
questions searched in another conversation's scope come back empty (86% of BEAM's; no other scale
tried did better there: bench/floor.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from catalog.search.query import HitScores

RECOMMENDED_FLOOR = 0.5


@dataclass(frozen=True)
class FusionWeights:
    semantic_weight: float = 0.4  # the rest is the keyword score's
    cosine_centre: float = 0.3  # the cosine that scores 0.5 in semantic mode
    cosine_width: float = 0.15  # the logistic curve's scale
    coverage_power: float = 0.7
    context: float = 0.8  # how far a neighbour is lifted towards a hit (0: not at all)
    single: float = 0.6  # one leg alone counts this share of its score: its silence hides no match


DEFAULT_WEIGHTS = FusionWeights()


def semantic_score(cosine: float, weights: FusionWeights = DEFAULT_WEIGHTS) -> float:
    z = (cosine - weights.cosine_centre) / weights.cosine_width
    return 1.0 / (1.0 + math.exp(-max(min(z, 50.0), -50.0)))


def keyword_score(coverage: float, weights: FusionWeights = DEFAULT_WEIGHTS) -> float:
    return min(max(coverage, 0.0), 1.0) ** weights.coverage_power


def term_weight(scoped_docs: int, doc_freq: int) -> float:
    """BM25's idf of a term held by `doc_freq` of the `scoped_docs` entries a search may return
    (never below that of a term every one holds: counts taken moments apart, each reused for a
    while, may have `doc_freq` above `scoped_docs`)."""
    scoped_docs = max(scoped_docs, doc_freq)
    return math.log(1.0 + (scoped_docs - doc_freq + 0.5) / (doc_freq + 0.5))


def hybrid_score(cosine: float | None, coverage: float, weights: FusionWeights = DEFAULT_WEIGHTS) -> float:
    """An entry's own hybrid score (before context): the weighted mean of the two legs' scores,
    or `single` times the better one where that is more (a strong match of one leg, of which the
    other says nothing: text the model reads poorly, or a paraphrase with no word in common); an
    entry without a vector yet counts as unrelated on the semantic side."""
    semantic = semantic_score(cosine, weights) if cosine is not None else 0.0
    keyword = keyword_score(coverage, weights)
    mean = weights.semantic_weight * semantic + (1 - weights.semantic_weight) * keyword
    return max(mean, weights.single * max(semantic, keyword))


def own_scores(
    candidates: Iterable[str],
    covered: Mapping[str, float],
    cosine: Mapping[str, float],
    weights: FusionWeights = DEFAULT_WEIGHTS,
) -> dict[str, float]:
    """Each hybrid candidate's own score (`hybrid_score`, before context)."""
    return {doc: hybrid_score(cosine.get(doc), covered.get(doc, 0.0), weights) for doc in candidates}


def lifting(own: Mapping[str, float], needed: int | None) -> list[str]:
    """The candidates whose neighbours may change the first `needed` places of the hybrid
    ranking (all of them when `needed` is None): those whose own score is at least the
    `needed`-th best. A lift stays below the lifting entry's own score, and no entry scores
    less than its own, so a neighbour of any other candidate ends below every entry of those
    places: the ranking's entries scored at least that much, and their order, are those of the
    ranking with every candidate's neighbours."""
    if needed is None or len(own) <= needed:
        return list(own)
    floor = sorted(own.values(), reverse=True)[needed - 1]
    return [doc for doc, score in own.items() if score >= floor]


def with_context(
    own: Mapping[str, float],
    neighbours: Mapping[str, Iterable[str]],
    weights: FusionWeights = DEFAULT_WEIGHTS,
) -> dict[str, float]:
    """Lift each entry towards its best neighbour's own score (`neighbours`: hit -> its numbered
    neighbours, which need not be in `own`: those start from 0)."""
    lift = weights.context
    best: dict[str, float] = {}
    for hit, others in neighbours.items():
        score = own.get(hit, 0.0)
        for other in others:
            if score > best.get(other, 0.0):
                best[other] = score
    scores = dict(own)
    if lift <= 0:
        return scores
    for doc, neighbour in best.items():
        mine = own.get(doc, 0.0)
        if neighbour > mine:
            scores[doc] = mine + lift * (neighbour - mine)
    return scores


def ranked(
    scores: Mapping[str, float], tiebreak: Mapping[str, float] | None = None
) -> list[tuple[str, float]]:
    """Best first; equal scores by `tiebreak` (higher first), then by id (a stable order)."""
    tb = tiebreak or {}
    return sorted(scores.items(), key=lambda item: (-item[1], -tb.get(item[0], 0.0), item[0]))


def fuse(
    mode: str,
    *,
    keyword: Sequence[str],
    semantic: Sequence[str],
    covered: Mapping[str, float],
    cosine: Mapping[str, float],
    near: Mapping[str, Iterable[str]] | None = None,
    bm25: Mapping[str, float] | None = None,
    weights: FusionWeights = DEFAULT_WEIGHTS,
    explain: bool = False,
    own: Mapping[str, float] | None = None,
) -> tuple[list[tuple[str, float]], dict[str, HitScores]]:
    """A search's (id, score), best first, in its mode, from what its legs found: `keyword`'s
    candidates (best first) with each one's share of the query's term weight in `covered` (and
    BM25's score in `bm25`, which breaks ties, where BM25 found it), `semantic`'s candidates
    (best first) with their cosines in `cosine` (also those of keyword candidates that have a
    vector), and in hybrid mode `near`, each candidate's neighbours (`with_context`). With
    `explain`, how each score was made (else the second value is empty); in hybrid mode `own`,
    the candidates' own scores where the caller reckoned them already (`own_scores`, from the
    same `covered`, `cosine` and weights). One rule for every search: the indexes'
    (`SearchEngine.rank`) and the rows an as-of search ranks itself (`rank_given`)."""
    w = weights
    tiebreak = bm25 or {}
    details: dict[str, HitScores] = {}
    if mode == "semantic":
        scores = [(doc, semantic_score(cosine[doc], w)) for doc in semantic]
        if explain:
            details = {doc: HitScores(s, s, semantic=s, cosine=cosine[doc]) for doc, s in scores}
        return scores, details
    if mode == "keyword":
        scores = ranked({doc: keyword_score(covered[doc], w) for doc in keyword}, tiebreak)
        if explain:
            details = {
                doc: HitScores(s, s, keyword=s, coverage=covered[doc], bm25=tiebreak.get(doc))
                for doc, s in scores
            }
        return scores, details
    if own is None:
        own = own_scores(dict.fromkeys([*keyword, *semantic]), covered, cosine, w)
    scores = ranked(with_context(own, near or {}, w), cosine)
    if explain:
        details = {
            doc: HitScores(  # a neighbour that was no candidate has no score of its own
                score,
                own.get(doc, 0.0),
                score - own.get(doc, 0.0),
                keyword=keyword_score(covered[doc], w) if doc in covered else None,
                coverage=covered.get(doc),
                bm25=tiebreak.get(doc),
                semantic=semantic_score(cosine[doc], w) if doc in cosine else None,
                cosine=cosine.get(doc),
            )
            for doc, score in scores
        }
    return scores, details
