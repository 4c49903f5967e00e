"""The fast fake embedder of the tests (and of the benchmarks that measure what is not the model):
a deterministic, normalised bag of hashed words and word pairs. It lives here, not in the package:
the server always embeds with the real model (`catalog.search.embedder.OnnxEncoder`)."""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Sequence

import numpy as np

from catalog.search.embedder import DIMENSIONS

_WORD = re.compile(r"\w+")


class HashEncoder:
    """A fast, deterministic stand-in for tests: a normalised bag of hashed words (and word
    pairs). Texts sharing words are similar; it knows no synonyms."""

    def __init__(self, dimensions: int = DIMENSIONS) -> None:
        self.dimensions = dimensions
        self.model_id = f"hash:{dimensions}"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            words = [w.lower() for w in _WORD.findall(text)]
            for token in words + [f"{a} {b}" for a, b in itertools.pairwise(words)]:
                h = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
                out[row, h % self.dimensions] += 1.0 if (h >> 63) & 1 else -1.0
            norm = np.linalg.norm(out[row])
            if norm:
                out[row] /= norm
            else:
                out[row, 0] = 1.0
        return out
