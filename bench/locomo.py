"""LoCoMo retrieval through the public API: Recall@1/5/10 for keyword, semantic and hybrid search,
and what `min_score` at the recommended floor does.

Every dialogue turn becomes one entry in a scope of its own conversation (scope `conv-<file
number>`, session `session-<N>`, path `/dialog/<dia_id>`, contents `"<speaker>: <text>"`,
description `"session <N>, <session date>"`), written in order; every question with evidence
is a search in that scope. Recall@k is the share of a question's evidence turns found in the top
k, averaged over questions.

The floor check: every question is searched with `min_score` (default: the recommended floor) in
each other conversation's scope, where nothing answers it (the share that comes back empty), and
in its own scope (the R@5 the floor costs there).

--tune recomputes the hybrid offline from each mode's top 100 (coverage and cosine recovered
from the modes' calibrated scores, neighbours from the paths) over a grid of weights, for all
conversations and with each one held out in turn (chosen on the others, checked on it).

Run: .venv/bin/python bench/locomo.py [FILE.json ...] [--url URL --token T] [--floor F] [--tune]
(default files: ../shared/bench/locomo/{26,30,41}.json when present)
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import operator
import re
import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.live import REPO, BenchServer
from catalog.search.fusion import (
    DEFAULT_WEIGHTS,
    RECOMMENDED_FLOOR,
    FusionWeights,
    hybrid_score,
    ranked,
    with_context,
)

STORE = "main.default.locomo"
BATCH = 100  # entries of one batchCreate (its maximum)
UC = "/api/2.1/unity-catalog"
KS = (1, 5, 10)


def load(path: Path) -> tuple[str, list[dict], list[dict]]:
    data = json.loads(path.read_text())
    conversation = data.get("conversation", data)
    number = re.sub(r"\D", "", path.stem) or path.stem
    scope = f"conv-{number}"
    entries, turn_ids = [], set()
    for key, turns in conversation.items():
        match = re.fullmatch(r"session_(\d+)", key)
        if not match or not isinstance(turns, list):
            continue
        date = conversation.get(f"{key}_date_time", "")
        for turn in turns:
            turn_ids.add(turn["dia_id"])
            entries.append(
                {
                    "path": f"/dialog/{turn['dia_id']}",
                    "contents": f"{turn['speaker']}: {turn['text']}",
                    "description": f"session {match[1]}, {date}",
                    "session_id": f"session-{match[1]}",
                }
            )
    questions = []
    for qa in data.get("qa", []):
        ids = [re.sub(r"[^\w:]", "", x) for e in qa.get("evidence", []) for x in re.split(r"[\s,;]+", e) if x]
        ids = [x for x in ids if x in turn_ids]
        if ids:
            questions.append({"query": qa["question"], "evidence": {f"/dialog/{x}" for x in set(ids)}})
    return scope, entries, questions


async def ingest(
    client: httpx.AsyncClient, scope: str, entries: list[dict], concurrency: int, store: str = STORE
) -> None:
    """Write a conversation in order, as an application importing it would: batches of 100
    (`entries:batchCreate`), one after the other, so that the server's write order is the
    conversation's (its neighbours). Conversations are ingested side by side (`ingest_all`)."""
    del concurrency  # one conversation is one ordered stream
    for start in range(0, len(entries), BATCH):
        r = await client.post(
            f"{UC}/memory-stores/{store}/entries:batchCreate",
            params={"scope": scope},
            json={"entries": entries[start : start + BATCH], "write_mode": "OVERWRITE"},
        )
        r.raise_for_status()
        failed = [x for x in r.json()["results"] if x["status"] == "FAILED"]
        if failed:
            raise RuntimeError(f"{len(failed)} entries failed: {failed[0]}")


async def ingest_all(
    client: httpx.AsyncClient,
    conversations: list[tuple[str, list[dict]]],
    concurrency: int,
    store: str = STORE,
) -> None:
    """Every conversation, `concurrency` of them at once, each in order."""
    gate = asyncio.Semaphore(concurrency)

    async def one(scope: str, entries: list[dict]) -> None:
        async with gate:
            await ingest(client, scope, entries, 1, store)

    await asyncio.gather(*(one(scope, entries) for scope, entries in conversations))


