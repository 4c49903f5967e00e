"""LoCoMo retrieval through the public API: Recall@1/5/10 for keyword, semantic and hybrid search.

Every dialogue turn becomes one entry in a scope of its own conversation (scope `conv-<file
number>`, path `/dialog/<dia_id>`, contents `"<speaker>: <text>"`, description `"session <N>,
<session date>"`); every question with evidence is a search in that scope. Recall@k is the share
of a question's evidence turns found in the top k, averaged over questions.

Run: .venv/bin/python bench/locomo.py [FILE.json ...] [--url URL --token T] [--tune]
(default files: ../shared/bench/locomo/{26,30,41}.json when present)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.live import REPO, BenchServer

STORE = "main.default.locomo"
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
                }
            )
    questions = []
    for qa in data.get("qa", []):
        ids = [re.sub(r"[^\w:]", "", x) for e in qa.get("evidence", []) for x in re.split(r"[\s,;]+", e) if x]
        ids = [x for x in ids if x in turn_ids]
        if ids:
            questions.append({"query": qa["question"], "evidence": {f"/dialog/{x}" for x in set(ids)}})
    return scope, entries, questions


async def ingest(client: httpx.AsyncClient, scope: str, entries: list[dict], concurrency: int) -> None:
    gate = asyncio.Semaphore(concurrency)

    async def put(entry: dict) -> None:
        async with gate:
            r = await client.post(
                f"{UC}/memory-stores/{STORE}/entries",
                params={"scope": scope},
                json={**entry, "write_mode": "OVERWRITE"},
            )
            r.raise_for_status()

    await asyncio.gather(*(put(e) for e in entries))


async def search(
    client: httpx.AsyncClient, scope: str, query: str, mode: str, top_k: int
) -> list[tuple[str, float]]:
    r = await client.post(
        f"{UC}/memory-stores/{STORE}/entries:search",
        json={"scope": scope, "query": query, "mode": mode, "top_k": top_k},
    )
    r.raise_for_status()
    return [(x["memory_entry"]["path"], x["score"]) for x in r.json()["results"]]


def recall(ranked: list[str], evidence: set[str]) -> dict[int, float]:
    return {k: len(evidence & set(ranked[:k])) / len(evidence) for k in KS}


async def run(args: argparse.Namespace) -> None:
    files = [Path(f) for f in args.files] or sorted((REPO.parent / "shared/bench/locomo").glob("*.json"))
    if not files:
        print(
            "LoCoMo: no files given and ../shared/bench/locomo/ is not here; pass LoCoMo JSON paths to run it"
        )
        return
    server = None
    if args.url:
        url, token = args.url, args.token
    else:
        server = BenchServer()
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
            n_entries = sum(len(e) for _, e, _ in datasets)
            started = time.perf_counter()
            for scope, entries, _ in datasets:
                await ingest(client, scope, entries, args.concurrency)
            ingest_s = time.perf_counter() - started
            questions = [(scope, q) for scope, _, qs in datasets for q in qs]
            modes = ("keyword", "semantic", "hybrid")
            results: dict[str, list[dict[int, float]]] = {m: [] for m in modes}
            raw: dict[str, list[list[tuple[str, float]]]] = {"keyword": [], "semantic": []}
            gate = asyncio.Semaphore(args.concurrency)

            async def ask(scope: str, q: dict, mode: str, top_k: int) -> list[tuple[str, float]]:
                async with gate:
                    return await search(client, scope, q["query"], mode, top_k)

            for mode in modes:
                top_k = 50 if (args.tune and mode != "hybrid") else 10
                answers = await asyncio.gather(*(ask(s, q, mode, top_k) for s, q in questions))
                for (_, q), ranked in zip(questions, answers, strict=True):
                    results[mode].append(recall([p for p, _ in ranked], q["evidence"]))
                    if mode in raw:
                        raw[mode].append(ranked)
    finally:
        if server is not None:
            server.stop()

    print(
        f"LoCoMo: {len(files)} conversation(s) ({', '.join(f.name for f in files)}), {n_entries} turns, "
        f"{len(questions)} questions; ingested in {ingest_s:.1f} s ({n_entries / ingest_s:.0f} entries/s)\n"
    )
    print("| mode | R@1 | R@5 | R@10 |")
    print("|---|---|---|---|")
    for mode in modes:
        row = [statistics.mean(r[k] for r in results[mode]) for k in KS]
        print(f"| {mode} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    if args.tune:
        tune(questions, raw)


def tune(questions: list, raw: dict) -> None:
    from catalog.search.fusion import FusionWeights, fuse

    print("\nfusion grid (offline, from the top 50 of each mode):")
    print("| keyword weight | R@1 | R@5 | R@10 |")
    print("|---|---|---|---|")
    for w in [i / 20 for i in range(21)]:
        rows = []
        for (_, q), kw, sem in zip(questions, raw["keyword"], raw["semantic"], strict=True):
            ranked = [doc for doc, _ in fuse(kw, sem, FusionWeights(keyword_weight=w))]
            rows.append(recall(ranked, q["evidence"]))
        print(f"| {w:.2f} | " + " | ".join(f"{statistics.mean(r[k] for r in rows):.3f}" for k in KS) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description="LoCoMo retrieval benchmark")
    parser.add_argument("files", nargs="*", help="LoCoMo JSON files")
    parser.add_argument("--url", help="a running server (default: start one on a fresh data dir)")
    parser.add_argument("--token", help="a token for --url (admin, or WRITE and READ on main.default)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--tune", action="store_true", help="also grid-search the fusion weight offline")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
