"""What `min_score` can separate: the score scale studied on both development corpora.

Every question is searched (hybrid, keyword and semantic, top 10, `explain`) in its own
conversation's scope and in each other conversation's, where nothing answers it. The hybrid
score is then replayed offline from each hit's coverage and cosine (`score_details`), under
variants of the scale, each at several floors:

- `weights`: the fusion's own parameters (semantic weight, the single-leg share, the cosine
  curve's centre and width, the coverage power) over a grid;
- `proximity`: a bonus for the query's neighbouring terms found near each other in the hit
  (a phrase-like match), the rest of the score lowered to match;
- `long queries`: a long query's coverage counted against its heaviest terms only (a passage
  that answers part of a long question holds part of its words);
- `query length`: a long question's hits lifted by the log of its length past 12 words (the
  evidence the floor loses answers long, many-part questions), less a constant;
- `standing`: each hit's score moved by how far it stands above (or below) the median score of
  its own search's top 10, less a constant (a clear answer stands out of its search's results;
  a near answer in a foreign scope stands among others like it);
- `scope's words`: every hit lowered by how much of the query's term weight its scope holds in
  no entry at all (a question about a conversation the scope never had uses words it never saw),
  subtracted, multiplied, or on the semantic leg only (which knows nothing of the words).

A variant is "held" when at its floor both corpora keep the goal on R@5 lost (<= 0.03) and LoCoMo
keeps hers on foreign scopes (>= 90% empty); the table gives each family's best BEAM figure among
them. A second table says what the answers the floor gets wrong look like: the foreign answers at
or above it against the true evidence below it and above it (medians), so that what could tell
them apart is measured, not guessed.

Run: .venv/bin/python bench/floor.py [--locomo-data-dir D] [--beam-data-dir D] [--skip-ingest]
(the corpora under ../shared/bench/ when present, else --locomo FILE.json ... --beam DIR ...; a
data dir of an earlier `bench/locomo.py --data-dir D` or `bench/beam.py --data-dir D` run is
reused with --skip-ingest)
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import statistics
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import beam, locomo
from bench.live import REPO, BenchServer
from catalog.search.fulltext import FullTextIndex
from catalog.search.fusion import RECOMMENDED_FLOOR, term_weight

UC = "/api/2.1/unity-catalog"
GOAL_EMPTY, GOAL_LOST = 0.90, 0.03


@dataclass
class Corpus:
    name: str
    store: str
    scopes: list[str]
    entries: dict[tuple[str, str], tuple[str, str]]  # (scope, path) -> (contents, description)
    questions: list[tuple[str, dict]]  # (scope, question with "evidence")


def corpus(name: str, store: str, data: list[tuple[str, list[dict], list[dict]]]) -> tuple[Corpus, list]:
    """A corpus from its conversations, each (scope, entries, questions with evidence), and the
    conversations to ingest."""
    return (
        Corpus(
            name,
            store,
            [s for s, _, _ in data],
            {(s, e["path"]): (e["contents"], e["description"]) for s, es, _ in data for e in es},
            [(s, q) for s, _, qs in data for q in qs],
        ),
        [(s, es) for s, es, _ in data],
    )


def corpora(args: argparse.Namespace) -> list[tuple[Corpus, list[tuple[str, list[dict]]]]]:
    """Each corpus with its conversations to ingest."""
    out = []
    files = [Path(f) for f in args.locomo] or sorted((REPO.parent / "shared/bench/locomo").glob("*.json"))
    if files:
        out.append(corpus("LoCoMo", locomo.STORE, [locomo.load(f) for f in files]))
    dirs = [Path(d) for d in args.beam] or sorted(
        (p for p in (REPO.parent / "shared/bench/beam/500K").glob("*") if (p / "chat.json").exists()),
        key=lambda p: int(p.name) if p.name.isdigit() else 0,
    )
    if dirs:
        # BEAM's abstention questions have no evidence: not asked here
        data = [(s, es, qs) for s, es, qs, _ in (beam.load(d) for d in dirs)]
        out.append(corpus("BEAM", beam.STORE, data))
    return out


async def collect(corpus: Corpus, conversations: list, data_dir: str | None, skip_ingest: bool) -> list[dict]:
    """One row per (scope, question): its own scope's or a foreign one's explained hybrid top 10,
    and the ids of the keyword and semantic modes' top 10."""
    server = BenchServer(Path(data_dir) if data_dir else None)
    try:
        async with httpx.AsyncClient(
            base_url=server.url, headers={"Authorization": f"Bearer {server.token()}"}, timeout=300
        ) as client:
            catalog_name, schema, name = corpus.store.split(".")
            r = await client.post(
                f"{UC}/memory-stores",
                json={"name": name, "catalog_name": catalog_name, "schema_name": schema},
            )
            if r.status_code not in (200, 409):
                r.raise_for_status()
            if not skip_ingest:
                await locomo.ingest_all(client, conversations, 8, store=corpus.store)
            await locomo.settle(client)
            gate = asyncio.Semaphore(8)

            async def ask(scope: str, query: str, mode: str) -> list[dict]:
                body = {"scope": scope, "query": query, "mode": mode, "top_k": 10, "explain": True}
                async with gate:
                    r = await client.post(f"{UC}/memory-stores/{corpus.store}/entries:search", json=body)
                r.raise_for_status()
                return [
                    {"path": x["memory_entry"]["path"], **x["score_details"]} for x in r.json()["results"]
                ]

            pairs = [(s, q, True) for s, q in corpus.questions] + [
                (o, q, False) for s, q in corpus.questions for o in corpus.scopes if o != s
            ]

            async def row(scope: str, q: dict, own: bool) -> dict:
                hybrid, kw, sem = await asyncio.gather(
                    *(ask(scope, q["query"], m) for m in ("hybrid", "keyword", "semantic"))
                )
                return {
                    "scope": scope,
                    "query": q["query"],
                    "own": own,
                    "evidence": q["evidence"] if own else set(),
                    "hits": hybrid,
                    "agree": len({h["path"] for h in kw} & {h["path"] for h in sem}),
                }

            return list(await asyncio.gather(*(row(*p) for p in pairs)))
    finally:
        server.stop()