async def search(
    client: httpx.AsyncClient,
    scope: str,
    query: str,
    mode: str,
    top_k: int,
    min_score: float | None = None,
    store: str = STORE,
) -> list[tuple[str, float]]:
    body: dict = {"scope": scope, "query": query, "mode": mode, "top_k": top_k}
    if min_score is not None:
        body["min_score"] = min_score
    r = await client.post(f"{UC}/memory-stores/{store}/entries:search", json=body)
    r.raise_for_status()
    return [(x["memory_entry"]["path"], x["score"]) for x in r.json()["results"]]


async def settle(client: httpx.AsyncClient, deadline_s: float = 3600.0) -> float:
    """Wait until every entry written has its vector (the embedding backlog of `/metrics` is 0),
    so that the searches measure ranking, not the embedding worker's lag; the seconds waited."""
    started = time.perf_counter()
    while time.perf_counter() - started < deadline_s:
        r = await client.get("/metrics")
        r.raise_for_status()
        backlog = sum(
            float(line.rsplit(" ", 1)[1])
            for line in r.text.splitlines()
            if line.startswith("catalog_embedding_backlog_entries")
        )
        if backlog == 0:
            break
        await asyncio.sleep(1.0)
    return time.perf_counter() - started


def recall(ranked: list[str], evidence: set[str]) -> dict[int, float]:
    return {k: len(evidence & set(ranked[:k])) / len(evidence) for k in KS}


def mean_recall(rows: list[dict[int, float]]) -> list[float]:
    return [statistics.mean(r[k] for r in rows) for k in KS] if rows else [0.0] * len(KS)


MODES = ("keyword", "semantic", "hybrid")


async def run(args: argparse.Namespace) -> None:
    files = [Path(f) for f in args.files] or sorted((REPO.parent / "shared/bench/locomo").glob("*.json"))
    if not files:
        print(
            "LoCoMo: no files given and ../shared/bench/locomo/ is not here; pass LoCoMo JSON paths to run it"
        )
        return
    floor = args.floor
    server = None
    if args.url:
        url, token = args.url, args.token
    else:
        server = BenchServer(Path(args.data_dir) if args.data_dir else None)
        url, token = server.url, server.token()
    try:
        async with httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120
        ) as client:
            r = await client.post(
                f"{UC}/memory-stores",
                json={"name": "locomo", "catalog_name": "main", "schema_name": "default"},
            )
            if r.status_code not in (200, 409):
                r.raise_for_status()
            datasets = [load(f) for f in files]
            scopes = [scope for scope, _, _ in datasets]
            n_entries = sum(len(e) for _, e, _ in datasets)
            started = time.perf_counter()
            if not args.skip_ingest:
                await ingest_all(
                    client, [(scope, entries) for scope, entries, _ in datasets], args.concurrency
                )
            ingest_s = time.perf_counter() - started
            settle_s = await settle(client)
            questions = [(scope, q) for scope, _, qs in datasets for q in qs]
            # every question is also asked in each other conversation's scope, where nothing answers it
            foreign = [(other, q) for scope, q in questions for other in scopes if other != scope]
            gate = asyncio.Semaphore(args.concurrency)

            async def ask(
                scope: str, q: dict, mode: str, top_k: int, min_score: float | None = None
            ) -> list[tuple[str, float]]:
                async with gate:
                    return await search(client, scope, q["query"], mode, top_k, min_score)

            async def ask_all(pairs: list, mode: str, top_k: int, min_score: float | None = None) -> list:
                return await asyncio.gather(*(ask(s, q, mode, top_k, min_score) for s, q in pairs))

            results: dict[str, list[dict[int, float]]] = {}
            floored: dict[str, list[dict[int, float]]] = {}
            empty: dict[str, float] = {}
            for mode in MODES:
                answers = await ask_all(questions, mode, 10)
                results[mode] = [
                    recall([p for p, _ in a], q["evidence"])
                    for (_, q), a in zip(questions, answers, strict=True)
                ]
                answers = await ask_all(questions, mode, 10, floor)
                floored[mode] = [
                    recall([p for p, _ in a], q["evidence"])
                    for (_, q), a in zip(questions, answers, strict=True)
                ]
                if foreign:
                    answers = await ask_all(foreign, mode, 10, floor)
                    empty[mode] = sum(1 for a in answers if not a) / len(answers)
            raw: dict[str, dict[str, list]] = {}
            if args.tune:
                for mode in ("keyword", "semantic"):
                    raw[mode] = {
                        "true": await ask_all(questions, mode, 100),
                        "foreign": await ask_all(foreign, mode, 100) if foreign else [],
                    }
    finally:
        if server is not None:
            server.stop()

    ingested = (
        "ingest skipped (the data dir's store)"
        if args.skip_ingest
        else f"ingested in {ingest_s:.1f} s ({n_entries / max(ingest_s, 1e-9):.0f} entries/s), "
        f"every vector stored {settle_s:.1f} s later"
    )
    print(
        f"LoCoMo: {len(files)} conversation(s) ({', '.join(f.name for f in files)}), {n_entries} turns, "
        f"{len(questions)} questions; {ingested}\n"
    )
    print("| mode | R@1 | R@5 | R@10 |")
    print("|---|---|---|---|")
    for mode in MODES:
        print(f"| {mode} | " + " | ".join(f"{v:.3f}" for v in mean_recall(results[mode])) + " |")
    print(
        f"\nmin_score {floor}: questions asked in another conversation's scope ({len(foreign)} searches) "
        "that come back empty (goal for hybrid: >= 90%), and the true-scope R@5 lost to the floor "
        "(goal: <= 0.03)\n"
    )
    print("| mode | foreign scope: empty | true scope: R@5 at the floor | R@5 drop |")
    print("|---|---|---|---|")
    for mode in MODES:
        r5, f5 = mean_recall(results[mode])[1], mean_recall(floored[mode])[1]
        share = f"{empty[mode]:.0%}" if mode in empty else "n/a (one conversation)"
        print(f"| {mode} | {share} | {f5:.3f} | {r5 - f5:.3f} |")
    if args.tune:
        tune(questions, foreign, scopes, raw, floor)


