"""The bundled model with its weight products in float32 (the graph as exported), in int8
(`catalog.search.int8_matmul`) with the exported attention, and in int8 with its attentions and
GELUs fused (`catalog.search.fused_attention`, what the server runs): CPU per text on one thread,
and how close the vectors are.

Texts: the twenty questions of bench/request_floor.py (short queries), chat turns of about
thirty words, and long replies of about 180 words (cut by the model at 256 tokens), made from a
fixed vocabulary (no corpus needed). Each set is embedded one text at a time (how the server runs
a search's query) and, for the float graph, also in the runs the server made of a batch of
background texts (texts of one length together, at most 32); the int8 graphs run each text alone
(see catalog/search/embedder.py). The unfused int8 graph runs as the server ran it before the
fusion: with ONNX Runtime's SkipLayerNormalization fusion, which the server now turns off.

Run: .venv/bin/python bench/model_int8.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnxruntime

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.request_floor import queries
from catalog.search import int8_matmul
from catalog.search.embedder import FUSED_ATTENTION, RUN_TEXTS, ModelFiles, OnnxEncoder

SENTENCE = (
    "the user said that we should move the weekly planning meeting to thursday because the design "
    "review needs more time and the new database migration must finish before the release while "
    "she prefers tea in the afternoon and asked about hiking trails near the lake last summer with "
    "her sister who works on the mobile app and wants the api endpoints documented with examples"
)
WORDS = SENTENCE.split(" ")


def texts(count: int, words: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(words)) for _ in range(count)]


def cpu_ms_per_text(encoder: OnnxEncoder, batch: list[str], alone: bool, rounds: int) -> float:
    def once() -> None:
        if alone:
            for text in batch:
                encoder.encode([text])
        else:
            encoder.encode(batch)

    once()  # warm-up
    samples = []
    for _ in range(rounds):
        started = time.process_time()
        once()
        samples.append((time.process_time() - started) * 1000 / len(batch))
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    files = ModelFiles.default()
    fused = OnnxEncoder(files)
    # the same file, without its checksum: loaded as exported (no rewrite)
    plain = OnnxEncoder(replace(files, model_sha256=None))
    assert fused.model_id.endswith(FUSED_ATTENTION) and plain.run_texts == RUN_TEXTS
    # int8 products, the exported attention, ONNX Runtime's own fusions all on (before the fusion)
    int8 = OnnxEncoder(files)
    rewritten = int8_matmul.rewrite(files.model.read_bytes())
    assert rewritten is not None
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.enable_mem_pattern = False
    int8.session = onnxruntime.InferenceSession(rewritten.model, options, providers=["CPUExecutionProvider"])
    sets = [
        ("queries (request_floor's twenty)", queries()),
        ("chat turns, 30 words", texts(64, 30, 1)),
        ("long replies, 180 words", texts(16, 180, 2)),
    ]
    print("CPU per text, one thread (median of rounds), and the int8 vectors against the float ones\n")
    print(
        "| texts | tokens (mean) | float32, one at a time | float32, in runs | int8, one at a time | "
        "int8 fused, one at a time | fused / int8 | fused / float32 in runs | "
        "cosine to float32: int8 / fused (min) | cosine fused to int8: min / mean |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, batch in sets:
        tokens = statistics.mean(len(fused.tokenizer.encode(t).ids) for t in batch)
        alone = cpu_ms_per_text(plain, batch, True, args.rounds)
        runs = cpu_ms_per_text(plain, batch, False, args.rounds)
        quick = cpu_ms_per_text(int8, batch, True, args.rounds)
        quicker = cpu_ms_per_text(fused, batch, True, args.rounds)
        a, b, c = plain.encode(batch), int8.encode(batch), fused.encode(batch)
        to_float = float(np.min((a * b).sum(axis=1))), float(np.min((a * c).sum(axis=1)))  # unit vectors
        to_int8 = (b * c).sum(axis=1)
        print(
            f"| {label} | {tokens:.0f} | {alone:.2f} ms | {runs:.2f} ms | {quick:.2f} ms | "
            f"{quicker:.2f} ms | "
            f"{quicker / quick:.2f} | {quicker / runs:.2f} | {to_float[0]:.4f} / {to_float[1]:.4f} | "
            f"{float(np.min(to_int8)):.4f} / {float(np.mean(to_int8)):.4f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
