"""What responses and memory extraction cost in the server itself, with an upstream model that
answers at once (the scripted OpenAI-compatible server of the tests, in this process): the time
left is the server's own work (authorization, the conversation read and append, each tool call
with its audit event, search) plus two local HTTP hops per model call.

A `catalog serve` on a fresh data dir (embedded PostgreSQL), one memory store, one session store.
Steps, each `--n` times, sequentially:
1. the upstream alone (a chat completion straight to the scripted server): the floor;
2. a response over a conversation that the model answers at once (one model call);
3. a response in which the model saves a memory, then answers (two model calls, one tool call);
4. a response in which the model searches memory, then answers (two model calls, one search);
5. the same as 2, streamed: time to the first text delta, and to `response.completed`;
6. an extraction of a 20-message session in which the model lists memories, saves two, answers
   (three model calls, three tool calls), and extracting the unchanged session again (no model call).

Run: .venv/bin/python bench/responses.py [--n 50]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from scripted_llm import Call, Reply, ScriptedLLM  # noqa: E402

from bench.live import BenchServer  # noqa: E402

UC = "/api/2.1/unity-catalog"
STORE = "main.default.responses-bench"
WORDS = "Peanuts stay out of every recipe you cook for me this week, thank you very much for asking."


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def row(name: str, values: list[float], calls: str) -> str:
    ms = [v * 1000 for v in values]
    return f"| {name} | {calls} | {statistics.median(ms):.1f} | {pct(ms, 0.95):.1f} | {len(ms)} |"


def timed(n: int, prepare: Callable[[int], None], act: Callable[[int], object]) -> list[float]:
    out = []
    for i in range(n):
        prepare(i)
        began = time.perf_counter()
        act(i)
        out.append(time.perf_counter() - began)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=50)
    args = parser.parse_args()
    n = args.n
    with ScriptedLLM() as llm:
        server = BenchServer(env={"CATALOG_LLM_BASE_URL": llm.url, "CATALOG_LLM_MODEL": "scripted"})
        try:
            run(server, llm, n)
        finally:
            server.stop()


def run(server: BenchServer, llm: ScriptedLLM, n: int) -> None:
    http = httpx.Client(
        base_url=server.url, headers={"Authorization": f"Bearer {server.token()}"}, timeout=60
    )
    r = http.post(
        f"{UC}/memory-stores",
        json={"name": "responses-bench", "catalog_name": "main", "schema_name": "default"},
    )
    r.raise_for_status()
    bind = {"memory_store": {"name": STORE}, "scope": {"kind": "user", "value": "bench-user"}}
    conversation = http.post("/v1/conversations", json=bind).json()["id"]
    upstream = httpx.Client(base_url=llm.url, timeout=60)
    results: list[str] = []

    def respond(i: int) -> None:
        r = http.post(
            "/v1/responses", json={"model": "m", "input": f"turn {i}", "conversation": conversation}
        )
        r.raise_for_status()

    floor = timed(
        n,
        lambda i: llm.script(Reply(WORDS)),
        lambda i: upstream.post(
            "/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]}
        ),
    )
    results.append(row("the upstream alone (the floor)", floor, "1 model call"))
    results.append(
        row(
            "response, answered at once",
            timed(n, lambda i: llm.script(Reply(WORDS)), respond),
            "1 model call",
        )
    )

    def save_then_answer(i: int) -> None:
        path = f"/memories/bench-{i}-{uuid.uuid4().hex[:6]}.md"
        llm.script(
            Call("save_memory", {"path": path, "description": f"fact {i}", "contents": WORDS}),
            Reply("Saved."),
        )

    results.append(
        row(
            "response, saves a memory then answers",
            timed(n, save_then_answer, respond),
            "2 model calls, 1 save",
        )
    )
    results.append(
        row(
            "response, searches memory then answers",
            timed(
                n,
                lambda i: llm.script(Call("search_memory", {"query": "peanuts recipe"}), Reply("Found.")),
                respond,
            ),
            "2 model calls, 1 search",
        )
    )

    first: list[float] = []
    whole: list[float] = []
    for i in range(n):
        llm.script(Reply(WORDS))
        began = time.perf_counter()
        seen_first = False
        with http.stream(
            "POST",
            "/v1/responses",
            json={"model": "m", "input": f"s {i}", "conversation": conversation, "stream": True},
        ) as stream:
            for line in stream.iter_lines():
                if not seen_first and "response.output_text.delta" in line:
                    first.append(time.perf_counter() - began)
                    seen_first = True
        whole.append(time.perf_counter() - began)
    results.append(row("streamed response: first text delta", first, "1 model call"))
    results.append(row("streamed response: response.completed", whole, "1 model call"))

    sessions_base = "/api/2.0/agents/session-stores"
    http.post(sessions_base, params={"session_store_name": "bench-sessions"}, json={}).raise_for_status()
    http.post(
        "/api/2.0/agents/memory-stores", params={"managed_memory_store_id": "bench-memory"}, json={}
    ).raise_for_status()
    extract: list[float] = []
    again: list[float] = []
    for i in range(n):
        sid = f"s-{i}"
        http.post(
            f"{sessions_base}/bench-sessions/sessions",
            params={"session_id": sid},
            json={"actor_id": f"actor-{i}"},
        ).raise_for_status()
        items = [
            {"data": {"role": "user" if k % 2 == 0 else "assistant", "content": f"{WORDS} ({k})"}}
            for k in range(20)
        ]
        http.post(
            f"{sessions_base}/bench-sessions/sessions/{sid}/items:append", json={"items": items}
        ).raise_for_status()
        llm.script(
            Call("list_memories", {}),
            [
                Call(
                    "save_memory",
                    {"path": "/memories/food.md", "description": "No peanuts", "contents": WORDS},
                ),
                Call(
                    "save_memory",
                    {"path": "/memories/thanks.md", "description": "Polite", "contents": "Says thanks."},
                ),
            ],
            Reply("Saved two."),
        )
        url = f"{sessions_base}/bench-sessions/sessions/{sid}/extractions"
        began = time.perf_counter()
        http.post(url, json={"memory_store": "memory-stores/bench-memory"}).raise_for_status()
        extract.append(time.perf_counter() - began)
        began = time.perf_counter()
        http.post(url, json={"memory_store": "memory-stores/bench-memory"}).raise_for_status()
        again.append(time.perf_counter() - began)
    results.append(row("extraction of a 20-message session", extract, "3 model calls, 1 list, 2 saves"))
    results.append(row("extraction of the unchanged session", again, "no model call"))

    print("| step | upstream work | p50 ms | p95 ms | n |")
    print("|---|---|---|---|---|")
    for line in results:
        print(line)


if __name__ == "__main__":
    main()