# --- offline tuning: the hybrid recomputed from each mode's top 100 ------------------------------

Features = tuple[dict[str, float], dict[str, float]]  # (coverage, cosine) of each candidate


def features(keyword: list[tuple[str, float]], semantic: list[tuple[str, float]]) -> Features:
    """Each candidate's coverage and cosine, recovered from the modes' scores (computed with the
    server's weights); a candidate missing from the semantic list takes its lowest cosine, one
    missing from the keyword list coverage 0."""
    w = DEFAULT_WEIGHTS
    coverage = {p: s ** (1 / w.coverage_power) for p, s in keyword}
    cosine = {}
    for p, s in semantic:
        s = min(max(s, 1e-9), 1 - 1e-9)
        cosine[p] = w.cosine_centre + w.cosine_width * math.log(s / (1 - s))
    low = min(cosine.values(), default=0.0)
    for p in coverage:
        cosine.setdefault(p, low)
    for p in cosine:
        coverage.setdefault(p, 0.0)
    return coverage, cosine


def turn_neighbours(path: str) -> list[str]:
    """The turns written just before and after a turn in its session: the server's neighbours
    (`catalog.search.neighbours`), as `ingest` writes a conversation (in order, one session per
    LoCoMo session, every turn short), read off the turn's number (`/dialog/D<session>:<n>`)."""
    match = re.fullmatch(r"(/dialog/D\d+:)(\d+)", path)
    if match is None:
        return []
    return [f"{match[1]}{n}" for n in (int(match[2]) - 1, int(match[2]) + 1) if n >= 1]


def hybrid_offline(f: Features, w: FusionWeights) -> list[tuple[str, float]]:
    coverage, cosine = f
    own = {p: hybrid_score(cosine[p], coverage[p], w) for p in coverage}
    return ranked(with_context(own, {p: turn_neighbours(p) for p in own}, w), cosine)


def evaluate(
    true: list[tuple[dict, Features]], foreign: list[Features], w: FusionWeights, floor: float
) -> tuple[list[float], float, float]:
    """(R@1/5/10, share of foreign searches empty at the floor, R@5 drop at the floor)."""
    rows, kept = [], []
    for q, f in true:
        hits = hybrid_offline(f, w)
        rows.append(recall([p for p, _ in hits], q["evidence"]))
        kept.append(recall([p for p, s in hits if s >= floor], q["evidence"]))
    empty = [not hits or hits[0][1] < floor for hits in (hybrid_offline(f, w) for f in foreign)]
    r = mean_recall(rows)
    return r, (sum(empty) / len(empty) if empty else 0.0), r[1] - mean_recall(kept)[1]