class Terms:
    """The index's own analysis of the stored texts (its passages, its query terms) and each
    scope's passage counts: coverage recomputed as the server does, in variants."""

    def __init__(self, corpus: Corpus, index: FullTextIndex) -> None:
        self.index = index
        self.passages: dict[tuple[str, str], list[set[str]]] = {}
        counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        sizes: dict[str, int] = defaultdict(int)
        for (scope, path), (text, description) in corpus.entries.items():
            held = index.terms_of(text, description, path)
            self.passages[(scope, path)] = held
            sizes[scope] += len(held)
            for terms in held:
                for term in terms:
                    counts[scope][term] += 1
        self.counts, self.sizes = counts, sizes
        self._query: dict[tuple[str, str], tuple[list[str], list[float]]] = {}
        self._word: dict[str, str | None] = {}
        self._near: dict[tuple[str, str, str], float] = {}

    def query(self, scope: str, text: str) -> tuple[list[str], list[float]]:
        key = (scope, text)
        if key not in self._query:
            terms = self.index.query_terms(text)
            weights = [term_weight(self.sizes[scope], self.counts[scope].get(t, 0)) for t in terms]
            self._query[key] = (terms, weights)
        return self._query[key]

    def held(self, scope: str, text: str) -> float:
        """The share of the query's term weight that some entry of the scope holds."""
        terms, weights = self.query(scope, text)
        total = sum(weights)
        if total <= 0:
            return 1.0
        return sum(w for t, w in zip(terms, weights, strict=True) if self.counts[scope].get(t, 0)) / total

    def coverage(self, scope: str, text: str, path: str, heaviest: int | None = None) -> float:
        """The share of the query's term weight the hit's best passage holds; with `heaviest`,
        of the weight of its heaviest that many terms (at most 1)."""
        terms, weights = self.query(scope, text)
        total = sum(sorted(weights, reverse=True)[:heaviest] if heaviest else weights)
        if total <= 0:
            return 0.0
        best = max(
            (
                sum(w for t, w in zip(terms, weights, strict=True) if t in p)
                for p in self.passages[(scope, path)]
            ),
            default=0.0,
        )
        return min(best / total, 1.0)

    def proximity(self, scope: str, text: str, path: str, contents: str, slop: int = 3) -> float:
        """The share of the query's neighbouring term pairs found within `slop` words of each
        other in the hit's text."""
        key = (scope, text, path)
        if key not in self._near:
            self._near[key] = self._proximity(text, contents, slop)
        return self._near[key]

    def _term(self, word: str) -> str | None:
        if word not in self._word:
            terms = self.index.query_terms(word, most=1)
            self._word[word] = terms[0] if terms else None
        return self._word[word]

    def _proximity(self, text: str, contents: str, slop: int) -> float:
        terms = self.index.query_terms(text, most=64)
        pairs = [(a, b) for a, b in itertools.pairwise(terms) if a != b]
        if not pairs:
            return 0.0
        at: dict[str, list[int]] = defaultdict(list)
        for i, word in enumerate(contents.split()):
            term = self._term(word)
            if term is not None:
                at[term].append(i)
        near = sum(
            1 for a, b in pairs if any(abs(i - j) <= slop for i in at.get(a, ()) for j in at.get(b, ()))
        )
        return near / len(pairs)


