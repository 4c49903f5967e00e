"""The Tantivy index: BM25 over an entry's contents, description and path words, filtered by
store, scope, session and path prefix. Derived state: it can be thrown away and rebuilt from
PostgreSQL at any time. All methods block; callers run them off the event loop.

A failed commit (a full disk, an I/O error) leaves tantivy's writer killed: later commits either
fail ("index writer was killed") or succeed without the documents added before the failure. So
every change goes through `apply()`, which on any failure rolls the writer back to the last
commit (a fresh writer, nothing pending) and raises, and which checks after the commit that the
index holds what it was given: the caller may move its watermark only when `apply()` returns.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import tantivy

log = logging.getLogger("catalog.search")

ANALYZER = "catalog_en"


def _read_stopwords() -> list[str]:
    """The words of `data/stopwords-en.txt` (package data: one word a line, # comments)."""
    text = (files("catalog.search") / "data" / "stopwords-en.txt").read_text(encoding="utf-8")
    words = {line.strip() for line in text.splitlines()}
    return sorted(w for w in words if w and not w.startswith("#"))


# English function words (see the file for their source), dropped at index and query time:
# questions are full of them and they only add noise to BM25. Read once, at import.
STOPWORDS = _read_stopwords()
_STOPWORD_SET = frozenset(STOPWORDS)
_TOKENS = re.compile(r"[^\W_]+", re.UNICODE)  # what the simple tokenizer keeps (letters and digits)
_QUERY_SYNTAX = re.compile(r"[^\w\s]", re.UNICODE)
_PATH_WORDS = re.compile(r"[/_.\-]+")


def _has_terms(words: str) -> bool:
    """Whether the analyzer leaves any term of `words` (a token under 64 bytes, not a stopword)."""
    return any(
        len(token.encode()) < 64 and token.lower() not in _STOPWORD_SET for token in _TOKENS.findall(words)
    )


def _analyzer() -> Any:
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(64))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.custom_stopword(STOPWORDS))
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _schema() -> Any:
    builder = tantivy.SchemaBuilder()
    for name in ("entry_id", "store_id", "scope", "session", "path"):
        builder.add_text_field(name, stored=name == "entry_id", tokenizer_name="raw", index_option="basic")
    for name in ("contents", "description", "path_words"):
        builder.add_text_field(name, stored=False, tokenizer_name=ANALYZER, index_option="position")
    return builder.build()


class IndexDiverged(RuntimeError):
    """A commit reported success but the index does not hold what it was given."""


@dataclass(frozen=True)
class IndexedEntry:
    entry_id: str
    store_id: str
    scope: str
    session_id: str
    path: str
    contents: str
    description: str


class FullTextIndex:
    """One index directory with its (single) writer."""

    def __init__(self, directory: Path, *, heap_bytes: int = 64 * 1024 * 1024) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.schema = _schema()
        self.index = tantivy.Index(self.schema, path=str(directory), reuse=True)
        self.index.register_tokenizer(ANALYZER, _analyzer())
        self.heap_bytes = heap_bytes
        self.writer = self.index.writer(heap_size=heap_bytes, num_threads=1)
        self.boosts = {"contents": 1.0, "description": 0.5, "path_words": 0.5}

    def close(self) -> None:
        try:
            self.writer.wait_merging_threads()
        except ValueError as exc:  # a merge that failed (full disk): the last commit stands
            log.warning("index %s: merges ended with an error: %s", self.directory, exc)

    def apply(self, deletes: list[str], upserts: list[IndexedEntry]) -> None:
        """Delete and upsert by entry id, commit, and check that the committed index holds every
        upserted entry once and none of the deleted ones. On any failure nothing pending is kept
        (the writer is rolled back) and the exception is raised: retrying the same call is safe."""
        try:
            self.delete(deletes)
            self.upsert(upserts)
            self.commit()
            self.verify(deletes, upserts)
        except BaseException:
            self.rollback()
            raise

    def verify(self, deletes: list[str], upserts: list[IndexedEntry]) -> None:
        searcher = self.index.searcher()

        def count(ids: list[str]) -> int:
            if not ids:
                return 0
            query = tantivy.Query.term_set_query(self.schema, "entry_id", ids)
            return int(searcher.search(query, 1, count=True).count)  # type: ignore[attr-defined]  # missing from the stubs

        held = count([e.entry_id for e in upserts])
        if held != len(upserts):
            raise IndexDiverged(f"the commit kept {held} of {len(upserts)} upserted entries")
        if kept := count(deletes):
            raise IndexDiverged(f"the commit kept {kept} of {len(deletes)} deleted entries")

    def verify_count(self, expected: int) -> None:
        if (held := self.num_docs()) != expected:
            raise IndexDiverged(f"the commit kept {held} of {expected} entries")

    def rollback(self) -> None:
        """Drop everything not committed and make the writer usable again."""
        try:
            self.writer.rollback()
        except ValueError as exc:
            # a writer that cannot even roll back is replaced (dropping it releases its lock)
            log.warning("index %s: rollback failed (%s); opening a new writer", self.directory, exc)
            del self.writer
            self.writer = self.index.writer(heap_size=self.heap_bytes, num_threads=1)

    def upsert(self, entries: list[IndexedEntry]) -> None:
        for entry in entries:
            self.writer.delete_documents_by_term("entry_id", entry.entry_id)
            self.writer.add_document(
                tantivy.Document(
                    entry_id=entry.entry_id,
                    store_id=entry.store_id,
                    scope=entry.scope,
                    session=entry.session_id,
                    path=entry.path,
                    contents=entry.contents,
                    description=entry.description,
                    path_words=_PATH_WORDS.sub(" ", entry.path),
                )
            )

    def delete(self, entry_ids: list[str]) -> None:
        for entry_id in entry_ids:
            self.writer.delete_documents_by_term("entry_id", entry_id)

    def clear(self) -> None:
        self.writer.delete_all_documents()

    def commit(self) -> None:
        self.writer.commit()
        self.index.reload()

    def num_docs(self) -> int:
        return int(self.index.searcher().num_docs)

    def search(
        self,
        store_id: str,
        scopes: list[str],
        text: str,
        limit: int,
        *,
        session_id: str | None = None,
        path_prefix: str | None = None,
    ) -> list[tuple[str, float]]:
        """(entry id, BM25 score), best first, only from the given store and scopes."""
        words = _QUERY_SYNTAX.sub(" ", text).strip()
        if not _has_terms(words):
            return []  # nothing left to match (only stopwords): an empty query would match everything
        parsed, _errors = self.index.parse_query_lenient(
            words, ["contents", "description", "path_words"], field_boosts=self.boosts
        )
        clauses = [
            (tantivy.Occur.Must, tantivy.Query.term_query(self.schema, "store_id", store_id)),
            (tantivy.Occur.Must, tantivy.Query.term_set_query(self.schema, "scope", scopes)),
            (tantivy.Occur.Must, parsed),
        ]
        if session_id is not None:
            clauses.append((tantivy.Occur.Must, tantivy.Query.term_query(self.schema, "session", session_id)))
        if path_prefix:
            pattern = re.escape(path_prefix) + ".*"
            clauses.append((tantivy.Occur.Must, tantivy.Query.regex_query(self.schema, "path", pattern)))
        searcher = self.index.searcher()
        hits = searcher.search(tantivy.Query.boolean_query(clauses), limit).hits
        return [(searcher.doc(address)["entry_id"][0], float(score)) for score, address in hits]
