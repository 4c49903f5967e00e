"""What is embedded of an entry (its description, then its contents: `embedding_text`; one text per
passage: `passage_texts`) and embedding rows with the model (`embed_rows`): the embedding worker,
a search's own embedding of rows still lacking their vector, and an as-of search share them."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import numpy as np

from catalog.search.embedder import Embedder
from catalog.search.passages import VECTOR, passages


def embedding_text(contents: str | None, description: str | None) -> str:
    """What a vector is computed from: the description, then the contents (or one passage)."""
    parts = [p.strip() for p in (description, contents) if p and p.strip()]
    return "\n".join(parts) if parts else ""


def passage_texts(contents: str | None, description: str | None) -> list[str]:
    """What a row's vector is the mean of: each of its contents' vector passages
    (`passages.VECTOR`), after its description; one text for a short row."""
    return [embedding_text(part, description) for part in passages(contents or "", VECTOR)]


async def embed_rows(
    embedder: Embedder, rows: Sequence[tuple[str | None, str | None]], *, background: bool = False
) -> list[tuple[np.ndarray, int]]:
    """Each (contents, description)'s vector, the mean of its passages' (normalised), and how
    many passages it has; one model call for every passage of every row."""
    texts = [passage_texts(contents, description) for contents, description in rows]
    flat = [t for parts in texts for t in parts]
    vectors = await embedder.embed(flat, background=background)
    if len(vectors) != len(flat):
        raise RuntimeError(f"the model gave {len(vectors)} vectors for {len(flat)} texts")
    out: list[tuple[np.ndarray, int]] = []
    at = 0
    for parts in texts:
        out.append(row_vector(vectors[at : at + len(parts)]))
        at += len(parts)
    return out


def submit_rows(
    embedder: Embedder, rows: Sequence[tuple[str | None, str | None]], *, background: bool = False
) -> list[list[asyncio.Future[np.ndarray]]]:
    """Each (contents, description)'s passages queued for the model (a started embedder): the
    futures of a row's passages' vectors, row by row (`row_vector` makes the row's of them)."""
    texts = [passage_texts(contents, description) for contents, description in rows]
    flat = embedder.submit([t for parts in texts for t in parts], background=background)
    out = []
    at = 0
    for parts in texts:
        out.append(flat[at : at + len(parts)])
        at += len(parts)
    return out


def row_vector(passages: Sequence[np.ndarray] | np.ndarray) -> tuple[np.ndarray, int]:
    """A row's vector, the mean of its passages' (normalised), and how many passages it has."""
    chunk = np.asarray(passages, dtype=np.float32)
    mean = chunk.mean(axis=0)
    norm = float(np.linalg.norm(mean))
    return (mean / norm if norm else mean, len(chunk))
