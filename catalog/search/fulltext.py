"""The Tantivy index: BM25 over an entry's contents, description and path words, filtered by
store, scope, session and path prefix. Derived state: it can be thrown away and rebuilt from
PostgreSQL at any time. All methods block; callers run them off the event loop.

A failed commit (a full disk, an I/O error) leaves tantivy's writer killed: later commits either
fail ("index writer was killed") or succeed without the documents added before the failure. So
every change goes through `apply()`, which on any failure rolls the writer back to the last
commit (a fresh writer, nothing pending) and raises, and which checks after the commit that the
index holds what it was given: the caller may move its watermark only when `apply()` returns.

An index directory has a single writer at a time, guarded by tantivy's own lock (see
`writer_held`): opening one where another writer lives raises `WriterLocked`, the one signal
callers act on (an index slot a server holds, skipped), never the text of tantivy's error. Other
processes may read the same directory (`FullTextIndex(directory, write=False)`): they see what
the writer committed once they `reload()`, and one of them may take the writer's place once it
is gone (`take_writer`).

A search reads one commit of the index through a `View`, which keeps what searches read from it
that only a commit changes (an address's entry id, a term's document frequency); the view is
read again when the index's `meta.json` changed (a commit of any process, a finished merge).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import time
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from importlib.resources import files
from pathlib import Path
from typing import Any

import tantivy

from catalog.search.fusion import term_weight
from catalog.search.passages import KEYWORD, passages
from catalog.wire.metadata import terms as metadata_terms

log = logging.getLogger("catalog.search")

# the analyzer's name is part of the index schema: a new name (a change of analysis) makes an index
# built by an earlier version unreadable as it is, and it is rebuilt from PostgreSQL at start
ANALYZER = "catalog_text_v2"


def _read_stopwords() -> list[str]:
    """The words of `data/stopwords-en.txt` (package data: one word a line, # comments)."""
    text = (files("catalog.search") / "data" / "stopwords-en.txt").read_text(encoding="utf-8")
    words = {line.strip() for line in text.splitlines()}
    return sorted(w for w in words if w and not w.startswith("#"))


# English function words (see the file for their source), dropped at index and query time:
# questions are full of them and they only add noise to BM25. Read once, at import.
STOPWORDS = _read_stopwords()
_QUERY_SYNTAX = re.compile(r"[^\w\s]", re.UNICODE)
_PATH_WORDS = re.compile(r"[/_.\-]+")
TEXT_FIELDS = ("contents", "description", "path_words")
MAX_COVERAGE_TERMS = 24  # a long query's first distinct terms weigh its coverage (see coverage())
COUNT_TTL = 30.0  # seconds a count of entries in a search's filter is reused
# Tantivy compiles a regex into an automaton of at most 1,000 states, about one per byte of a
# literal prefix: a path prefix longer than this is given as the ids it admits (`within`), which
# the caller reads from PostgreSQL, instead of as a regex
REGEX_PREFIX_BYTES = 800


def prefix_fits(path_prefix: str | None) -> bool:
    """Whether the index filters by this path prefix itself (else the caller gives `within`)."""
    return path_prefix is None or len(path_prefix.encode()) <= REGEX_PREFIX_BYTES


# Scripts written without spaces between words (Chinese, Japanese kana) and Hangul syllables: each
# character is a term of its own, so a word inside such a text is found by its characters.
_CHARACTER_SCRIPTS = re.compile(
    "[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f]"
)


def prepare(text: str) -> str:
    """Text as the analyzer reads it, at index and at query time alike: in Unicode normal form NFKC
    (a decomposed `Café`, full-width Latin letters and half-width katakana read as their usual forms), with
    each character of the scripts above set apart by spaces."""
    return _CHARACTER_SCRIPTS.sub(r" \g<0> ", unicodedata.normalize("NFKC", text))


def _analyzer() -> Any:
    """Letters-and-digits tokens of `prepare`d text, long ones dropped, lowercased, accents folded
    to ASCII (`café` is `cafe`), English stopwords dropped, English stems."""
    return (
        tantivy.TextAnalyzerBuilder(tantivy.Tokenizer.simple())
        .filter(tantivy.Filter.remove_long(64))
        .filter(tantivy.Filter.lowercase())
        .filter(tantivy.Filter.ascii_fold())
        .filter(tantivy.Filter.custom_stopword(STOPWORDS))
        .filter(tantivy.Filter.stemmer("english"))
        .build()
    )


def _schema() -> Any:
    builder = tantivy.SchemaBuilder()
    # `meta`: one term per metadata pair (catalog.wire.metadata.terms), for filters; `doc`: the
    # same term (EVERY_DOC) in every document, whose document frequency is the document count
    # BM25 weighs with (deleted documents included until a merge drops them, as BM25's own)
    # `first`: FIRST in an entry's first passage only (each passage is a document: `passages`)
    for name in ("entry_id", "store_id", "scope", "session", "path", "meta", "doc", "first"):
        builder.add_text_field(name, stored=name == "entry_id", tokenizer_name="raw", index_option="basic")
    for name in ("contents", "description", "path_words"):
        builder.add_text_field(name, stored=False, tokenizer_name=ANALYZER, index_option="position")
    return builder.build()


EVERY_DOC = "1"  # the `doc` term every document holds
FIRST = "1"  # the `first` term of an entry's first passage: one document per entry holds it
# a long query's first distinct terms rank its candidates (each needs its count in the scopes)
MAX_QUERY_TERMS = 64  # a longer query's further terms weigh as the lightest of these
MAX_QUERY_TERMS_ANY = 1024  # terms of one query searched at most
# passages read for each entry a search answers (several passages of one entry may rank together)
PASSAGES_PER_HIT = 4
# the decimals a BM25 score is answered with: the local weights are made by dividing Tantivy's own
# (float32) idf out, which leaves noise in the last bits that must say nothing about other stores
SCORE_DECIMALS = 4


class TtlCache:
    """Counts of entries in a filter (and holding a term), reused for a while: they weigh a
    query's terms, where a count some seconds old does as well. Bounded: emptied when full."""

    def __init__(self, ttl: float, size: int = 100_000) -> None:
        self.ttl = ttl
        self.size = size
        self._values: dict[tuple[Any, ...], tuple[float, int]] = {}

    def get(self, key: tuple[Any, ...], compute: Callable[[], int]) -> int:
        now = time.monotonic()
        cached = self._values.get(key)
        if cached is not None and now - cached[0] < self.ttl:
            return cached[1]
        value = compute()
        if len(self._values) >= self.size:
            self._values.clear()
        self._values[key] = (now, value)
        return value


class View:
    """The index as one commit left it, as searches read it: its searcher, and what searches have
    read from it that only a commit changes (an address's entry id, a term's document frequency),
    kept for the next searches. A commit or a reload makes a new view; a search holds the view it
    began with, so all it reads comes from one commit."""

    __slots__ = ("_doc_freqs", "_ids", "searcher")

    MAX_KEPT = 200_000  # entries of each memo, at most (then emptied)

    def __init__(self, searcher: Any) -> None:
        self.searcher = searcher
        self._ids: dict[tuple[int, int], str] = {}
        self._doc_freqs: dict[tuple[str, str], int] = {}

    def entry_id(self, address: Any) -> str:
        """The entry a document (a passage) belongs to (a stored field: a read from the doc store)."""
        key = (address.segment_ord, address.doc)
        entry_id = self._ids.get(key)
        if entry_id is None:
            entry_id = str(self.searcher.doc(address)["entry_id"][0])
            if len(self._ids) >= self.MAX_KEPT:
                self._ids.clear()
            self._ids[key] = entry_id
        return entry_id

    def doc_freq(self, field_name: str, term: str) -> int:
        key = (field_name, term)
        count = self._doc_freqs.get(key)
        if count is None:
            count = int(self.searcher.doc_freq(field_name, term))
            if len(self._doc_freqs) >= self.MAX_KEPT:
                self._doc_freqs.clear()
            self._doc_freqs[key] = count
        return count


@dataclass(frozen=True)
class Coverage:
    """What a keyword search reckoned of its hits' coverage: each hit's share of the query's term
    weight (`of`), and the view, terms and weights it was reckoned with, so that more entries'
    shares are reckoned alike without analysing and weighing the query again
    (`FullTextIndex.more_coverage`)."""

    of: dict[str, float]
    view: View
    terms: list[str]
    weights: list[float]


class IndexDiverged(RuntimeError):
    """A commit reported success but the index does not hold what it was given."""


class WriterLocked(RuntimeError):
    """Another writer, in this process or another, holds the index directory."""


# tantivy's writer lock (`INDEX_WRITER_LOCK`): its directory takes an exclusive, non-blocking
# flock(2) on this file for as long as the writer lives; the kernel releases it when the file is
# closed, so a process that dies leaves no stale lock (the file itself stays)
WRITER_LOCK_FILE = ".tantivy-writer.lock"


def writer_held(directory: Path) -> bool:
    """Whether a writer holds the index in `directory` now: the one place that tells an index
    held by another writer from one that failed to open for another reason. It asks the kernel,
    not tantivy's error (tantivy-py raises ValueError for every failure, a lock's among them, and
    its text may name paths and file contents): it tries to take the writer lock itself and lets
    it go at once (a writer opened in that instant finds it held, as if another writer lived)."""
    try:
        fd = os.open(directory / WRITER_LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False  # no lock file (no writer ever opened here) or none we can read: not held
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False  # flock unsupported here: nothing says another writer lives
    finally:
        os.close(fd)  # releases the lock if it was taken
    return False


@dataclass(frozen=True)
class IndexedEntry:
    entry_id: str
    store_id: str
    scope: str
    session_id: str
    path: str
    contents: str
    description: str
    metadata: dict[str, Any] | None = None
    state: str = "active"  # an entry superseded or merged carries INACTIVE among its meta terms


# the meta term of an entry that is not active (superseded, merged): no metadata pair makes it
# (metadata text holds no NUL), so a search leaves such entries out with one MustNot clause
INACTIVE = "\x00inactive"


class FullTextIndex:
    """One index directory with its (single) writer, or read only (`write=False`: another process
    writes it; `reload()` shows what it committed)."""

    def __init__(self, directory: Path, *, heap_bytes: int = 64 * 1024 * 1024, write: bool = True) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._meta = str(directory / "meta.json")  # read before every search: made once
        self.schema = _schema()
        self.index = tantivy.Index(self.schema, path=str(directory), reuse=True)
        # the searcher moves only when `view()` sees the index changed on disk (a commit, this
        # process's or another's, or a merge that ended), so that a `View` holds while current
        self.index.config_reader(reload_policy="Manual")
        self.index.register_tokenizer(ANALYZER, _analyzer())
        self._view: View | None = None
        self._stamp: tuple[int, int, int] | None = None  # meta.json as the current view read it
        self.heap_bytes = heap_bytes
        self.writer: Any = self._open_writer() if write else None
        self.boosts = {"contents": 1.0, "description": 0.5, "path_words": 0.5}
        self.analyzer = _analyzer()  # the indexed fields' analyzer, for query terms
        self._first = tantivy.Query.term_query(self.schema, "first", FIRST)
        self._counts = TtlCache(COUNT_TTL)

    def _open_writer(self) -> Any:
        """The directory's writer; `WriterLocked` when another writer holds it. A failure while
        the lock is free is tried once more before it is raised: the writer that held the lock
        may have been closed in between, or the lock was held only by another process's
        `writer_held` probe."""
        for attempt in (1, 2):
            try:
                return self.index.writer(heap_size=self.heap_bytes, num_threads=1)
            except ValueError as exc:
                if writer_held(self.directory):
                    raise WriterLocked(f"another writer holds the index {self.directory}") from exc
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    @property
    def writes(self) -> bool:
        """Whether this process holds the directory's writer."""
        return self.writer is not None

    def take_writer(self) -> None:
        """Become the directory's writer (a reader whose writer is gone); `WriterLocked` while
        another one lives."""
        if self.writer is None:
            self.writer = self._open_writer()

    def reload(self) -> None:
        """Search what the writer has committed last (another process's commit included)."""
        self._stamp = self._meta_stamp()
        self.index.reload()
        self._view = None

    def view(self) -> View:
        """The index as its last commit left it, as searches read it: reloaded first when its
        `meta.json` (which each commit and each finished merge replaces) is not the one the
        current view was read from."""
        view = self._view
        if view is None or self._meta_stamp() != self._stamp:
            self.reload()
            view = self._view = View(self.index.searcher())
        return view

    def _meta_stamp(self) -> tuple[int, int, int]:
        try:
            meta = os.stat(self._meta)
        except OSError:
            return (0, 0, 0)
        return (meta.st_ino, meta.st_mtime_ns, meta.st_size)

    def close(self) -> None:
        """Let the writer finish its merges and let go of the directory's lock."""
        if self.writer is None:
            return
        try:
            self.writer.wait_merging_threads()
        except ValueError as exc:  # a merge that failed (full disk): the last commit stands
            log.warning("index %s: merges ended with an error: %s", self.directory, exc)
        self.writer = None  # dropping it lets go of the lock

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
        searcher = self.view().searcher

        def count(ids: list[str], *, first: bool) -> int:
            if not ids:
                return 0
            query = tantivy.Query.term_set_query(self.schema, "entry_id", ids)
            if first:  # one document per entry
                query = tantivy.Query.boolean_query(
                    [(tantivy.Occur.Must, query), (tantivy.Occur.Must, self._first)]
                )
            return int(searcher.search(query, 1, count=True).count)  # type: ignore[attr-defined]  # missing from the stubs

        held = count([e.entry_id for e in upserts], first=True)
        if held != len(upserts):
            raise IndexDiverged(f"the commit kept {held} of {len(upserts)} upserted entries")
        if kept := count(deletes, first=False):
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
            self.writer = self._open_writer()

    def upsert(self, entries: list[IndexedEntry]) -> None:
        """Each entry as one document per passage of its contents (`passages.KEYWORD`), each with
        the entry's description, path words and filter terms."""
        for entry in entries:
            self.writer.delete_documents_by_term("entry_id", entry.entry_id)
            description = prepare(entry.description)
            path_words = prepare(_PATH_WORDS.sub(" ", entry.path))
            meta = metadata_terms(entry.metadata) + ([] if entry.state == "active" else [INACTIVE])
            for number, part in enumerate(passages(entry.contents, KEYWORD)):
                fields: dict[str, Any] = {
                    "entry_id": entry.entry_id,
                    "store_id": entry.store_id,
                    "scope": entry.scope,
                    "session": entry.session_id,
                    "path": entry.path,
                    "contents": prepare(part),
                    "description": description,
                    "path_words": path_words,
                    "meta": meta,
                    "doc": EVERY_DOC,
                }
                if number == 0:
                    fields["first"] = FIRST
                self.writer.add_document(tantivy.Document(**fields))

    def delete(self, entry_ids: list[str]) -> None:
        for entry_id in entry_ids:
            self.writer.delete_documents_by_term("entry_id", entry_id)

    def clear(self) -> None:
        self.writer.delete_all_documents()

    def commit(self) -> None:
        self.writer.commit()
        self.reload()

    def num_docs(self) -> int:
        """The entries the index holds (its documents are their passages)."""
        searcher = self.view().searcher
        return int(searcher.search(self._first, 1, count=True).count)  # type: ignore[attr-defined]  # missing from the stubs

    def search(
        self,
        store_id: str,
        scopes: list[str],
        text: str,
        limit: int,
        *,
        session_id: str | None = None,
        path_prefix: str | None = None,
        where: Mapping[str, Any] | None = None,
        within: Sequence[str] | None = None,
        include_inactive: bool = False,
    ) -> tuple[list[tuple[str, float]], Coverage]:
        """(entry id, BM25 score), best first, only from the given store and scopes (and, with
        `where`, only entries whose metadata holds each of its pairs; with `within`, only those
        entries: the ones a path prefix too long for a regex admits); and each hit's `coverage`,
        reckoned in the same call: the query is analysed, its filter built and its terms weighed
        once for both (and for `more_coverage`).

        The score is BM25 with each term's idf computed among the entries the same filter admits,
        never the whole index, which every store and scope shares: no score or order depends on
        which words the entries outside the filter hold. Tantivy weighs a term by its idf over
        the whole index, so each term's clause is boosted by (idf in the filter / Tantivy's idf),
        Tantivy's computed from the same counts it uses (the `doc` term's document frequency is
        its document count); the score is answered to SCORE_DECIMALS decimals. What stays global
        is the average length of a field, BM25's length normalization: it moves with the volume
        of text written anywhere, never with which words it holds."""
        scoped = self._filter(store_id, scopes, session_id, path_prefix, where, within, include_inactive)
        key = self._key(store_id, scopes, session_id, path_prefix, where, include_inactive)
        view = self.view()
        hits, terms, weights = self._search(view, scoped, key, text, limit)
        covered = terms[:MAX_COVERAGE_TERMS]
        weighed = [weights[t] for t in covered]
        of = self._held(view, covered, weighed, [doc for doc, _ in hits])
        return hits, Coverage(of, view, covered, weighed)

    def more_coverage(self, coverage: Coverage, entry_ids: Sequence[str]) -> dict[str, float]:
        """`coverage` of more entries (those another leg found), by the terms and weights, and
        in the view, that a keyword search reckoned its own hits' with."""
        ids = list(dict.fromkeys(entry_ids))
        return self._held(coverage.view, coverage.terms, coverage.weights, ids)

    def _search(
        self, view: View, scoped: list[tuple[Any, Any]], key: tuple[Any, ...], text: str, limit: int
    ) -> tuple[list[tuple[str, float]], list[str], dict[str, float]]:
        """The hits of `search`, the query's terms and the local weight of its first MAX_QUERY_TERMS."""
        terms = self.query_terms(text, MAX_QUERY_TERMS_ANY)
        if not terms:
            return [], [], {}  # nothing left to match (only stopwords): an empty query would match everything
        weights = self._weights(view, scoped, key, terms[:MAX_QUERY_TERMS])
        everywhere = view.doc_freq("doc", EVERY_DOC)
        weighed = []
        lightest = min(weights.values(), default=0.0)
        for term in terms:
            local = weights.get(term, lightest)
            for name, boost in self.boosts.items():
                doc_freq = view.doc_freq(name, term)
                if not doc_freq:
                    continue
                clause = tantivy.Query.term_query(self.schema, name, term, index_option="freq")
                factor = boost * local / term_weight(everywhere, doc_freq)
                weighed.append((tantivy.Occur.Should, tantivy.Query.boost_query(clause, factor)))
        if not weighed:
            return [], terms, weights
        # the filter scores nothing (its terms' BM25 would weigh a store's or scope's size
        # in the whole index): only the query's terms do
        admits = tantivy.Query.const_score_query(tantivy.Query.boolean_query(scoped), 0.0)
        query = tantivy.Query.boolean_query(
            [(tantivy.Occur.Must, admits), (tantivy.Occur.Must, tantivy.Query.boolean_query(weighed))]
        )
        # an entry is as good as its best passage: enough passages for `limit` entries, mostly
        best: dict[str, float] = {}
        for score, address in view.searcher.search(query, limit * PASSAGES_PER_HIT).hits:
            entry_id = view.entry_id(address)
            if entry_id not in best:
                best[entry_id] = round(float(score), SCORE_DECIMALS)
                if len(best) == limit:
                    break
        return list(best.items()), terms, weights

    def _weights(
        self, view: View, scoped: list[tuple[Any, Any]], key: tuple[Any, ...], terms: list[str]
    ) -> dict[str, float]:
        """Each term's idf among the entries the filter admits (a count may be up to COUNT_TTL
        old: it weighs the term, it never leaves it out)."""
        searcher = view.searcher
        admitted = self._counts.get(key, lambda: self._count(searcher, scoped))

        def held_by(term: str) -> int:  # built only when the count is not kept
            return self._count(searcher, [*scoped, self._anywhere(term)])

        return {
            term: term_weight(admitted, self._counts.get((*key, term), partial(held_by, term)))
            for term in terms
        }

    @staticmethod
    def _key(
        store_id: str,
        scopes: list[str],
        session_id: str | None,
        path_prefix: str | None,
        where: Mapping[str, Any] | None,
        include_inactive: bool,
    ) -> tuple[Any, ...]:
        """The cache key of a filter's counts."""
        return (
            store_id,
            tuple(sorted(scopes)),
            session_id,
            path_prefix,
            tuple(sorted(metadata_terms(where))),
            include_inactive,
        )

    def _filter(
        self,
        store_id: str,
        scopes: list[str],
        session_id: str | None,
        path_prefix: str | None,
        where: Mapping[str, Any] | None = None,
        within: Sequence[str] | None = None,
        include_inactive: bool = False,
    ) -> list[tuple[Any, Any]]:
        """The clauses that restrict a search to what it may return (active entries only, unless
        `include_inactive`)."""
        # one scope (the common case) as a term query: a term-set query builds a bitset of the
        # whole index per search, 5-10x slower when the clause is counted once per query term
        scope = (
            tantivy.Query.term_query(self.schema, "scope", scopes[0])
            if len(scopes) == 1
            else tantivy.Query.term_set_query(self.schema, "scope", scopes)
        )
        clauses = [
            (tantivy.Occur.Must, tantivy.Query.term_query(self.schema, "store_id", store_id)),
            (tantivy.Occur.Must, scope),
        ]
        if session_id is not None:
            clauses.append((tantivy.Occur.Must, tantivy.Query.term_query(self.schema, "session", session_id)))
        if path_prefix and prefix_fits(path_prefix):
            pattern = re.escape(path_prefix) + ".*"
            clauses.append((tantivy.Occur.Must, tantivy.Query.regex_query(self.schema, "path", pattern)))
        elif path_prefix:
            if within is None:
                raise ValueError("a path prefix this long is given as the ids it admits (`within`)")
            admitted = tantivy.Query.term_set_query(self.schema, "entry_id", list(within))
            clauses.append((tantivy.Occur.Must, admitted))
        for term in metadata_terms(where):
            clauses.append((tantivy.Occur.Must, tantivy.Query.term_query(self.schema, "meta", term)))
        if not include_inactive:
            clauses.append((tantivy.Occur.MustNot, tantivy.Query.term_query(self.schema, "meta", INACTIVE)))
        return clauses

    def query_terms(self, text: str, most: int = MAX_COVERAGE_TERMS) -> list[str]:
        """The distinct terms the analyzer makes of a query, in order (at most `most`)."""
        words = _QUERY_SYNTAX.sub(" ", prepare(text))
        return list(dict.fromkeys(self.analyzer.analyze(words)))[:most]

    def terms_of(self, contents: str | None, description: str | None, path: str) -> list[set[str]]:
        """The terms the index holds of each passage of an entry (what `coverage` matches: the
        passage's contents, the description and the path words)."""
        shared = {
            term for text in (description or "", _PATH_WORDS.sub(" ", path)) for term in self._terms(text)
        }
        return [self._terms(part) | shared for part in passages(contents or "", KEYWORD)]

    def _terms(self, text: str) -> set[str]:
        return set(self.analyzer.analyze(prepare(text)))

    def coverage(
        self,
        store_id: str,
        scopes: list[str],
        text: str,
        entry_ids: Sequence[str],
        *,
        session_id: str | None = None,
        path_prefix: str | None = None,
        where: Mapping[str, Any] | None = None,
        within: Sequence[str] | None = None,
        include_inactive: bool = False,
    ) -> dict[str, float]:
        """For each given entry, the share of the query's term weight it holds in any text field
        (0 to 1): each distinct term weighs its idf among the entries the same filter admits, so
        the weights are those of the searched scopes, not of the whole index (see fusion.py)."""
        terms = self.query_terms(text)
        ids = list(dict.fromkeys(entry_ids))
        if not terms or not ids:
            return dict.fromkeys(ids, 0.0)
        view = self.view()
        scoped = self._filter(store_id, scopes, session_id, path_prefix, where, within, include_inactive)
        key = self._key(store_id, scopes, session_id, path_prefix, where, include_inactive)
        weights = self._weights(view, scoped, key, terms)
        return self._held(view, terms, [weights[t] for t in terms], ids)

    def _held(self, view: View, terms: list[str], weights: list[float], ids: list[str]) -> dict[str, float]:
        """Each entry's share of the terms' total weight that its best passage holds."""
        total = sum(weights)
        if not terms or not ids or total <= 0:
            return dict.fromkeys(ids, 0.0)
        # Which terms each given entry holds, in one search: term i scores a constant 2**i, so an
        # entry's score is the bit set of its terms (exact in float32 for up to 24 terms).
        # the given entries as one term query each: a term-set query costs a bitset of the index
        ids_held = [tantivy.Query.term_query(self.schema, "entry_id", i) for i in ids]
        given = tantivy.Query.const_score_query(
            tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in ids_held]), 0.0
        )
        bits = [
            (tantivy.Occur.Should, tantivy.Query.const_score_query(self._anywhere(term)[1], float(1 << i)))
            for i, term in enumerate(terms)
        ]
        # each passage of the given entries holding a term; an entry's share is its best passage's
        query = tantivy.Query.boolean_query([(tantivy.Occur.Must, given), *bits])
        held = dict.fromkeys(ids, 0.0)
        shares: dict[int, float] = {}  # by set of terms: passages mostly hold the same few sets
        entry_of = view.entry_id
        for score, address in view.searcher.search(query, len(ids) * KEYWORD.most).hits:
            mask = round(score)
            if not mask:
                break  # the rest hold no term (hits come best first)
            share = shares.get(mask)
            if share is None:
                held_weight = sum(w for i, w in enumerate(weights) if mask >> i & 1)
                share = shares[mask] = min(held_weight / total, 1.0)
            entry_id = entry_of(address)
            if share > held[entry_id]:
                held[entry_id] = share
        return held

    def _anywhere(self, term: str) -> tuple[Any, Any]:
        """A clause matching the entries that hold `term` in any text field."""
        fields = [tantivy.Query.term_query(self.schema, f, term, index_option="basic") for f in TEXT_FIELDS]
        return (tantivy.Occur.Must, tantivy.Query.boolean_query([(tantivy.Occur.Should, q) for q in fields]))

    @staticmethod
    def _count(searcher: Any, clauses: list[tuple[Any, Any]]) -> int:
        query = tantivy.Query.const_score_query(tantivy.Query.boolean_query(clauses), 1.0)
        return int(searcher.search(query, 1, count=True).count)
