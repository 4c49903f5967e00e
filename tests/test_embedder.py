"""The embedding model: the real ONNX model, its checks, and batching across requests."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace

import numpy as np
import pytest
from fake_embedder import HashEncoder
from stores import make_store

from catalog.runtime import load_encoder
from catalog.search.embedder import (
    DIMENSIONS,
    FUSED_ATTENTION,
    INLINE_CHARS,
    INT8_PRODUCTS,
    RUN_PADDING,
    RUN_TEXTS,
    TOKENIZER_FILE,
    Embedder,
    ModelError,
    ModelFiles,
    OnnxEncoder,
    length_runs,
)
from catalog.settings import Settings


@pytest.fixture(scope="module")
def model() -> OnnxEncoder:
    return OnnxEncoder(ModelFiles.default())


def test_real_model_gives_normalised_384_dimension_vectors(model):
    vectors = model.encode(
        ["The user prefers email.", "Likes email rather than calls", "Quantum chromodynamics"]
    )
    assert vectors.shape == (3, DIMENSIONS)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    similar, unrelated = float(vectors[0] @ vectors[1]), float(vectors[0] @ vectors[2])
    assert similar > unrelated + 0.2


def test_padding_to_the_batch_does_not_change_a_vector(model):
    alone = model.encode(["short text"])[0]
    batched = model.encode(["short text", "a much longer text " * 20])[0]
    assert np.allclose(alone, batched, atol=1e-4)


def test_the_bundled_model_runs_its_products_in_int8_and_each_text_alone(model):
    # the int8 products quantize a run's activations together: each text is run alone, so its
    # vector does not depend on the texts embedded beside it
    assert model.model_id.endswith(INT8_PRODUCTS + FUSED_ATTENTION) and model.run_texts == 1
    texts = ["short text", "a much longer text " * 20, "another one of about this length", "x"]
    together = model.encode(texts)
    for text, vector in zip(texts, together, strict=True):
        assert np.array_equal(model.encode([text])[0], vector)


def test_an_altered_model_file_is_refused(tmp_path):
    files = ModelFiles.default()
    with pytest.raises(ModelError, match="sha256"):
        OnnxEncoder(replace(files, model_sha256="0" * 64))
    with pytest.raises(ModelError, match="does not exist"):
        OnnxEncoder(replace(files, tokenizer=tmp_path / "missing.json"))


def test_another_model_can_be_configured_by_path(tmp_path):
    settings = Settings(
        data_dir=tmp_path, embedding_model=ModelFiles.default().model, embedding_tokenizer=TOKENIZER_FILE
    )
    configured = load_encoder(settings)
    assert configured.dimensions == DIMENSIONS
    # a configured model runs as exported (only the bundled one's products are made int8)
    assert isinstance(configured, OnnxEncoder) and configured.run_texts == RUN_TEXTS
    assert not configured.model_id.endswith(INT8_PRODUCTS)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(Exception):  # noqa: B017 (onnxruntime's own error type)
        load_encoder(replace(settings, embedding_model=bad))


def test_concurrent_requests_share_batches():
    embedder = Embedder(HashEncoder(), max_wait=0.01)

    async def scenario() -> None:
        embedder.start()
        try:
            vectors = await asyncio.gather(*(embedder.embed([f"text {i}"]) for i in range(20)))
            assert all(v.shape == (1, DIMENSIONS) for v in vectors)
            assert embedder.texts == 20 and embedder.batches < 5
            # the same text always gives the same vector
            again = await embedder.embed(["text 3"])
            assert np.array_equal(again, vectors[3])
        finally:
            await embedder.close()

    asyncio.run(scenario())


class Slow(HashEncoder):
    """Records each batch it is given (`seen`), says when one runs (`running`), and holds every
    batch until `release` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[list[str]] = []
        self.running = threading.Event()
        self.release = threading.Event()

    def encode(self, texts):  # type: ignore[no-untyped-def]
        self.seen.append(list(texts))
        self.running.set()
        self.release.wait(5)
        return super().encode(texts)


def test_requests_arriving_while_the_model_runs_share_the_next_batch():
    """No fixed wait gathers a batch: the first query runs at once, and those that arrive while
    the model is busy run together after it."""
    slow = Slow()
    seen, running, release = slow.seen, slow.running, slow.release
    embedder = Embedder(slow, lanes=1)

    async def scenario() -> None:
        embedder.start()
        try:
            first = asyncio.create_task(embedder.embed(["first"]))
            await asyncio.to_thread(running.wait, 5)  # the model is busy with the first alone
            others = [asyncio.create_task(embedder.embed([f"text {i}"])) for i in range(10)]
            await asyncio.sleep(0.01)
            release.set()
            await asyncio.gather(first, *others)
        finally:
            await embedder.close()

    asyncio.run(scenario())
    assert seen[0] == ["first"]
    assert seen[1:] == [[f"text {i}" for i in range(10)]]


