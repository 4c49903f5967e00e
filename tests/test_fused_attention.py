"""The bundled model's attentions and GELUs fused (catalog.search.fused_attention), checked by
ONNX Runtime itself: the fused graph loads and computes what the unfused one does, padding and
all, within the int8 quantization's error; a graph the rules do not describe stays as it is."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest

from catalog.search import fused_attention, int8_matmul
from catalog.search.embedder import FUSED_ATTENTION, ModelFiles, OnnxEncoder
from catalog.search.onnx_graph import (
    FLOAT,
    GRAPH_INITIALIZER,
    GRAPH_NODE,
    assemble,
    graph_of,
    len_field,
    node_bytes,
    read_node,
    read_tensor,
    tensor_bytes,
)

TEXTS = [
    "What does the user prefer to drink in the afternoon?",
    "x",
    "I went hiking in the mountains last weekend with my sister, and we saw deer near the lake. " * 6,
]


@pytest.fixture(scope="module")
def unfused() -> bytes:
    rewritten = int8_matmul.rewrite(ModelFiles.default().model.read_bytes())
    assert rewritten is not None
    return rewritten.model


@pytest.fixture(scope="module")
def tokenizer():  # type: ignore[no-untyped-def]
    return OnnxEncoder(ModelFiles.default()).tokenizer


def _ops(model: bytes) -> list[str]:
    _, graph = graph_of(model)
    return [
        read_node(f.value).op_type
        for f in graph
        if f.number == GRAPH_NODE and isinstance(f.value, memoryview)
    ]


def _session(model: bytes) -> onnxruntime.InferenceSession:
    return onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])


def _pooled(session: onnxruntime.InferenceSession, tokenizer, texts: list[str]) -> np.ndarray:  # type: ignore[no-untyped-def]
    """Mean-pooled unit vectors of `texts` run together in one padded batch."""
    encodings = tokenizer.encode_batch(texts)
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(texts), width), dtype=np.int64)
    mask = np.zeros((len(texts), width), dtype=np.int64)
    for row, e in enumerate(encodings):
        ids[row, : len(e.ids)] = e.ids
        mask[row, : len(e.ids)] = 1
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    hidden = session.run(None, feeds)[0]
    weights = mask[..., None].astype(np.float32)
    pooled = (hidden * weights).sum(axis=1) / weights.sum(axis=1)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)


def test_the_bundled_models_six_attentions_and_gelus_are_fused(unfused):
    fused = fused_attention.fuse(unfused)
    assert fused is not None and (fused.attentions, fused.gelus) == (6, 6)
    before, after = _ops(unfused), _ops(fused.model)
    assert after.count("QAttention") == 6 and after.count("BiasGelu") == 6
    assert after.count("DynamicQuantizeMatMul") == 18  # each layer's Q, K and V made one product
    assert "Softmax" not in after and "Erf" not in after and "IsNaN" not in after
    assert before.count("Softmax") == 6 and len(after) < len(before) // 2


def test_the_fused_graph_computes_what_the_unfused_one_does_padding_included(unfused, tokenizer):
    fused = fused_attention.fuse(unfused)
    assert fused is not None
    was, now = _session(unfused), _session(fused.model)
    # each text alone (how the server runs them), then all three in one padded batch on both
    # graphs: the fused attention must keep the padding out of each token's attention as the
    # unfused graph's mask does
    for text in TEXTS:
        cosine = float(_pooled(was, tokenizer, [text])[0] @ _pooled(now, tokenizer, [text])[0])
        assert cosine > 0.99
    together = (_pooled(was, tokenizer, TEXTS) * _pooled(now, tokenizer, TEXTS)).sum(axis=1)
    assert together.min() > 0.99


def test_the_encoder_runs_the_fused_graph_and_a_text_gets_one_vector(tokenizer):
    encoder = OnnxEncoder(ModelFiles.default())
    assert encoder.model_id.endswith(FUSED_ATTENTION)
    vectors = encoder.encode(TEXTS)
    for text, vector in zip(TEXTS, vectors, strict=True):
        assert np.array_equal(encoder.encode([text])[0], vector)
    # a paraphrase is nearer than an unrelated text
    near = encoder.encode(["Which drink does the user like in the afternoon?"])[0]
    assert float(near @ vectors[0]) > float(near @ vectors[2]) + 0.2


def _with_initializer(model: bytes, name: str, values: np.ndarray) -> bytes:
    """`model` with the FLOAT initializer `name` holding `values` instead."""
    top, graph = graph_of(model)
    out = []
    for f in graph:
        held = f.number == GRAPH_INITIALIZER and isinstance(f.value, memoryview)
        if held and read_tensor(f.value).name == name:
            tensor = read_tensor(f.value)
            data = values.astype("<f4").tobytes()
            out.append(len_field(GRAPH_INITIALIZER, tensor_bytes(name, FLOAT, tensor.dims, data)))
        else:
            out.append(f.raw)
    return assemble(top, b"".join(out))


def _scale_of_queries(model: bytes) -> str:
    """The name of the constant the queries and keys are scaled by (one for every layer)."""
    _, graph = graph_of(model)
    nodes = [read_node(f.value) for f in graph if f.number == GRAPH_NODE and isinstance(f.value, memoryview)]
    made = {output: node for node in nodes for output in node.outputs}
    softmax = next(node for node in nodes if node.op_type == "Softmax")
    product = made[made[softmax.inputs[0]].inputs[0]]
    return made[product.inputs[0]].inputs[1]


def test_an_attention_scaled_otherwise_than_its_head_size_says_stays_unfused(unfused, tokenizer):
    altered = _with_initializer(unfused, _scale_of_queries(unfused), np.array(0.5))
    fused = fused_attention.fuse(altered)
    # QAttention scales by 1/sqrt(head size): a graph that scales otherwise keeps its attention
    assert fused is not None and (fused.attentions, fused.gelus) == (0, 6)
    assert _ops(fused.model).count("Softmax") == 6
    was, now = (
        _pooled(_session(altered), tokenizer, TEXTS[:1]),
        _pooled(_session(fused.model), tokenizer, TEXTS[:1]),
    )
    assert float(was[0] @ now[0]) > 0.99


def test_a_graph_with_nothing_to_fuse_is_left_alone(unfused):
    top, graph = graph_of(unfused)
    # the graph's nodes replaced by one Softmax of nothing the rules describe
    softmax = node_bytes("s", "Softmax", "", ["attention_mask"], ["last_hidden_state"], axis=-1)
    out, written = [], False
    for f in graph:
        if f.number == GRAPH_NODE:
            if not written:
                out.append(len_field(GRAPH_NODE, softmax))
                written = True
        else:
            out.append(f.raw)
    assert fused_attention.fuse(assemble(top, b"".join(out))) is None


def test_a_negative_attribute_is_written_and_read_as_such():
    node = read_node(node_bytes("n", "Softmax", "", ["x"], ["y"], axis=-1, keepdims=1))
    assert node.ints == {"axis": -1, "keepdims": 1} and node.op_type == "Softmax"


def test_a_models_fields_and_weights_are_read_as_views_of_its_bytes_never_copies(unfused):
    """A 23 MB model read whole holds its weights once: each field, each tensor's data, is a view
    of the bytes it was read from (the load's peak memory: docs/benchmarks.md)."""
    top, graph = graph_of(unfused)
    assert all(isinstance(f.raw, memoryview) and f.raw.obj is unfused for f in [*top, *graph])
    initializers = [f for f in graph if f.number == GRAPH_INITIALIZER]
    tensor = read_tensor(initializers[0].value)
    assert tensor.values is not None and not tensor.values.flags.owndata
    assert np.shares_memory(tensor.values, np.frombuffer(unfused, dtype=np.uint8))
