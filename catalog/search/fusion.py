"""Hybrid ranking: how keyword (BM25) and semantic (cosine) results are combined.

Reciprocal rank fusion throws the scores away; on conversational memory that loses to BM25 at
rank 1 (see bench/locomo.py). Here each list keeps its scores:
- BM25 scores are divided by the best BM25 score of the query, so the top keyword hit is 1;
- cosine similarities are rescaled from [floor, best] to [0, 1], where floor is the similarity
  of the last candidate (what an unrelated text scores against this query);
- the hybrid score is `keyword_weight * bm25 + (1 - keyword_weight) * cosine`, a document
  missing from one list scoring 0 there.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FusionWeights:
    keyword_weight: float = 0.5


def normalise_keyword(hits: list[tuple[str, float]]) -> dict[str, float]:
    if not hits:
        return {}
    best = max(score for _, score in hits) or 1.0
    return {doc: score / best for doc, score in hits}


def normalise_semantic(hits: list[tuple[str, float]]) -> dict[str, float]:
    if not hits:
        return {}
    best = max(score for _, score in hits)
    floor = min(score for _, score in hits)
    span = best - floor
    if span <= 1e-9:
        return {doc: 1.0 for doc, _ in hits}
    return {doc: (score - floor) / span for doc, score in hits}


def fuse(
    keyword: list[tuple[str, float]],
    semantic: list[tuple[str, float]],
    weights: FusionWeights = FusionWeights(),
) -> list[tuple[str, float]]:
    kw = normalise_keyword(keyword)
    sem = normalise_semantic(semantic)
    w = weights.keyword_weight
    scores = {doc: w * kw.get(doc, 0.0) + (1 - w) * sem.get(doc, 0.0) for doc in kw.keys() | sem.keys()}
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))