def test_queries_go_before_background_work():
    order: list[str] = []

    class Recording(HashEncoder):
        def encode(self, texts):  # type: ignore[no-untyped-def]
            order.extend(texts)
            return super().encode(texts)

    embedder = Embedder(Recording(), background_batch=4, lanes=1)

    async def scenario() -> None:
        embedder.start()
        try:
            background = asyncio.create_task(embedder.embed([f"bg {i}" for i in range(16)], background=True))
            await asyncio.sleep(0)
            await embedder.embed(["query"])
            await background
        finally:
            await embedder.close()

    asyncio.run(scenario())
    assert order.index("query") <= 4  # at most one background batch ran before it


def test_promoted_background_texts_run_next_and_answer_their_own_futures():
    """A search that needs some of the texts a pass queued moves them ahead of the rest: they run
    in the next batch, once each, and the pass's own futures get their vectors."""
    slow = Slow()
    seen, running, release = slow.seen, slow.running, slow.release
    embedder = Embedder(slow, background_batch=4, lanes=1)
    texts = [f"bg {i:02}" for i in range(16)]

    async def scenario() -> list[np.ndarray]:
        embedder.start()
        try:
            futures = embedder.submit(texts, background=True)
            await asyncio.to_thread(running.wait, 5)  # the first batch of four runs
            assert embedder.promote([futures[13], futures[9], futures[0]]) == 2  # the first is running
            assert embedder.queued == (2, 10)
            release.set()
            return list(await asyncio.gather(*futures))
        finally:
            await embedder.close()

    vectors = asyncio.run(scenario())
    assert seen[0] == texts[:4]
    assert seen[1] == ["bg 09", "bg 13"]
    assert sorted(t for batch in seen for t in batch) == texts  # each once
    np.testing.assert_allclose(np.stack(vectors), HashEncoder().encode(texts), atol=1e-6)


def test_a_batch_of_mixed_lengths_gives_each_text_its_own_vector_in_order(model):
    """The model runs a batch as runs of texts of about one length: each vector must still be
    its own text's, at its place in the batch."""
    texts = [
        "a much longer text about hiking in the mountains with friends " * 6,
        "short",
        "the user prefers email",
        "",
        "a medium length note about the garden and its tomatoes",
        "short",
        "quantum chromodynamics " * 30,
    ]
    batched = model.encode(texts)
    assert batched.shape == (len(texts), DIMENSIONS)
    for i, text in enumerate(texts):
        assert np.allclose(batched[i], model.encode([text])[0], atol=1e-4), i
    assert np.allclose(batched[1], batched[5], atol=1e-4)


def test_length_runs_cover_every_text_once_shortest_first_with_little_padding():
    lengths = [40, 3, 41, 12, 3, 200, 13, 39, 12] * 9
    runs = length_runs(lengths)
    flat = [i for run in runs for i in run]
    assert sorted(flat) == list(range(len(lengths)))  # every text once
    assert [lengths[i] for i in flat] == sorted(lengths)  # shortest first
    for run in runs:
        assert len(run) <= RUN_TEXTS
        width, tokens = max(lengths[i] for i in run), sum(lengths[i] for i in run)
        assert width * len(run) - tokens <= RUN_PADDING * tokens + len(run)
    assert len(runs) < len(lengths) / 4  # texts of one length share a model call


def test_background_texts_are_run_shortest_first_and_answered_in_order():
    seen: list[list[str]] = []

    class Recording(HashEncoder):
        def encode(self, texts):  # type: ignore[no-untyped-def]
            seen.append(list(texts))
            return super().encode(texts)

    embedder = Embedder(Recording(), background_batch=4, lanes=1)
    texts = [("word " * n).strip() for n in (9, 1, 7, 3, 8, 2, 6, 4, 5)]

    async def scenario() -> np.ndarray:
        embedder.start()
        try:
            return await embedder.embed(texts, background=True)
        finally:
            await embedder.close()

    vectors = asyncio.run(scenario())
    assert np.array_equal(vectors, HashEncoder().encode(texts))  # each text's own vector, in order
    ran = [t for batch in seen for t in batch]
    assert ran == sorted(texts, key=len)
    assert all(len(batch) <= 4 for batch in seen)


