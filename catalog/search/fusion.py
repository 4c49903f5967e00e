"""Hybrid ranking: how keyword (BM25) and semantic (cosine) results are combined.

Reciprocal rank fusion throws the scores away; on conversational memory it loses to BM25 at
rank 1 (see bench/locomo.py). Here both lists keep their scores:
- BM25 scores are min-max normalised over the query's keyword candidates (best = 1, the weakest
  candidate = 0), since BM25 has no absolute scale;
- cosine similarities are used as they are (clipped at 0): they are already on an absolute scale,
  so a weak best semantic match stays weak instead of being stretched to 1;
- hybrid score = `keyword_weight * bm25 + (1 - keyword_weight) * cosine`; a document missing from
  one list scores 0 there.
On the LoCoMo development conversations this gives R@1/5/10 of 0.337/0.556/0.634 against
0.323/0.527/0.604 for BM25 alone and 0.161/0.390/0.511 for vectors alone (naive RRF: 0.252/0.488/0.579).
The weight is the round 0.5: neighbouring weights score within 0.01, so nothing hangs on it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FusionWeights:
    keyword_weight: float = 0.5


def normalise_keyword(hits: list[tuple[str, float]]) -> dict[str, float]:
    if not hits:
        return {}
    best = max(score for _, score in hits)
    low = min(score for _, score in hits) if len(hits) > 1 else 0.0
    if best - low <= 1e-12:
        return {doc: 1.0 for doc, _ in hits}
    return {doc: (score - low) / (best - low) for doc, score in hits}


def normalise_semantic(hits: list[tuple[str, float]]) -> dict[str, float]:
    return {doc: max(0.0, score) for doc, score in hits}


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
