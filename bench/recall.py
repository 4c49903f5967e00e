"""Retrieval on both development corpora in one command: LoCoMo's short chat turns
(`bench/locomo.py`) and BEAM's long user-assistant conversations (`bench/beam.py`), each through
the API on a fresh server, each printing its tables (R@1/5/10 per mode, per question category for
BEAM, what `min_score` does); then, with `--langgraph`, LangGraph's `AsyncPostgresStore` on the
same corpora with the same model (`bench/peer.py`'s peer: semantic search over the entry's
description and contents, its only mode), R@1/5/10 beside the catalog's hybrid.

Run: .venv/bin/python bench/recall.py [--langgraph] [--locomo FILE.json ...] [--beam DIR ...]
(default: ../shared/bench/locomo/*.json and ../shared/bench/beam/500K/* when present; the
LangGraph store is the `bench` extra: pip install -e '.[bench]')
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import beam, locomo
from bench.live import REPO, BenchServer
from catalog.search.fusion import RECOMMENDED_FLOOR


def _args(**given: object) -> argparse.Namespace:
    base = {
        "url": None,
        "token": None,
        "concurrency": 8,
        "floor": RECOMMENDED_FLOOR,
        "data_dir": None,
        "skip_ingest": False,
        "tune": False,
        "paths": "numbered",
    }
    return argparse.Namespace(**{**base, **given})


async def langgraph(corpora: dict[str, list]) -> None:
    """LangGraph's store on each corpus (every entry written, every question searched, top 10)."""
    try:
        from bench.peer import PEER_DATABASE, fresh_database, peer_encoder, run_peer
        from catalog.runtime import with_database
    except ImportError as exc:
        print(f"LangGraph's store: not installed ({exc}); pip install -e '.[bench]'")
        return
    server = BenchServer()  # its embedded PostgreSQL holds the store's database
    try:
        postgres = with_database(server.db_url(), "postgres")
        print("\n| corpus | LangGraph's store (semantic) R@1 | R@5 | R@10 |")
        print("|---|---|---|---|")
        for name, datasets in corpora.items():
            url = await fresh_database(postgres, f"{PEER_DATABASE}_{name}")
            side = await run_peer(url, datasets, peer_encoder(), 8)
            cells = [statistics.mean(r[k] for r in side.recalls) for k in locomo.KS]
            print(f"| {name} | " + " | ".join(f"{v:.3f}" for v in cells) + " |", flush=True)
    finally:
        server.stop()


async def run(args: argparse.Namespace) -> None:
    locomo_files = [str(f) for f in args.locomo] or [
        str(f) for f in sorted((REPO.parent / "shared/bench/locomo").glob("*.json"))
    ]
    beam_dirs = [str(d) for d in args.beam] or [
        str(p)
        for p in sorted(
            (p for p in (REPO.parent / "shared/bench/beam/500K").glob("*") if (p / "chat.json").exists()),
            key=lambda p: int(p.name) if p.name.isdigit() else 0,
        )
    ]
    print("== LoCoMo (bench/locomo.py)\n", flush=True)
    await locomo.run(_args(files=locomo_files))
    print("\n== BEAM (bench/beam.py)\n", flush=True)
    await beam.run(_args(dirs=beam_dirs))
    if args.langgraph:
        corpora = {
            "locomo": [locomo.load(Path(f)) for f in locomo_files],
            "beam": [
                (scope, entries, questions)
                for scope, entries, questions, _ in map(beam.load, map(Path, beam_dirs))
            ],
        }
        await langgraph({k: v for k, v in corpora.items() if v})


def main() -> None:
    parser = argparse.ArgumentParser(description="retrieval on both development corpora")
    parser.add_argument("--locomo", nargs="*", default=[], help="LoCoMo JSON files")
    parser.add_argument("--beam", nargs="*", default=[], help="BEAM conversation directories")
    parser.add_argument("--langgraph", action="store_true", help="also LangGraph's store on both")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