def test_two_lanes_run_two_batches_at_once():
    """Each lane runs its own batch on its own thread: two batches are inside the model together
    (a barrier of two that one lane alone could never pass)."""
    barrier = threading.Barrier(2, timeout=30)

    class Together(HashEncoder):
        def encode(self, texts):  # type: ignore[no-untyped-def]
            barrier.wait()
            return super().encode(texts)

    embedder = Embedder(Together(), background_batch=1, lanes=2)

    async def scenario() -> np.ndarray:
        embedder.start()
        try:
            return await embedder.embed(["one", "two"], background=True)
        finally:
            await embedder.close()

    vectors = asyncio.run(scenario())
    assert vectors.shape == (2, DIMENSIONS) and embedder.batches == 2
    assert np.array_equal(vectors, HashEncoder().encode(["one", "two"]))


def test_where_the_fused_graph_does_not_load_the_unfused_int8_graph_runs(monkeypatch, caplog):
    # an ONNX Runtime without QAttention or BiasGelu: the products still run in int8
    from catalog.search import fused_attention

    monkeypatch.setattr(fused_attention, "fuse", lambda model: fused_attention.Fused(b"not a model", 6, 6))
    encoder = OnnxEncoder(ModelFiles.default())
    assert encoder.run_texts == 1 and encoder.model_id.endswith(INT8_PRODUCTS)
    assert FUSED_ATTENTION not in encoder.model_id
    assert "attentions run unfused" in caplog.text and "float32" not in caplog.text
    vectors = encoder.encode(["The user prefers email.", "Likes email rather than calls"])
    assert float(vectors[0] @ vectors[1]) > 0.5


def test_where_the_int8_graph_does_not_load_the_model_runs_as_exported(monkeypatch, caplog):
    # an ONNX Runtime built without its contrib operators refuses DynamicQuantizeMatMul
    from catalog.search import int8_matmul

    monkeypatch.setattr(int8_matmul, "rewrite", lambda model: int8_matmul.Rewritten(b"not a model", 36))
    encoder = OnnxEncoder(ModelFiles.default())
    assert encoder.run_texts == RUN_TEXTS and INT8_PRODUCTS not in encoder.model_id
    assert "weight products run in float32" in caplog.text
    vectors = encoder.encode(["The user prefers email.", "Likes email rather than calls"])
    assert float(vectors[0] @ vectors[1]) > 0.5


def test_a_short_query_of_the_only_request_runs_on_the_event_loop_else_on_a_lane():
    """Without the hand-off to a lane while nothing else is in progress; on a lane when other
    requests are (`busy`), when the text is long, when it is no query (a row's text: a model held
    by it must not hold the loop), and while background texts are queued or run (a query beside
    them goes first on a lane, as before)."""
    ran: list[tuple[str, int]] = []

    class Where(HashEncoder):
        def encode(self, texts):  # type: ignore[no-untyped-def]
            ran.extend((text, threading.get_ident()) for text in texts)
            return super().encode(texts)

    embedder = Embedder(Where(), lanes=1, background_batch=4)
    busy = [False]
    embedder.busy = lambda: busy[0]
    long = "x" * (INLINE_CHARS + 1)

    async def scenario() -> int:
        embedder.start()
        try:
            alone = await embedder.embed(["alone"], query=True)
            busy[0] = True
            await embedder.embed(["beside others"], query=True)
            busy[0] = False
            await embedder.embed([long], query=True)
            await embedder.embed(["a row's text"])
            background = asyncio.create_task(embedder.embed([f"bg {i}" for i in range(12)], background=True))
            await asyncio.sleep(0)  # queued
            await embedder.embed(["beside background"], query=True)
            await background
            # the same text gives the same vector wherever it runs
            busy[0] = True
            assert np.array_equal(await embedder.embed(["alone"], query=True), alone)
        finally:
            await embedder.close()
        return threading.get_ident()

    loop_thread = asyncio.run(scenario())
    on_loop = [text for text, thread in ran if thread == loop_thread]
    assert on_loop == ["alone"] and embedder.inline == 1
    assert {"beside others", long, "a row's text", "beside background", "bg 0"} <= {text for text, _ in ran}


def test_the_app_embeds_the_query_of_its_only_request_on_the_event_loop(client, token):
    store = make_store(client, token, "inline_query")
    embedder = client.app.state.runtime.context.search.embedder
    assert embedder.busy() is False  # no request in progress
    before = embedder.inline
    query = {"scope": "u", "query": "tea at night", "mode": "hybrid"}
    r = client.post(f"{store}/entries:search", headers=token(), json=query)
    assert r.status_code == 200, r.text
    assert embedder.inline == before + 1
