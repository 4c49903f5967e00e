"""The bundled model's weight products rewritten to int8 (catalog.search.int8_matmul), checked by
ONNX Runtime itself: the rewritten graphs load and compute what the float ones do, within the
quantization's error."""

from __future__ import annotations

import struct

import numpy as np
import onnxruntime
import pytest

from catalog.search.embedder import ModelFiles, OnnxEncoder
from catalog.search.int8_matmul import GraphError, rewrite
from catalog.search.onnx_graph import graph_of, read_node

# --- a small ONNX model written by hand (protobuf's wire format; field numbers of onnx.proto) ---


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _bytes(number: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _int(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _value_info(name: str, shape: list[int]) -> bytes:
    dims = b"".join(_bytes(1, _int(1, d)) for d in shape)  # TensorShapeProto.dim: dim_value
    tensor_type = _int(1, 1) + _bytes(2, dims)  # elem_type FLOAT, shape
    return _bytes(1, name) + _bytes(2, _bytes(1, tensor_type))  # ValueInfoProto: name, type


def _tensor(name: str, data_type: int, dims: list[int], raw: bytes) -> bytes:
    return b"".join(_int(1, d) for d in dims) + _int(2, data_type) + _bytes(8, name) + _bytes(9, raw)


def _node(op: str, inputs: list[str], outputs: list[str], **ints: int) -> bytes:
    attributes = b"".join(_bytes(5, _bytes(1, k) + _int(3, v) + _int(20, 2)) for k, v in ints.items())
    names = b"".join(_bytes(1, i) for i in inputs) + b"".join(_bytes(2, o) for o in outputs)
    return names + _bytes(4, op) + attributes


def _model(nodes: list[bytes], initializers: list[bytes], outputs: list[tuple[str, list[int]]]) -> bytes:
    graph = b"".join(_bytes(1, n) for n in nodes) + _bytes(2, "g")
    graph += b"".join(_bytes(5, t) for t in initializers)
    graph += _bytes(11, _value_info("x", [2, 4]))
    graph += b"".join(_bytes(12, _value_info(name, shape)) for name, shape in outputs)
    opset = _bytes(1, "") + _int(2, 17)
    return _int(1, 8) + _bytes(8, opset) + _bytes(7, graph)  # ir_version, opset_import, graph


WEIGHTS = np.array([[3, -7, 12], [-128, 5, 0], [64, 1, -9], [7, 127, 33]], dtype=np.int8)  # [K 4, N 3]
SCALES = np.array([0.01, 0.02, 0.005], dtype=np.float32)
X = np.array([[0.5, -1.0, 2.0, 0.25], [1.5, 0.0, -0.75, 3.0]], dtype=np.float32)


def _product_model(
    *,
    weights_type: int = 3,
    scale_shape: list[int] | None = None,
    cast_read_too: bool = False,
    scaled_out: bool = False,
    scale_tensor: bytes | None = None,
) -> bytes:
    raw = WEIGHTS.tobytes() if weights_type == 3 else WEIGHTS.astype(np.float32).tobytes()
    nodes = [
        _node("Cast", ["w"], ["w_float"], to=1),
        _node("Mul", ["w_float", "s"], ["w_scaled"]),
        _node("MatMul", ["x", "w_scaled"], ["y"]),
    ]
    outputs = [("y", [2, 3])]
    if cast_read_too:
        nodes.append(_node("Identity", ["w_float"], ["w_out"]))
        outputs.append(("w_out", [4, 3]))
    if scaled_out:  # the scaled weights are an output of the graph as well
        outputs.append(("w_scaled", [4, 3]))
    initializers = [
        _tensor("w", weights_type, [4, 3], raw),
        scale_tensor or _tensor("s", 1, scale_shape or [1, 3], SCALES.tobytes()),
    ]
    return _model(nodes, initializers, outputs)


def _run(model: bytes) -> list[np.ndarray]:
    session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    return session.run(None, {"x": X})


def _read(data: bytes) -> list[tuple[int, bytes | int]]:
    """A message's fields (varints and length-delimited ones: all a hand-written model holds)."""

    def varint(at: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            byte = data[at]
            value, at, shift = value | (byte & 0x7F) << shift, at + 1, shift + 7
            if byte < 0x80:
                return value, at

    fields: list[tuple[int, bytes | int]] = []
    at = 0
    while at < len(data):
        key, at = varint(at)
        if key & 7 == 0:
            value, at = varint(at)
            fields.append((key >> 3, value))
        else:
            size, at = varint(at)
            fields.append((key >> 3, data[at : at + size]))
            at += size
    return fields


def _ops(model: bytes) -> list[str]:
    """The op types of the model's nodes, in order."""
    (graph,) = [v for n, v in _read(model) if n == 7]
    assert isinstance(graph, bytes)
    ops = []
    for number, node in _read(graph):
        if number == 1 and isinstance(node, bytes):
            ops += [v.decode() for n, v in _read(node) if n == 4 and isinstance(v, bytes)]
    return ops


# --- the tests ---------------------------------------------------------------------------------


def test_a_product_of_int8_weights_and_column_scales_becomes_one_int8_product():
    model = _product_model()
    rewritten = rewrite(model)
    assert rewritten is not None and rewritten.products == 1
    (expected,) = _run(model)
    assert np.allclose(expected, X @ (WEIGHTS.astype(np.float32) * SCALES), atol=1e-6)
    (got,) = _run(rewritten.model)
    assert got.shape == expected.shape
    assert np.allclose(got, expected, atol=0.03 * np.abs(expected).max())  # the activations' quantization
    assert not np.array_equal(got, expected)  # it is the int8 product that ran, not the float one
    assert _ops(model) == ["Cast", "Mul", "MatMul"]
    assert _ops(rewritten.model) == ["DynamicQuantizeMatMul"]  # the Cast and the Mul went


def test_a_scale_of_one_dimension_is_taken_too():
    rewritten = rewrite(_product_model(scale_shape=[3]))
    assert rewritten is not None
    (got,) = _run(rewritten.model)
    expected = X @ (WEIGHTS.astype(np.float32) * SCALES)
    assert np.allclose(got, expected, atol=0.03 * np.abs(expected).max())


def test_a_cast_that_something_else_reads_stays():
    rewritten = rewrite(_product_model(cast_read_too=True))
    assert rewritten is not None and rewritten.products == 1
    assert _ops(rewritten.model) == ["Cast", "DynamicQuantizeMatMul", "Identity"]
    got, weights = _run(rewritten.model)
    assert np.array_equal(weights, WEIGHTS.astype(np.float32))
    expected = X @ (WEIGHTS.astype(np.float32) * SCALES)
    assert np.allclose(got, expected, atol=0.03 * np.abs(expected).max())


def test_scaled_weights_the_graph_gives_out_stay():
    rewritten = rewrite(_product_model(scaled_out=True))
    assert rewritten is not None
    assert _ops(rewritten.model) == ["Cast", "Mul", "DynamicQuantizeMatMul"]
    got, scaled = _run(rewritten.model)
    assert np.allclose(scaled, WEIGHTS.astype(np.float32) * SCALES)
    expected = X @ (WEIGHTS.astype(np.float32) * SCALES)
    assert np.allclose(got, expected, atol=0.03 * np.abs(expected).max())


def test_float_weights_are_left_as_they_are():
    assert rewrite(_product_model(weights_type=1)) is None
    assert rewrite(_product_model(scale_shape=[3, 1])) is None  # a scale per row is not one per column


NOT_MODELS = [b"", b"\x08\x08", b"\xff\xff\xff", b"\x3a\x05abc", b"\x09\x01\x02", b"\x0b"]


@pytest.mark.parametrize("data", NOT_MODELS)
def test_what_is_not_a_model_is_refused(data):
    with pytest.raises(GraphError):
        rewrite(data)


def test_the_bundled_models_36_weight_products_run_in_int8_close_to_the_float_graph():
    files = ModelFiles.default()
    rewritten = rewrite(files.model.read_bytes())
    assert rewritten is not None and rewritten.products == 36  # 6 layers: q, k, v, out, 2 feed-forward
    int8 = OnnxEncoder(files)
    plain = OnnxEncoder(ModelFiles(files.model, files.tokenizer, None, None))  # loaded as exported
    texts = [
        "Prefers email over phone calls.",
        "does the user prefer email or phone",
        "Quantum chromodynamics describes the strong interaction.",
        "We moved the planning meeting to Thursday so that the migration can finish first. " * 8,
    ]
    a, b = plain.encode(texts), int8.encode(texts)
    assert np.all((a * b).sum(axis=1) > 0.98)
    assert not np.allclose(a, b, atol=1e-4)
    related, unrelated = float(b[0] @ b[1]), float(b[0] @ b[2])
    assert related > unrelated + 0.2


def test_a_scale_held_as_float_data_is_read_too():
    # a scale held in `float_data` (field 4, packed) rather than `raw_data`
    floats = _int(1, 1) + _int(1, 3) + _int(2, 1) + _bytes(8, "s") + _bytes(4, struct.pack("<3f", *SCALES))
    rewritten = rewrite(_product_model(scale_tensor=floats))
    assert rewritten is not None
    (got,) = _run(rewritten.model)
    expected = X @ (WEIGHTS.astype(np.float32) * SCALES)
    assert np.allclose(got, expected, atol=0.03 * np.abs(expected).max())


ROW_SCALES = np.array([0.5, 0.25, 0.125, 0.0625], dtype=np.float32)  # one per row of WEIGHTS
IDS = np.array([3, 0, 3, 1], dtype=np.int64)


def _lookup_model(scale: np.ndarray, scale_shape: list[int]) -> bytes:
    """`Gather(Mul(Cast(W), s), ids)`: rows of scaled int8 weights looked up (a word embedding)."""
    nodes = [
        _node("Cast", ["w"], ["w_float"], to=1),
        _node("Mul", ["w_float", "s"], ["w_scaled"]),
        _node("Gather", ["w_scaled", "ids"], ["y"], axis=0),
    ]
    initializers = [
        _tensor("w", 3, [4, 3], WEIGHTS.tobytes()),
        _tensor("s", 1, scale_shape, scale.tobytes()),
        _tensor("ids", 7, [4], IDS.tobytes()),
    ]
    return _model(nodes, initializers, [("y", [4, 3])])


@pytest.mark.parametrize(
    ("scale", "shape"), [(ROW_SCALES, [4, 1]), (SCALES, [1, 3]), (SCALES, [3])], ids=["row", "column", "1-d"]
)
def test_rows_of_scaled_int8_weights_are_looked_up_in_int8_and_scaled_exactly_alike(scale, shape):
    # the word embeddings: ONNX Runtime would fold the whole scaled table into float (four times
    # the int8 table's memory); the rows looked up first, then scaled, are the same floats
    model = _lookup_model(scale, shape)
    rewritten = rewrite(model)
    assert rewritten is not None and (rewritten.products, rewritten.lookups) == (0, 1)
    (expected,) = _run(model)
    (got,) = _run(rewritten.model)
    assert np.array_equal(got, expected)
    assert np.array_equal(expected, (WEIGHTS.astype(np.float32) * scale.reshape(shape))[IDS])
    scales = ["Gather"] if shape == [4, 1] else []  # a scale per row is looked up with its row
    assert _ops(rewritten.model) == ["Gather", "Cast", *scales, "Mul"]


def test_the_bundled_models_embedding_tables_stay_int8():
    rewritten = rewrite(ModelFiles.default().model.read_bytes())
    assert rewritten is not None and (rewritten.products, rewritten.lookups) == (36, 2)  # words, positions
    # each table is read by a Gather of its rows only, never cast whole
    _, graph = graph_of(rewritten.model)
    nodes = [read_node(f.value) for f in graph if f.number == 1 and isinstance(f.value, memoryview)]
    for table in ("word_embeddings", "position_embeddings"):
        readers = [n.op_type for n in nodes if f"inner.embeddings.{table}.weight_q" in n.inputs]
        assert readers == ["Gather"]
