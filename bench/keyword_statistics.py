"""What scope-local BM25 statistics cost: the keyword leg's candidate search at 1M entries, with
each query term weighed by its idf among the entries the search may return (what the server
does: `FullTextIndex.search`) against the same search weighed by statistics of the whole index
(Tantivy's own BM25, what it did before, which lets a term's presence in other stores and scopes
move the scores).

The index is built here with synthetic text (a 2,000-word vocabulary, 12-40 words an entry) in
the layout of `bench/search.py`: one shared scope of 100k entries and 10,000 user scopes holding
the rest, in one store. Each query is 3-8 words of the vocabulary; both searches take the top 50
and run back to back on the same index (the counts the scope-local one needs are cached 30 s, as
in the server: the table gives the first search of a query in a scope, cold, and a repeat, warm).

Run: .venv/bin/python bench/keyword_statistics.py [--entries N] [--queries Q]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import tantivy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from catalog.search.fulltext import FullTextIndex, IndexedEntry

RNG = random.Random(7)
VOCABULARY = [
    f"{a}{b}" for a in ("ka", "lo", "mi", "nu", "pe", "ra", "si", "to", "vu", "ze") for b in range(200)
]
SHARED = 100_000
USERS = 10_000
BATCH = 20_000


def text(rng: random.Random) -> str:
    # Zipf-like: a few words are common, most are rare
    return " ".join(
        VOCABULARY[min(int(rng.paretovariate(1.1)) - 1, len(VOCABULARY) - 1)]
        for _ in range(rng.randint(12, 40))
    )


def build(directory: Path, entries: int) -> FullTextIndex:
    index = FullTextIndex(directory, heap_bytes=256 * 1024 * 1024)
    started = time.perf_counter()
    for start in range(0, entries, BATCH):
        batch = []
        for i in range(start, min(start + BATCH, entries)):
            scope = "shared" if i < min(SHARED, entries // 10) else f"user-{i % USERS}"
            batch.append(IndexedEntry(f"e{i}", "store", scope, "", f"/notes/{i}", text(RNG), ""))
        index.upsert(batch)
        index.commit()
    print(f"indexed {entries:,} entries in {time.perf_counter() - started:.0f} s")
    return index


def whole_index(index: FullTextIndex, scope: str, query: str, limit: int) -> list[tuple[str, float]]:
    """The search weighed by statistics of the whole index (Tantivy's BM25 as it is)."""
    parsed, _ = index.index.parse_query_lenient(
        query, ["contents", "description", "path_words"], field_boosts=index.boosts
    )
    filter_ = tantivy.Query.const_score_query(
        tantivy.Query.boolean_query(index._filter("store", [scope], None, None)), 0.0
    )
    searcher = index.index.searcher()
    query_ = tantivy.Query.boolean_query([(tantivy.Occur.Must, filter_), (tantivy.Occur.Must, parsed)])
    return [(searcher.doc(a)["entry_id"][0], s) for s, a in searcher.search(query_, limit).hits]


def local(index: FullTextIndex, scope: str, query: str, limit: int) -> list[tuple[str, float]]:
    """The search weighed by statistics of the scope (the server's)."""
    return index.search("store", [scope], query, limit)[0]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kwstats") as tmp:
        index = build(Path(tmp) / "index", args.entries)
        queries = [" ".join(RNG.sample(VOCABULARY[:400], RNG.randint(3, 8))) for _ in range(args.queries)]
        print("\n| scope | entries in it | search | p50 ms | p99 ms |")
        print("|---|---|---|---|---|")
        for label, scopes in (
            ("a user's", [f"user-{RNG.randrange(USERS)}" for _ in queries]),
            ("shared", ["shared"] * len(queries)),
        ):
            held = index._count(index.index.searcher(), index._filter("store", [scopes[0]], None, None))
            timings: dict[str, list[float]] = {}

            def leg(search: object, scope: str, query: str) -> None:
                hits = search(index, scope, query, 50)  # type: ignore[operator]
                index.coverage("store", [scope], query, [doc for doc, _ in hits])

            for query, scope in zip(queries, scopes, strict=True):
                for name, call, cold in (
                    ("candidates, whole index (before)", partial(whole_index, index, scope, query, 50), True),
                    ("candidates, scope-local, counts cold", partial(local, index, scope, query, 50), True),
                    ("candidates, scope-local, counts warm", partial(local, index, scope, query, 50), False),
                    (
                        "keyword leg (candidates + coverage), before",
                        partial(leg, whole_index, scope, query),
                        True,
                    ),
                    ("keyword leg (candidates + coverage), now", partial(leg, local, scope, query), True),
                ):
                    if cold:
                        index._counts._values.clear()
                    started = time.perf_counter()
                    call()
                    timings.setdefault(name, []).append((time.perf_counter() - started) * 1000)
            for name, values in timings.items():
                p50, p99 = statistics.median(values), percentile(values, 0.99)
                print(f"| {label} | {held:,} | {name} | {p50:.2f} | {p99:.2f} |")


if __name__ == "__main__":
    main()