def logistic(cosine: float | None, centre: float, width: float) -> float:
    if cosine is None:
        return 0.0
    z = (cosine - centre) / width
    return 1.0 / (1.0 + math.exp(-max(min(z, 50.0), -50.0)))


Scale = Callable[[dict, dict], float]  # (row, hit) -> the hit's own score


def weights_scale(a: float, m: float, centre: float, width: float, power: float, shift: float) -> Scale:
    def score(row: dict, hit: dict) -> float:
        s = logistic(hit.get("cosine"), centre, width)
        k = (hit.get("coverage") or 0.0) ** power
        return max(a * s + (1 - a) * k, m * max(s, k)) - shift

    return score


def replay(rows: list[dict], scale: Scale, floor: float) -> tuple[float, float, float]:
    """(R@5, share of foreign searches empty at `floor`, R@5 lost to it), each hit rescored by
    `scale` and its neighbour lift carried over in proportion."""
    kept, lost, empty = [], [], []
    for row in rows:
        hits = row["hits"]
        own = [
            scale(row, h) if h.get("cosine") is not None or h.get("coverage") is not None else 0.0
            for h in hits
        ]
        was = max((h["fused"] for h in hits), default=0.0) or 1.0
        now = max(own, default=0.0)
        scored = sorted(
            ((h["path"], o + h["neighbour_lift"] * now / was) for h, o in zip(hits, own, strict=True)),
            key=lambda x: -x[1],
        )
        if row["own"]:
            top = scored[:5]
            n = len(row["evidence"])
            kept.append(len(row["evidence"] & {p for p, _ in top}) / n)
            lost.append(len(row["evidence"] & {p for p, s in top if s < floor}) / n)
        else:
            empty.append(1.0 if all(s < floor for _, s in scored) else 0.0)
    return statistics.mean(kept), statistics.mean(empty), statistics.mean(lost)


Result = tuple[str, dict[str, tuple[float, float, float]]]  # a setting, and each corpus's replay


def shortfall(result: Result) -> float:
    """How far a setting is from the goals on every corpus (0: it meets them all): the empty
    share missing, plus three times the R@5 lost beyond the goal."""
    return sum(max(0.0, GOAL_EMPTY - e) + 3 * max(0.0, lost - GOAL_LOST) for _, e, lost in result[1].values())


def best(results: list[Result]) -> tuple[str, Result]:
    """The setting that keeps the goals on LoCoMo and the R@5-lost goal on BEAM with the most of
    BEAM's foreign searches empty ("held"), else the one closest to every goal."""
    held = [
        (name, by)
        for name, by in results
        if all(lost <= GOAL_LOST for _, _, lost in by.values())
        and by.get("LoCoMo", (0, 1, 0))[1] >= GOAL_EMPTY
    ]
    if held:
        return "held", max(held, key=lambda x: x[1].get("BEAM", (0, 0, 0))[1])
    return "closest", min(results, key=shortfall)


