"""memnos (the self-hosted memory server on PyPI) as an optional peer of `bench/peer.py`, offline.

memnos runs from its own virtualenv, `.venv-memnos` at the repository root (git-ignored), made by
    python3.11 -m venv .venv-memnos && .venv-memnos/bin/pip install memnos==0.1.45
and is driven over its HTTP API as its users drive it, with three settings that keep it offline:
- PostgreSQL: the one given (`MEMNOS_DSN`), never the build memnos downloads at its first start;
  memnos makes its own schemas there (`memnos_control`, `tenant_memnos`; pgvector must be in it).
- Embeddings: memnos embeds with fastembed and names its model in the code
  (`core.local_models.EMBED_MODEL`, BAAI/bge-small-en-v1.5, CLS pooling, downloaded at first use).
  It runs here instead on the catalog's model, MiniLM-L6-v2 int8: the launcher sets that name to
  fastembed's `sentence-transformers/all-MiniLM-L6-v2` (mean pooling, L2-normalised: the model's
  own pooling) before memnos starts, and a fastembed cache of ours (`FASTEMBED_CACHE_PATH`, laid
  out as the Hugging Face cache of `Qdrant/all-MiniLM-L6-v2-onnx`) holds links to the catalog's
  model file and tokenizer, truncation at 256 tokens; with `HF_HUB_OFFLINE=1` fastembed loads it
  from there and never asks the hub. Its vectors equal the catalog's encoder's (to 1e-7).
  memnos's installed files are not changed.
- No reranker (`MEMNOS_RERANK=0`): memnos's cross-encoder (ms-marco-MiniLM-L-6-v2) is downloaded
  at first use and no package here ships it; its recall then keeps its hybrid (vector + full-text,
  RRF) order, as memnos itself does while the reranker is loading.
No LLM either (no `OPENAI_API_KEY`, no `MEMNOS_EXTRACT_BASE_URL`): memnos's free local mode, where
a write stores the turn (embedded, full-text indexed) and extracts no facts.

memnos caches query embeddings for 60 s; that cache is off here (`MEMNOS_QUERY_CACHE_TTL_S=0`),
so the second pass over the questions ("steady state") does the same work as the first, as on
the other sides, which cache nothing.

How the run maps onto memnos:
- every LoCoMo conversation is a namespace (its scope, e.g. `conv-26`), one principal with a
  token and a read/write grant on each;
- a turn is `POST /memory/write` {namespace, text, extract: false}, text = the entry's
  description, then its contents (what every side embeds); the write is synchronous: answered
  once the turn is stored with its vector, so searchable when answered (checked: a search in
  each scope for its last turn finds it before the ingest clock stops);
- a search is `POST /memory/search` {namespace, query}: memnos's recall (its hybrid arms,
  near-duplicate collapse, its quotas: up to 11 turns, only 5 for a question it reads as
  temporal, e.g. "When did ..."); the first 10 turns are the ranking;
- memnos returns a turn's text, not its id, so hits map back to entry paths by text: the text
  memnos stores is its redaction of the one sent (computed once, before the run, by memnos's own
  `core.redact`); of turns with the same text in a scope the first one's path stands.

Run (one check, not the benchmark): .venv/bin/python bench/memnos_peer.py FILE.json [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.live import REPO, free_port

if TYPE_CHECKING:
    from bench.peer import Side

VENV = REPO / ".venv-memnos"
PYTHON = VENV / "bin" / "python"
MODEL_CACHE = VENV / "fastembed-cache"  # our fastembed cache, made by model_cache()
FASTEMBED_MODEL = "sentence-transformers/all-MiniLM-L6-v2"  # fastembed's name: mean pooling, normalised
HF_REPO_DIR = "models--Qdrant--all-MiniLM-L6-v2-onnx"  # where fastembed looks for that model
MAX_TOKENS = 256  # as the catalog's encoder
PRINCIPAL = "bench"
TOP_K = 10
START_TIMEOUT_S = 120.0
SEARCHABLE_TIMEOUT_S = 60.0

# memnos's server, its embedding model named first (it reads the name when it loads the model)
LAUNCH = """
import sys
import core.local_models
core.local_models.EMBED_MODEL = sys.argv[1]
import memnos_server
memnos_server.serve(int(sys.argv[2]))
"""

# its control plane, one principal with a grant on each namespace given; prints the token last
BOOTSTRAP = """
import os, sys
import psycopg
from psycopg.rows import dict_row
from core.control import Control
with psycopg.connect(os.environ["MEMNOS_DSN"], autocommit=True, row_factory=dict_row) as conn:
    Control.init(conn)
    principal = Control.create_principal(conn, sys.argv[1], "service")
    for namespace in sys.argv[2:]:
        Control.grant(conn, principal, namespace)
    print(Control.mint_token(conn, principal, label="bench"))