GRID = [
    FusionWeights(semantic_weight=s, cosine_centre=c, cosine_width=cw, coverage_power=p, context=x)
    for s in (0.3, 0.4, 0.5)
    for c in (0.3, 0.35)
    for cw in (0.1, 0.15)
    for p in (0.7, 1.0)
    for x in (0.7, 0.8)
]


def tune(questions: list, foreign: list, scopes: list[str], raw: dict, floor: float) -> None:
    true = [
        (scope, q, features(kw, sem))
        for (scope, q), kw, sem in zip(
            questions, raw["keyword"]["true"], raw["semantic"]["true"], strict=True
        )
    ]
    # a foreign search belongs to the conversation the question came from
    origin = [scope for scope, q in questions for other in scopes if other != scope]
    away = [
        (src, features(kw, sem))
        for src, kw, sem in zip(origin, raw["keyword"]["foreign"], raw["semantic"]["foreign"], strict=True)
    ]

    def part(keep: Callable[[str], bool]) -> tuple[list, list]:
        return [(q, f) for s, q, f in true if keep(s)], [f for s, f in away if keep(s)]

    def row(label: str, w: FusionWeights, t: list, a: list) -> str:
        r, e, d = evaluate(t, a, w, floor)
        return f"| {label} | " + " | ".join(f"{v:.3f}" for v in r) + f" | {e:.0%} | {d:.3f} |"

    def name(w: FusionWeights) -> str:
        return (
            f"semantic {w.semantic_weight}, centre {w.cosine_centre}, width {w.cosine_width}, "
            f"power {w.coverage_power}, context {w.context}"
        )

    print(f"\nhybrid recomputed offline from the top 100 of each mode; min_score {floor}:")
    print("| weights | R@1 | R@5 | R@10 | foreign: empty | R@5 drop |")
    print("|---|---|---|---|---|---|")
    everything = part(lambda s: True)
    print(row(f"shipped ({name(DEFAULT_WEIGHTS)})", DEFAULT_WEIGHTS, *everything))
    for label, change in (
        ("without neighbours (context 0)", {"context": 0.0}),
        ("without cosine (semantic weight 0)", {"semantic_weight": 0.0}),
        ("neither (the keyword mode's order)", {"context": 0.0, "semantic_weight": 0.0}),
    ):
        print(row(label, dataclasses.replace(DEFAULT_WEIGHTS, **change), *everything))
    if len(scopes) < 2:
        return
    print("\nsplit: chosen on the other conversations (the best mean R@1/5/10 among weights meeting both")
    print(f"floor goals there), checked on the one held out ({len(GRID)} weight sets):")
    print("| held out | chosen weights | set | R@1 | R@5 | R@10 | foreign: empty | R@5 drop |")
    print("|---|---|---|---|---|---|---|---|")
    for held in scopes:
        train = part(partial(operator.ne, held))
        best: tuple | None = None
        for w in GRID:
            r, e, d = evaluate(*train, w, floor)
            key = (e >= 0.8 and d <= 0.03, sum(r) / len(r))
            if best is None or key > best[0]:
                best = (key, w)
        assert best is not None
        w = best[1]
        for label, t in (("tuned on", train), ("held out", part(partial(operator.eq, held)))):
            print(row(f"{held} | {name(w)} | {label}", w, *t))
        print(row(f"{held} | shipped | held out", DEFAULT_WEIGHTS, *part(partial(operator.eq, held))))


def main() -> None:
    parser = argparse.ArgumentParser(description="LoCoMo retrieval benchmark")
    parser.add_argument("files", nargs="*", help="LoCoMo JSON files")
    parser.add_argument("--url", help="a running server (default: start one on a fresh data dir)")
    parser.add_argument("--token", help="a token for --url (admin, or WRITE and READ on main.default)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument(
        "--data-dir", help="the server's data dir (default: a fresh one); with --skip-ingest, reused"
    )
    parser.add_argument(
        "--skip-ingest",
        action="store_true",
        help="the store already holds the conversations (a data dir of an earlier run): search only",
    )
    parser.add_argument("--floor", type=float, default=RECOMMENDED_FLOOR, help="the min_score to check")
    parser.add_argument(
        "--tune",
        action="store_true",
        help="also grid-search the hybrid's weights offline, with each conversation held out in turn",
    )
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