def study(data: dict[str, tuple[Corpus, list[dict], Terms]]) -> None:
    floors = (0.45, 0.5, 0.55)
    families: dict[str, list[tuple[str, dict[str, tuple[float, float, float]]]]] = defaultdict(list)

    def run(family: str, name: str, scale_for: Callable[[str], Scale], floor: float) -> None:
        by = {c: replay(rows, scale_for(c), floor) for c, (_, rows, _) in data.items()}
        families[family].append((f"{name}, floor {floor}", by))

    shipped = weights_scale(0.4, 0.6, 0.3, 0.15, 0.7, 0.0)
    for floor in floors:
        run("shipped", "as shipped", lambda c: shipped, floor)
    grid = itertools.product(
        (0.3, 0.4, 0.5, 0.6), (0.5, 0.6, 0.7), (0.3, 0.33, 0.36), (0.1, 0.15, 0.2), (0.6, 0.7, 0.85, 1.0)
    )
    for a, m, centre, width, power in grid:
        scale = weights_scale(a, m, centre, width, power, 0.0)

        def same(c: str, scale: Scale = scale) -> Scale:  # the one scale for every corpus
            return scale

        run("weights", f"semantic {a}, single {m}, cosine {centre}/{width}, power {power}", same, 0.5)
    for beta, shift in itertools.product((0.1, 0.2, 0.3), (0.0, 0.02, 0.04, 0.06)):

        def proximity(c: str, beta: float = beta, shift: float = shift) -> Scale:
            corpus, _, terms = data[c]

            def score(row: dict, hit: dict) -> float:
                near = terms.proximity(
                    row["scope"], row["query"], hit["path"], corpus.entries[(row["scope"], hit["path"])][0]
                )
                return shipped(row, hit) - shift + beta * near

            return score

        run("proximity", f"bonus {beta} x pairs near, less {shift}", proximity, 0.5)
    for heaviest, shift in itertools.product((6, 8, 10), (0.0, 0.03, 0.06)):

        def capped(c: str, heaviest: int = heaviest, shift: float = shift) -> Scale:
            _, _, terms = data[c]

            def score(row: dict, hit: dict) -> float:
                cov = (
                    terms.coverage(row["scope"], row["query"], hit["path"], heaviest)
                    if hit.get("coverage") is not None
                    else None
                )
                return shipped(row, {**hit, "coverage": cov}) - shift

            return score

        run("long queries", f"coverage of the heaviest {heaviest} terms, less {shift}", capped, 0.5)

    for lam, shift in itertools.product((0.25, 0.5, 1.0, 1.5), (-0.04, 0.0, 0.04, 0.08)):

        def standing(c: str, lam: float = lam, shift: float = shift) -> Scale:
            medians: dict[int, float] = {}

            def score(row: dict, hit: dict) -> float:
                if id(row) not in medians:  # the median of the search's own top 10, as shipped
                    medians[id(row)] = statistics.median([shipped(row, h) for h in row["hits"]] or [0.0])
                own = shipped(row, hit)
                return own + lam * (own - medians[id(row)]) - shift

            return score

        run("standing", f"+ {lam} x (score - its top 10's median), less {shift}", standing, 0.5)

    for gamma, shift in itertools.product((0.02, 0.04, 0.06, 0.08), (0.0, 0.02, 0.04)):

        def wordy(c: str, gamma: float = gamma, shift: float = shift) -> Scale:
            def score(row: dict, hit: dict) -> float:
                words = len(row["query"].split())
                return shipped(row, hit) + gamma * max(0.0, math.log(words / 12)) - shift

            return score

        run("query length", f"+ {gamma} x ln(query words / 12) above 12 words, less {shift}", wordy, 0.5)

    hows = ("less", "times", "semantic")
    for how, beta, shift in itertools.product(hows, (0.1, 0.2, 0.5, 1.0), (-0.06, -0.03, 0.0)):

        def unheld(c: str, how: str = how, beta: float = beta, shift: float = shift) -> Scale:
            _, _, terms = data[c]

            def score(row: dict, hit: dict) -> float:
                held = terms.held(row["scope"], row["query"])
                if how == "less":
                    return shipped(row, hit) - beta * (1 - held) - shift
                if how == "times":
                    return shipped(row, hit) * held**beta - shift
                s = logistic(hit.get("cosine"), 0.3, 0.15) * held**beta
                k = (hit.get("coverage") or 0.0) ** 0.7
                return max(0.4 * s + 0.6 * k, 0.6 * max(s, k)) - shift

            return score

        run("scope's words", f"{how} {beta} x the share its scope lacks, less {shift}", unheld, 0.5)

    names = list(data)
    chart = (0.3, 0.4, 0.45, 0.5, 0.55, 0.6, 0.7)
    print("Hybrid, as shipped, floor by floor: foreign-scope searches empty / true-scope R@5 kept\n")
    print("| floor | " + " | ".join(str(f) for f in chart) + " |")
    print("|---|" + "---|" * len(chart))
    for c, (_, rows, _) in data.items():
        kept = [replay(rows, shipped, floor) for floor in chart]
        print(f"| {c} | " + " | ".join(f"{e:.0%} / {r5 - lost:.3f}" for r5, e, lost in kept) + " |")
    print()
    print(
        "| variant | settings | best setting | "
        + " | ".join(f"{c}: R@5 / empty / lost" for c in names)
        + " |"
    )
    print("|---|---|---|" + "---|" * len(names))
    for family, results in families.items():
        for name, by in results if family == "shipped" else [best(results)[1]]:
            kind = "" if family == "shipped" else f" ({best(results)[0]})"
            cells = [f"{by[c][0]:.3f} / {by[c][1]:.0%} / {by[c][2]:.3f}" for c in names]
            print(f"| {family} | {len(results)} | {name}{kind} | " + " | ".join(cells) + " |")
    print("\nMedians at the recommended floor, as shipped: the foreign answers at or above it, the true")
    print("evidence in the top 5 below it (lost) and at or above it (kept)\n")
    columns = "best score | coverage | cosine | legs' top 10 shared | query words | answer words"
    print(f"| corpus | answers | count | {columns} |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c, (corpus, rows, _) in data.items():
        groups: dict[str, list[tuple[dict, dict]]] = defaultdict(list)
        for row in rows:
            if not row["hits"]:
                continue
            if not row["own"]:
                top = max(row["hits"], key=lambda h: h["score"])
                if top["score"] >= RECOMMENDED_FLOOR:
                    groups["foreign, at or above"].append((row, top))
                continue
            for h in row["hits"][:5]:
                if h["path"] in row["evidence"]:
                    groups["own, lost" if h["score"] < RECOMMENDED_FLOOR else "own, kept"].append((row, h))
        for group in ("foreign, at or above", "own, lost", "own, kept"):
            pairs = groups[group]

            def med(values: list[float]) -> str:
                return f"{statistics.median(values):.2f}" if values else "-"

            cells = [
                med([r["hits"][0]["score"] for r, _ in pairs]),
                med([h.get("coverage") or 0.0 for _, h in pairs]),
                med([h.get("cosine") or 0.0 for _, h in pairs]),
                med([r["agree"] for r, _ in pairs]),
                med([len(r["query"].split()) for r, _ in pairs]),
                med([len(corpus.entries[(r["scope"], h["path"])][0].split()) for r, h in pairs]),
            ]
            print(f"| {c} | {group} | {len(pairs)} | " + " | ".join(cells) + " |")


async def main_async(args: argparse.Namespace) -> None:
    found = corpora(args)
    if not found:
        print(
            "floor: no corpora given and ../shared/bench/ is not here; pass --locomo FILE.json ... --beam DIR"
        )
        return
    dirs = {"LoCoMo": args.locomo_data_dir, "BEAM": args.beam_data_dir}
    data = {}
    with tempfile.TemporaryDirectory() as tmp:
        index = FullTextIndex(Path(tmp) / "analysis")
        for corpus, conversations in found:
            rows = await collect(corpus, conversations, dirs[corpus.name], args.skip_ingest)
            data[corpus.name] = (corpus, rows, Terms(corpus, index))
            print(
                f"{corpus.name}: {len(corpus.questions)} questions, {len(rows)} searches of each mode",
                flush=True,
            )
        print()
        study(data)
        index.close()


def main() -> None:
    parser = argparse.ArgumentParser(description="the score scale against the recommended floor")
    parser.add_argument("--locomo", nargs="*", default=[], help="LoCoMo JSON files")
    parser.add_argument("--beam", nargs="*", default=[], help="BEAM conversation directories")
    parser.add_argument("--locomo-data-dir", help="a data dir holding LoCoMo's store (with --skip-ingest)")
    parser.add_argument("--beam-data-dir", help="a data dir holding BEAM's store (with --skip-ingest)")
    parser.add_argument(
        "--skip-ingest", action="store_true", help="the data dirs' stores already hold the corpora"
    )
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
