"""The Tantivy index: BM25 over an entry's contents, description and path words, filtered by
store, scope, session and path prefix. Derived state: it can be thrown away and rebuilt from
PostgreSQL at any time. All methods block; callers run them off the event loop."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tantivy

ANALYZER = "catalog_en"

# English function words (the common NLTK list, plus question words and "user"-style filler),
# dropped at index and query time: questions are full of them and they only add noise to BM25.
STOPWORDS = sorted(
    set(
        [
            "a",
            "about",
            "above",
            "after",
            "again",
            "against",
            "all",
            "am",
            "an",
            "and",
            "any",
            "are",
            "aren't",
            "as",
            "at",
            "be",
            "because",
            "been",
            "before",
            "being",
            "below",
            "between",
            "both",
            "but",
            "by",
            "can",
            "can't",
            "cannot",
            "could",
            "couldn't",
            "did",
            "didn't",
            "do",
            "does",
            "doesn't",
            "doing",
            "don't",
            "down",
            "during",
            "each",
            "few",
            "for",
            "from",
            "further",
            "had",
            "hadn't",
            "has",
            "hasn't",
            "have",
            "haven't",
            "having",
            "he",
            "he'd",
            "he'll",
            "he's",
            "her",
            "here",
            "here's",
            "hers",
            "herself",
            "him",
            "himself",
            "his",
            "how",
            "how's",
            "i",
            "i'd",
            "i'll",
            "i'm",
            "i've",
            "if",
            "in",
            "into",
            "is",
            "isn't",
            "it",
            "it's",
            "its",
            "itself",
            "let's",
            "me",
            "more",
            "most",
            "mustn't",
            "my",
            "myself",
            "no",
            "nor",
            "not",
            "of",
            "off",
            "on",
            "once",
            "only",
            "or",
            "other",
            "ought",
            "our",
            "ours",
            "ourselves",
            "out",
            "over",
            "own",
            "same",
            "shan't",
            "she",
            "she'd",
            "she'll",
            "she's",
            "should",
            "shouldn't",
            "so",
            "some",
            "such",
            "than",
            "that",
            "that's",
            "the",
            "their",
            "theirs",
            "them",
            "themselves",
            "then",
            "there",
            "there's",
            "these",
            "they",
            "they'd",
            "they'll",
            "they're",
            "they've",
            "this",
            "those",
            "through",
            "to",
            "too",
            "under",
            "until",
            "up",
            "very",
            "was",
            "wasn't",
            "we",
            "we'd",
            "we'll",
            "we're",
            "we've",
            "were",
            "weren't",
            "what",
            "what's",
            "when",
            "when's",
            "where",
            "where's",
            "which",
            "while",
            "who",
            "who's",
            "whom",
            "why",
            "why's",
            "will",
            "with",
            "won't",
            "would",
            "wouldn't",
            "you",
            "you'd",
            "you'll",
            "you're",
            "you've",
            "your",
            "yours",
            "yourself",
            "yourselves",
            "s",
            "t",
            "d",
            "ll",
            "m",
            "re",
            "ve",
            "don",
            "doesn",
            "didn",
            "isn",
            "wasn",
            "aren",
            "weren",
            "hasn",
            "haven",
            "hadn",
            "won",
            "wouldn",
            "shouldn",
            "couldn",
            "mustn",
            "shan",
        ]
    )
)
_QUERY_SYNTAX = re.compile(r"[^\w\s]", re.UNICODE)
_PATH_WORDS = re.compile(r"[/_.\-]+")


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
        self.writer = self.index.writer(heap_size=heap_bytes, num_threads=1)
        self.boosts = {"contents": 1.0, "description": 0.5, "path_words": 0.5}

    def close(self) -> None:
        self.writer.wait_merging_threads()

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
        if not words:
            return []
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
