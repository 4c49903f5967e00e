"""BEAM retrieval through the public API: Recall@1/5/10 for keyword, semantic and hybrid search on
long user-assistant conversations, per question category, and what `min_score` at the
recommended floor does (abstention questions, and questions asked in another conversation's
scope).

BEAM ("Beyond a Million Tokens") conversations are long: an assistant's reply is often hundreds
of words, and a question may ask for an instruction or a preference the user stated, an update, a
contradiction, an ordering or a summary. Every message becomes one entry in a scope of its own
conversation (scope `beam-<n>`, session `batch-<b>`, path `/messages/<id>`, contents `"user: ..."`
or `"assistant: ..."` cut at 8,000 characters, description `"batch <b>, <time anchor>"`), in
order; every
question with evidence (its `source_chat_ids`, flattened) is a search in that scope. Recall@k is
the share of a question's evidence messages in the top k, averaged over questions. Abstention
questions have no evidence: the share of them that `min_score` answers with nothing is reported,
as is the share of questions asked in each other conversation's scope that come back empty.

Run: .venv/bin/python bench/beam.py [DIR ...] [--url URL --token T] [--floor F] [--paths numbered|named]
(default: the conversations under ../shared/bench/beam/500K/ when present; DIR holds chat.json and
probing_questions.json)
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
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.live import REPO, BenchServer
from bench.locomo import MODES, ingest_all, mean_recall, recall, search, settle
from catalog.search.fusion import RECOMMENDED_FLOOR

STORE = "main.default.beam"
UC = "/api/2.1/unity-catalog"
MAX_CHARS = 8000  # a message longer than this (pasted output, padding) is cut
_MARKER = re.compile(r"\s*->->\s*\d+\s*,\s*\d+\s*$")  # the index marker ending a user message


def _ids(value: Any) -> list[int]:
    """The message ids of a question's `source_chat_ids` (a list, a list of lists or a dict of
    lists), flattened."""
    if value is None:
        return []
    if isinstance(value, dict):
        return [i for v in value.values() for i in _ids(v)]
    if isinstance(value, list):
        return [i for v in value for i in _ids(v)]
    if isinstance(value, int):
        return [value]
    if isinstance(value, str) and value.strip().isdigit():
        return [int(value)]
    return []


def path_of(message_id: int, layout: str) -> str:
    """`numbered`: /messages/<id> (what numbered neighbours see); `named`: /messages/m<id>.md."""
    return f"/messages/{message_id}" if layout == "numbered" else f"/messages/m{message_id}.md"


def load(directory: Path, layout: str = "numbered") -> tuple[str, list[dict], list[dict], list[dict]]:
    """(scope, entries, questions with evidence, abstention questions)."""
    chat = json.loads((directory / "chat.json").read_text())
    probing = json.loads((directory / "probing_questions.json").read_text())
    scope = f"beam-{directory.name}"
    entries, ids = [], set()
    for batch in chat:
        anchor = batch.get("time_anchor") or ""
        for turn in batch.get("turns", []):
            for message in turn:
                text = _MARKER.sub("", str(message.get("content", "")))[:MAX_CHARS]
                if not text.strip():
                    continue
                ids.add(message["id"])
                entries.append(
                    {
                        "path": path_of(message["id"], layout),
                        "contents": f"{message['role']}: {text}",
                        "description": f"batch {batch.get('batch_number')}, {anchor}".strip(", "),
                        "session_id": f"batch-{batch.get('batch_number')}",
                    }
                )
    questions, abstentions = [], []
    for category, items in probing.items():
        for item in items:
            evidence = {path_of(i, layout) for i in _ids(item.get("source_chat_ids")) if i in ids}
            if category == "abstention":
                abstentions.append({"query": item["question"], "category": category})
            elif evidence:
                questions.append({"query": item["question"], "evidence": evidence, "category": category})
    return scope, entries, questions, abstentions


async def run(args: argparse.Namespace) -> dict[str, Any] | None:
    dirs = [Path(d) for d in args.dirs] or sorted(
        (p for p in (REPO.parent / "shared/bench/beam/500K").glob("*") if (p / "chat.json").exists()),
        key=lambda p: int(p.name) if p.name.isdigit() else 0,
    )
    if not dirs:
        print("BEAM: no directories given and ../shared/bench/beam/500K/ is not here; pass them to run it")
        return None
    floor = args.floor
    server = None
    if args.url:
        url, token = args.url, args.token
    else:
        server = BenchServer(Path(args.data_dir) if args.data_dir else None)
        url, token = server.url, server.token()
    try:
        async with httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=300
        ) as client:
            r = await client.post(
                f"{UC}/memory-stores", json={"name": "beam", "catalog_name": "main", "schema_name": "default"}
            )
            if r.status_code not in (200, 409):
                r.raise_for_status()
            datasets = [load(d, args.paths) for d in dirs]
            scopes = [scope for scope, _, _, _ in datasets]
            n_entries = sum(len(e) for _, e, _, _ in datasets)
            started = time.perf_counter()
            if not args.skip_ingest:
                conversations = [(scope, entries) for scope, entries, _, _ in datasets]
                await ingest_all(client, conversations, args.concurrency, store=STORE)
            ingest_s = time.perf_counter() - started
            settle_s = await settle(client)
            questions = [(scope, q) for scope, _, qs, _ in datasets for q in qs]
            abstain = [(scope, q) for scope, _, _, ab in datasets for q in ab]
            foreign = [(other, q) for scope, q in questions for other in scopes if other != scope]
            gate = asyncio.Semaphore(args.concurrency)

            async def ask(scope: str, q: dict, mode: str, min_score: float | None = None) -> list:
                async with gate:
                    return await search(client, scope, q["query"], mode, 10, min_score, store=STORE)

            async def ask_all(pairs: list, mode: str, min_score: float | None = None) -> list:
                return await asyncio.gather(*(ask(s, q, mode, min_score) for s, q in pairs))

            results: dict[str, list[dict[int, float]]] = {}
            floored: dict[str, list[dict[int, float]]] = {}
            empty: dict[str, float] = {}
            abstained: dict[str, float] = {}
            for mode in MODES:
                answers = await ask_all(questions, mode)
                results[mode] = [
                    recall([p for p, _ in a], q["evidence"])
                    for (_, q), a in zip(questions, answers, strict=True)
                ]
                answers = await ask_all(questions, mode, floor)
                floored[mode] = [
                    recall([p for p, _ in a], q["evidence"])
                    for (_, q), a in zip(questions, answers, strict=True)
                ]
                if foreign:
                    answers = await ask_all(foreign, mode, floor)
                    empty[mode] = sum(1 for a in answers if not a) / len(answers)
                if abstain:
                    answers = await ask_all(abstain, mode, floor)
                    abstained[mode] = sum(1 for a in answers if not a) / len(answers)
    finally:
        if server is not None:
            server.stop()

    ingested = (
        "ingest skipped (the data dir's store)"
        if args.skip_ingest
        else f"ingested in {ingest_s:.1f} s ({n_entries / max(ingest_s, 1e-9):.0f} entries/s), every "
        f"vector stored {settle_s:.1f} s later"
    )
    print(
        f"BEAM: {len(dirs)} conversation(s), {n_entries} messages, {len(questions)} questions with "
        f"evidence ({len(abstain)} abstention); {ingested}; paths {args.paths}\n"
    )
    print("| mode | R@1 | R@5 | R@10 |")
    print("|---|---|---|---|")
    for mode in MODES:
        print(f"| {mode} | " + " | ".join(f"{v:.3f}" for v in mean_recall(results[mode])) + " |")
    categories = sorted({q["category"] for _, q in questions})
    print("\nR@5 by category:\n")
    print("| category | questions | " + " | ".join(MODES) + " |")
    print("|---|---|" + "---|" * len(MODES))
    for category in categories:
        rows = [i for i, (_, q) in enumerate(questions) if q["category"] == category]
        cells = [statistics.mean(results[m][i][5] for i in rows) for m in MODES]
        print(f"| {category} | {len(rows)} | " + " | ".join(f"{v:.3f}" for v in cells) + " |")
    print(
        f"\nmin_score {floor}: questions asked in another conversation's scope ({len(foreign)} searches) "
        f"and abstention questions ({len(abstain)}) that come back empty, and the true-scope R@5 lost "
        "to the floor\n"
    )
    print("| mode | foreign scope: empty | abstention: empty | true scope: R@5 at the floor | R@5 drop |")
    print("|---|---|---|---|---|")
    for mode in MODES:
        r5, f5 = mean_recall(results[mode])[1], mean_recall(floored[mode])[1]
        share = f"{empty[mode]:.0%}" if mode in empty else "n/a"
        ab = f"{abstained[mode]:.0%}" if mode in abstained else "n/a"
        print(f"| {mode} | {share} | {ab} | {f5:.3f} | {r5 - f5:.3f} |")
    return {"recall": {m: mean_recall(results[m]) for m in MODES}, "empty": empty, "abstained": abstained}


def main() -> None:
    parser = argparse.ArgumentParser(description="BEAM retrieval benchmark")
    parser.add_argument(
        "dirs", nargs="*", help="BEAM conversation directories (chat.json, probing_questions.json)"
    )
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
        "--paths",
        choices=("numbered", "named"),
        default="numbered",
        help="entry paths ending in the message number (/messages/12) or named (/messages/m12.md)",
    )
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
