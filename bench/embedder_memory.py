"""The embedding model's memory under batches of varying shapes: the server process's RSS after
every 100 batches (batch sizes 1-64, texts of 3-120 words, as the embedding worker builds them),
with the session as shipped (ONNX Runtime's memory patterns off) and with memory patterns on
(ONNX Runtime's default, which plans and keeps memory per input shape), each in a fresh process.

Run: .venv/bin/python bench/embedder_memory.py [--batches N]
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def measure(patterns: bool, batches: int) -> None:
    import onnxruntime

    from catalog.search import embedder

    original = onnxruntime.InferenceSession

    def session(path: str, options: onnxruntime.SessionOptions, **kwargs: object) -> object:
        if patterns:
            options.enable_mem_pattern = True
        return original(path, options, **kwargs)

    onnxruntime.InferenceSession = session  # type: ignore[misc]
    encoder = embedder.OnnxEncoder(embedder.ModelFiles.default())
    rng = random.Random(1)
    words = [
        "the",
        "of",
        "and",
        "memory",
        "user",
        "prefers",
        "tea",
        "coffee",
        "project",
        "atlas",
        "meeting",
        "deadline",
        "report",
    ]
    marks = []
    began = time.perf_counter()
    texts_done = 0
    for i in range(batches):
        size = rng.choice([1, 1, 2, 4, 8, 16, 16, 64])
        texts = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 120))) for _ in range(size)]
        encoder.encode(texts)
        texts_done += size
        if i % 100 == 99:
            marks.append(int(Path("/proc/self/statm").read_text().split()[1]) * 4096 // 2**20)
    rate = texts_done / (time.perf_counter() - began)
    print(f"| {'on' if patterns else 'off (shipped)'} | {' → '.join(map(str, marks))} | {rate:.0f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=600)
    parser.add_argument("--patterns", choices=("on", "off"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.patterns:
        measure(args.patterns == "on", args.batches)
        return 0
    print(f"embedder memory: {args.batches} batches, RSS (MB) after every 100\n")
    print("| memory patterns | RSS (MB) | texts/s |\n|---|---|---|", flush=True)
    for patterns in ("off", "on"):
        subprocess.run(
            [sys.executable, __file__, "--batches", str(args.batches), "--patterns", patterns], check=True
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
