"""Hybrid ranking: how keyword (BM25) and semantic (cosine) results are combined.

Reciprocal rank fusion throws the scores away, and on conversational memory it loses to BM25 at
rank 1 (see bench/locomo.py). Here both lists keep their scores:
- each list is min-max normalised over the query's candidates (its best hit = 1, its weakest
  candidate = 0): BM25 has no absolute scale, and cosine similarities of one model crowd into a
  narrow band whose position varies from query to query;
- hybrid score = `keyword_weight * bm25 + (1 - keyword_weight) * cosine`; a document missing from
  one list scores 0 there.
On the LoCoMo development conversations (bench/locomo.py, 30-50 candidates a mode) BM25 alone gives
R@1/5/10 = 0.367/0.556/0.640, vectors alone 0.161/0.390/0.511, and this fusion with keyword_weight
0.75 gives 0.368/0.579/0.689 (naive RRF: 0.252/0.488/0.579). Weights 0.65-0.8 all land within
0.01 of that, so nothing hangs on the exact value; the gain is at R@5 and R@10, while at R@1 the
fused ranking only matches BM25.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FusionWeights:
    keyword_weight: float = 0.75


def min_max(hits: list[tuple[str, float]]) -> dict[str, float]:
    if not hits:
        return {}
    best = max(score for _, score in hits)
    low = min(score for _, score in hits) if len(hits) > 1 else 0.0
    if best - low <= 1e-12:
        return {doc: 1.0 for doc, _ in hits}
    return {doc: (score - low) / (best - low) for doc, score in hits}


def fuse(
    keyword: list[tuple[str, float]],
    semantic: list[tuple[str, float]],
    weights: FusionWeights = FusionWeights(),
) -> list[tuple[str, float]]:
    kw = min_max(keyword)
    sem = min_max(semantic)
    w = weights.keyword_weight
    scores = {doc: w * kw.get(doc, 0.0) + (1 - w) * sem.get(doc, 0.0) for doc in kw.keys() | sem.keys()}
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))