"""

# memnos's redaction of each text of a JSON list on stdin, as its write path stores it
REDACT = """
import json, sys
from core.redact import redact
print(json.dumps([redact(t.strip())[0] for t in json.load(sys.stdin)]))
"""

CHECK = """
import importlib.metadata, importlib.util
import core.local_models, fastembed, psycopg_pool
assert importlib.util.find_spec("memnos_server") is not None, "memnos_server is missing"
assert hasattr(core.local_models, "EMBED_MODEL"), "core.local_models.EMBED_MODEL is gone"
print(importlib.metadata.version("memnos"))
"""


def memnos_version() -> str | None:
    """The installed memnos's version, from its dist-info in .venv-memnos (None when absent)."""
    found = sorted(VENV.glob("lib/python*/site-packages/memnos-*.dist-info"))
    return found[-1].name.removeprefix("memnos-").removesuffix(".dist-info") if found else None


def available() -> str | None:
    """None when memnos can run here: .venv-memnos has memnos and what the launcher relies on,
    and the catalog's model files are installed; else why it cannot."""
    if not PYTHON.is_file():
        return (
            f"{VENV} does not exist (python3.11 -m venv {VENV.name} && "
            f"{VENV.name}/bin/pip install memnos==0.1.45)"
        )
    try:
        out = subprocess.run(
            [str(PYTHON), "-c", CHECK], capture_output=True, text=True, timeout=120, env=_base_env()
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{PYTHON} does not run: {e}"
    if out.returncode != 0:
        return f"memnos in {VENV} is not usable: {out.stderr.strip().splitlines()[-1:]}"
    try:
        from catalog.search.embedder import ModelFiles

        files = ModelFiles.default()
    except ImportError as e:
        return f"the catalog's model package is not installed: {e}"
    for path in (files.model, files.tokenizer):
        if not path.is_file():
            return f"model file {path} does not exist"
    return None


def model_cache() -> Path:
    """Lay out our fastembed cache: the Hugging Face cache of `Qdrant/all-MiniLM-L6-v2-onnx`
    (refs/main naming the snapshot `local`), its model.onnx and tokenizer.json links to the
    catalog's model files, its tokenizer config truncating at 256 tokens. Made anew each time
    (the links follow the catalog's install); returns the directory for FASTEMBED_CACHE_PATH."""
    from catalog.search.embedder import ModelFiles

    files = ModelFiles.default()
    repo = MODEL_CACHE / HF_REPO_DIR
    snapshot = repo / "snapshots" / "local"
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text("local")
    for name, target in (("model.onnx", files.model), ("tokenizer.json", files.tokenizer)):
        link = snapshot / name
        link.unlink(missing_ok=True)
        link.symlink_to(target.resolve())
    # fastembed pads each batch to its longest text and truncates at model_max_length
    config = {"model_max_length": MAX_TOKENS, "pad_token": "[PAD]", "do_lower_case": True}
    (snapshot / "tokenizer_config.json").write_text(json.dumps(config))
    (snapshot / "config.json").write_text(json.dumps({"pad_token_id": 0}))
    return MODEL_CACHE


def _base_env() -> dict[str, str]:
    """This environment less what would steer memnos elsewhere (its own settings, a provider
    key, another interpreter's paths), offline for the Hugging Face hub."""
    drop = ("OPENAI_API_KEY", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMNOS_") and k not in drop}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    return env


@dataclass
class MemnosServer:
    process: subprocess.Popen[bytes]
    url: str
    token: str
    run_dir: Path

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def log_tail(self, chars: int = 2000) -> str:
        return (self.run_dir / "server.log").read_text(errors="replace")[-chars:]


def start(db_url: str, namespaces: list[str], *, query_cache: bool = False) -> MemnosServer:
    """Start memnos from .venv-memnos on a free port against `db_url` (a database of its own,
    with pgvector), offline, and return once it is ready (/readyz), with a token that may read
    and write each of `namespaces`. Its working directory and HOME are a fresh directory, so no
    `.env` or `~/.memnos/config.json` reaches it; its log is server.log there."""
    run_dir = Path(tempfile.mkdtemp(prefix="memnos"))
    port = free_port()
    env = _base_env()
    env.update(
        HOME=str(run_dir),
        MEMNOS_DSN=db_url,
        MEMNOS_PORT=str(port),
        FASTEMBED_CACHE_PATH=str(model_cache()),
        MEMNOS_RERANK="0",
        MEMNOS_QUERY_CACHE_TTL_S="60" if query_cache else "0",
    )
    boot = subprocess.run(
        [str(PYTHON), "-c", BOOTSTRAP, PRINCIPAL, *namespaces],
        env=env,
        cwd=run_dir,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if boot.returncode != 0:
        raise RuntimeError(f"memnos bootstrap failed: {boot.stderr[-2000:]}")
    token = boot.stdout.strip().splitlines()[-1]
    with (run_dir / "server.log").open("ab") as log:
        process = subprocess.Popen(
            [str(PYTHON), "-c", LAUNCH, FASTEMBED_MODEL, str(port)],
            env=env,
            cwd=run_dir,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = MemnosServer(process, f"http://127.0.0.1:{port}", token, run_dir)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"memnos exited with {process.returncode}: {server.log_tail()}")
        try:
            if httpx.get(f"{server.url}/readyz", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"memnos not ready after {START_TIMEOUT_S:.0f} s: {server.log_tail()}")


def redacted(texts: list[str]) -> list[str]:
    """What memnos stores for each text: its write path strips it, then redacts secrets."""
    out = subprocess.run(
        [str(PYTHON), "-c", REDACT],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        timeout=300,
        env=_base_env(),
        cwd=tempfile.gettempdir(),
        check=True,
    )
    return list(json.loads(out.stdout))


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process and of its live descendants so far (Linux /proc; 0 elsewhere)."""
    from bench.peer import process_cpu

    total, pending = 0.0, [pid]
    while pending:
        current = pending.pop()
        total += process_cpu(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                pending.extend(int(child) for child in task.read_text().split())
            except OSError:
                continue
    return total


async def run_memnos(db_url: str, datasets: list, concurrency: int) -> Side:
    """memnos on `datasets` (bench.locomo.load() triples), as `run_peer`/`run_catalog`: every
    turn written by `concurrency` writers until searchable (with the server's CPU over it), then
    every question searched cold and again (steady), with recall. Starts memnos on `db_url` and
    stops it at the end."""
    from bench.peer import Side, _searches, postgres_cpu, text_of

    version = memnos_version() or "?"
    side = Side(f"memnos {version} (HTTP, MiniLM, no reranker)")
    # what memnos will store for each turn -> its path, per namespace (first path of a text)
    texts = [text_of(e) for _, entries, _ in datasets for e in entries]
    stored = iter(redacted(texts))
    path_of: dict[str, dict[str, str]] = {}
    last_text: dict[str, str] = {}  # what memnos stores for the last turn of each scope
    for scope, entries, _ in datasets:
        by_text = path_of.setdefault(scope, {})
        for entry in entries:
            last_text[scope] = next(stored)
            by_text.setdefault(last_text[scope], entry["path"])
    server = await asyncio.to_thread(start, db_url, [scope for scope, _, _ in datasets])
    try:
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(
            base_url=server.url,
            headers={"Authorization": f"Bearer {server.token}"},
            timeout=120,
            limits=limits,
        ) as client:
            gate = asyncio.Semaphore(concurrency)

            async def put(scope: str, entry: dict) -> None:
                async with gate:
                    r = await client.post(
                        "/memory/write", json={"namespace": scope, "text": text_of(entry), "extract": False}
                    )
                    r.raise_for_status()

            async def search(scope: str, query: str) -> list[dict]:
                r = await client.post("/memory/search", json={"namespace": scope, "query": query})
                r.raise_for_status()
                return [m for m in r.json()["memories"] if m.get("kind") == "turn"]

            cpu, pg = tree_cpu(server.process.pid), postgres_cpu()
            started = time.perf_counter()
            for scope, entries, _ in datasets:
                await asyncio.gather(*(put(scope, e) for e in entries))
            side.answered_s = time.perf_counter() - started
            # searchable: a search in each scope for its last turn finds that turn
            for scope, entries, _ in datasets:
                deadline = time.monotonic() + SEARCHABLE_TIMEOUT_S
                while True:
                    hits = await search(scope, text_of(entries[-1]))
                    if any(m["content"] == last_text[scope] for m in hits):
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"memnos: the last turn of {scope} is not searchable")
                    await asyncio.sleep(0.05)
            side.ingest_s = time.perf_counter() - started
            side.cpu_s = tree_cpu(server.process.pid) - cpu
            side.postgres_cpu_s = postgres_cpu() - pg

            async def ask(scope: str, question: dict) -> list[str]:
                ranked: list[str] = []
                for m in await search(scope, question["query"]):
                    path = path_of[scope].get(m["content"])
                    if path is not None and path not in ranked:
                        ranked.append(path)
                return ranked[:TOP_K]

            await _searches(side, datasets, ask)
    finally:
        server.stop()
    return side


# --- one check on its own ------------------------------------------------------------------------


async def check(files: list[Path], concurrency: int) -> None:
    from bench.live import BenchServer
    from bench.locomo import KS, load
    from bench.peer import fresh_database, pct
    from catalog.runtime import with_database

    reason = available()
    if reason is not None:
        print(f"memnos cannot run: {reason}")
        return
    datasets = [load(f) for f in files]
    turns = sum(len(e) for _, e, _ in datasets)
    questions = sum(len(q) for _, _, q in datasets)
    server = BenchServer()
    try:
        url = await fresh_database(with_database(server.db_url(), "postgres"), "memnos")
        side = await run_memnos(url, datasets, concurrency)
    finally:
        server.stop()
    print(f"{side.name}: {', '.join(f.name for f in files)}, {turns} turns, {questions} questions")
    print(
        f"ingest until searchable {turns / side.ingest_s:.0f} entries/s "
        f"(answered at {turns / side.answered_s:.0f}/s); "
        f"server CPU {side.cpu_s / turns * 1000:.1f} ms per turn"
    )
    for label, times in (("cold", side.cold_ms), ("steady", side.steady_ms)):
        print(f"search {label}: p50 {pct(times, 0.5):.1f} ms, p99 {pct(times, 0.99):.1f} ms")
    print(", ".join(f"R@{k} {statistics.mean(r[k] for r in side.recalls):.3f}" for k in KS))


def main() -> None:
    parser = argparse.ArgumentParser(description="memnos on LoCoMo files, once, offline")
    parser.add_argument("files", nargs="+", type=Path, help="LoCoMo JSON files")
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    asyncio.run(check(args.files, args.concurrency))


if __name__ == "__main__":
    main()
