"""The bundled model's weight products in int8: its graph rewritten, in memory, before ONNX
Runtime loads it.

The bundled all-MiniLM-L6-v2 keeps each weight matrix as int8 with one float scale per output
column, turned back into float by a `Cast` and a `Mul` in front of each `MatMul`. ONNX Runtime folds
those into float constants when it loads the graph, so every product ran in float32: on a
short query the model spent most of its time in 36 float matrix products. Here each such
`Cast -> Mul -> MatMul` becomes one `DynamicQuantizeMatMul` (an ONNX Runtime operator of the
`com.microsoft` domain) on the same int8 weights and scales: the activations are quantized to
uint8 as the product runs and the product is integer arithmetic (VNNI/AMX where the CPU has
them). On the 2-core machine the model's CPU per query halves (`bench/model_int8.py`); each
vector is within a cosine of 0.99 of the float one's, and both retrieval benchmarks were re-run
on it (docs/benchmarks.md).

ONNX files are protocol buffers; the rewrite reads and writes the few fields it needs (the
graph's nodes and initializers, the model's operator sets) in protobuf's wire format, and
copies every other field as it is, so that the `onnx` package (and its second of imports) is
not needed. Field numbers are `onnx.proto`'s.

Rules:
- a `MatMul` is rewritten only when its second input is `Mul(Cast(W), s)` or `Mul(s, Cast(W))`
  with `W` a two-dimensional INT8 initializer `[K, N]` and `s` a FLOAT initializer of `N` values
  (shape `[N]` or `[1, N]`); anything else stays as it is;
- the `Cast` and `Mul` go when nothing else reads them;
- a graph with nothing to rewrite is returned unchanged (None).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

# onnx.proto field numbers
_MODEL_OPSET_IMPORT, _MODEL_GRAPH = 8, 7
_GRAPH_NODE, _GRAPH_INITIALIZER, _GRAPH_OUTPUT = 1, 5, 12
_VALUE_INFO_NAME = 1
_NODE_INPUT, _NODE_OUTPUT, _NODE_NAME, _NODE_OP_TYPE, _NODE_ATTRIBUTE, _NODE_DOMAIN = 1, 2, 3, 4, 5, 7
_ATTRIBUTE_NAME, _ATTRIBUTE_I = 1, 3
_TENSOR_DIMS, _TENSOR_DATA_TYPE, _TENSOR_FLOAT_DATA, _TENSOR_NAME, _TENSOR_RAW_DATA = 1, 2, 4, 8, 9
_OPSET_DOMAIN, _OPSET_VERSION = 1, 2
_FLOAT, _INT8 = 1, 3  # TensorProto.DataType
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
DOMAIN = "com.microsoft"


class GraphError(ValueError):
    """The file is not a protocol buffer this module can read."""


# --- protobuf's wire format ----------------------------------------------------------------------


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data):
            raise GraphError("a varint runs past the end of its message")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7
        if shift > 63:
            raise GraphError("a varint longer than ten bytes")


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


@dataclass
class _Field:
    number: int
    wire: int
    value: int | bytes  # a varint's or fixed number's value; a length-delimited field's bytes
    raw: bytes  # the field as it was read (key included): written back as it is when untouched


def _fields(data: bytes) -> Iterator[_Field]:
    at = 0
    while at < len(data):
        start = at
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == _VARINT:
            value, at = _varint(data, at)
        elif wire in (_I64, _I32):
            size = 8 if wire == _I64 else 4
            if at + size > len(data):
                raise GraphError("a field runs past the end of its message")
            value, at = struct.unpack_from("<q" if wire == _I64 else "<i", data, at)[0], at + size
        elif wire == _LEN:
            size, at = _varint(data, at)
            if at + size > len(data):
                raise GraphError("a field runs past the end of its message")
            value, at = data[at : at + size], at + size
        else:
            raise GraphError(f"wire type {wire} (groups) is not used by ONNX")
        yield _Field(number, wire, value, data[start:at])


def _len_field(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | _LEN) + _encode_varint(len(payload)) + payload


def _varint_field(number: int, value: int) -> bytes:
    return _encode_varint(number << 3 | _VARINT) + _encode_varint(value)


def _text(f: _Field) -> str:
    assert isinstance(f.value, bytes)
    return f.value.decode()


# --- the messages it reads -----------------------------------------------------------------------


@dataclass
class _Node:
    raw: bytes
    op_type: str = ""
    domain: str = ""
    name: str = ""
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    ints: dict[str, int] = field(default_factory=dict)  # its integer attributes


def _node(raw: bytes) -> _Node:
    node = _Node(raw)
    for f in _fields(raw):
        if f.wire != _LEN:
            continue
        if f.number == _NODE_INPUT:
            node.inputs.append(_text(f))
        elif f.number == _NODE_OUTPUT:
            node.outputs.append(_text(f))
        elif f.number == _NODE_OP_TYPE:
            node.op_type = _text(f)
        elif f.number == _NODE_DOMAIN:
            node.domain = _text(f)
        elif f.number == _NODE_NAME:
            node.name = _text(f)
        elif f.number == _NODE_ATTRIBUTE:
            assert isinstance(f.value, bytes)
            name, value = "", None
            for g in _fields(f.value):
                if g.number == _ATTRIBUTE_NAME and isinstance(g.value, bytes):
                    name = g.value.decode()
                elif g.number == _ATTRIBUTE_I and g.wire == _VARINT and isinstance(g.value, int):
                    value = g.value
            if value is not None:
                node.ints[name] = value
    return node


def _node_bytes(name: str, op_type: str, domain: str, inputs: list[str], outputs: list[str]) -> bytes:
    return b"".join(
        [
            *(_len_field(_NODE_INPUT, i.encode()) for i in inputs),
            *(_len_field(_NODE_OUTPUT, o.encode()) for o in outputs),
            _len_field(_NODE_NAME, name.encode()),
            _len_field(_NODE_OP_TYPE, op_type.encode()),
            _len_field(_NODE_DOMAIN, domain.encode()),
        ]
    )


@dataclass
class _Tensor:
    name: str
    data_type: int
    dims: list[int]
    values: np.ndarray | None  # its data, where held in the file (raw or float data)


def _tensor(raw: bytes) -> _Tensor:
    name, data_type, dims = "", 0, []
    data: bytes | None = None
    floats: list[float] = []
    for f in _fields(raw):
        if f.number == _TENSOR_NAME and f.wire == _LEN:
            name = _text(f)
        elif f.number == _TENSOR_DATA_TYPE and f.wire == _VARINT:
            assert isinstance(f.value, int)
            data_type = f.value
        elif f.number == _TENSOR_DIMS:
            if f.wire == _VARINT:
                assert isinstance(f.value, int)
                dims.append(f.value)
            elif f.wire == _LEN:  # packed
                assert isinstance(f.value, bytes)
                at = 0
                while at < len(f.value):
                    dim, at = _varint(f.value, at)
                    dims.append(dim)
        elif f.number == _TENSOR_RAW_DATA and f.wire == _LEN:
            assert isinstance(f.value, bytes)
            data = f.value
        elif f.number == _TENSOR_FLOAT_DATA:
            if f.wire == _LEN:  # packed
                assert isinstance(f.value, bytes)
                floats.extend(struct.unpack(f"<{len(f.value) // 4}f", f.value))
            elif f.wire == _I32:
                assert isinstance(f.value, int)
                floats.append(struct.unpack("<f", struct.pack("<i", f.value))[0])
    values: np.ndarray | None = None
    if data is not None and data_type == _FLOAT:
        values = np.frombuffer(data, dtype="<f4")
    elif data is not None and data_type == _INT8:
        values = np.frombuffer(data, dtype=np.int8)
    elif floats and data_type == _FLOAT:
        values = np.asarray(floats, dtype=np.float32)
    return _Tensor(name, data_type, dims, values)


def _tensor_name(raw: bytes) -> str:
    for f in _fields(raw):
        if f.number == _TENSOR_NAME and f.wire == _LEN:
            return _text(f)
    return ""


def _tensor_bytes(name: str, data_type: int, dims: list[int], data: bytes) -> bytes:
    packed = b"".join(_encode_varint(d) for d in dims)
    return b"".join(
        [
            _len_field(_TENSOR_DIMS, packed),
            _varint_field(_TENSOR_DATA_TYPE, data_type),
            _len_field(_TENSOR_NAME, name.encode()),
            _len_field(_TENSOR_RAW_DATA, data),
        ]
    )


# --- the rewrite ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rewritten:
    model: bytes  # the rewritten ONNX model
    products: int  # how many MatMuls became DynamicQuantizeMatMul


def rewrite(model: bytes) -> Rewritten | None:
    """The model with every weight product of int8 weights and per-column float scales made one
    `DynamicQuantizeMatMul` (see the module's rules); None when it has none."""
    top = list(_fields(model))
    graph_fields = [f for f in top if f.number == _MODEL_GRAPH and f.wire == _LEN]
    if len(graph_fields) != 1:
        raise GraphError("the model holds no graph (or several)")
    graph_raw = graph_fields[0].value
    assert isinstance(graph_raw, bytes)
    graph = list(_fields(graph_raw))
    nodes = [_node(f.value) for f in graph if f.number == _GRAPH_NODE and isinstance(f.value, bytes)]
    tensors = {}
    for f in graph:
        if f.number == _GRAPH_INITIALIZER and isinstance(f.value, bytes):
            tensor = _tensor(f.value)
            tensors[tensor.name] = tensor
    producer = {output: node for node in nodes for output in node.outputs}
    readers: dict[str, int] = {}
    for node in nodes:
        for name in node.inputs:
            readers[name] = readers.get(name, 0) + 1
    graph_outputs = _graph_output_names(graph)

    replaced: dict[int, bytes] = {}  # id(node) -> its new bytes
    new_inputs: dict[int, tuple[str, ...]] = {}  # id(node) -> the initializers its new node reads
    dropped: set[int] = set()
    added: list[bytes] = []
    for node in nodes:
        found = _weight_product(node, producer, tensors)
        if found is None:
            continue
        cast, mul, weight, scale = found
        n = weight.dims[1]
        base = node.name or node.outputs[0]
        scale_name, zero_name = f"{base}/int8_scale", f"{base}/int8_zero_point"
        assert scale.values is not None
        added.append(_tensor_bytes(scale_name, _FLOAT, [n], scale.values.astype("<f4").tobytes()))
        added.append(_tensor_bytes(zero_name, _INT8, [n], bytes(n)))
        new_inputs[id(node)] = (weight.name, scale_name, zero_name)
        replaced[id(node)] = _node_bytes(
            f"{base}/int8",
            "DynamicQuantizeMatMul",
            DOMAIN,
            [node.inputs[0], weight.name, scale_name, zero_name],
            node.outputs,
        )
        readers[node.inputs[1]] -= 1  # the product no longer reads the scaled weights
        for part in (mul, cast):  # each goes when nothing reads it any more
            output = part.outputs[0]
            if readers.get(output, 0) == 0 and output not in graph_outputs:
                dropped.add(id(part))
                for name in part.inputs:
                    readers[name] -= 1
    if not replaced:
        return None

    # the initializers only the dropped nodes read (the scales' first shape) go with them
    read: set[str] = set()
    for node in nodes:
        if id(node) in replaced:
            read.update((node.inputs[0], *new_inputs[id(node)]))
        elif id(node) not in dropped:
            read.update(node.inputs)
    unread = {name for node in nodes if id(node) in dropped for name in node.inputs} - read
    node_iter = iter(nodes)
    out_graph: list[bytes] = []
    for f in graph:
        if f.number == _GRAPH_NODE and f.wire == _LEN:
            node = next(node_iter)
            if id(node) in dropped:
                continue
            new = replaced.get(id(node))
            out_graph.append(f.raw if new is None else _len_field(_GRAPH_NODE, new))
        elif f.number == _GRAPH_INITIALIZER and isinstance(f.value, bytes) and unread:
            if _tensor_name(f.value) not in unread:
                out_graph.append(f.raw)
        else:
            out_graph.append(f.raw)
    out_graph.extend(_len_field(_GRAPH_INITIALIZER, t) for t in added)

    out_model: list[bytes] = []
    has_domain = False
    for f in top:
        if f.number == _MODEL_GRAPH and f.wire == _LEN:
            out_model.append(_len_field(_MODEL_GRAPH, b"".join(out_graph)))
        else:
            if f.number == _MODEL_OPSET_IMPORT and isinstance(f.value, bytes):
                has_domain |= any(
                    g.number == _OPSET_DOMAIN and g.value == DOMAIN.encode() for g in _fields(f.value)
                )
            out_model.append(f.raw)
    if not has_domain:
        opset = _len_field(_OPSET_DOMAIN, DOMAIN.encode()) + _varint_field(_OPSET_VERSION, 1)
        out_model.append(_len_field(_MODEL_OPSET_IMPORT, opset))
    return Rewritten(b"".join(out_model), len(replaced))


def _graph_output_names(graph: list[_Field]) -> set[str]:
    names = set()
    for f in graph:
        if f.number == _GRAPH_OUTPUT and isinstance(f.value, bytes):
            for g in _fields(f.value):
                if g.number == _VALUE_INFO_NAME and isinstance(g.value, bytes):
                    names.add(g.value.decode())
    return names


def _weight_product(
    node: _Node, producer: dict[str, _Node], tensors: dict[str, _Tensor]
) -> tuple[_Node, _Node, _Tensor, _Tensor] | None:
    """The Cast, the Mul, the int8 weights and the scales of a MatMul the rules rewrite."""
    if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
        return None
    mul = producer.get(node.inputs[1])
    if mul is None or mul.op_type != "Mul" or mul.domain not in ("", "ai.onnx") or len(mul.inputs) != 2:
        return None
    for cast_output, scale_name in (mul.inputs, mul.inputs[::-1]):
        cast = producer.get(cast_output)
        if cast is None or cast.op_type != "Cast" or len(cast.inputs) != 1 or cast.ints.get("to") != _FLOAT:
            continue
        weight, scale = tensors.get(cast.inputs[0]), tensors.get(scale_name)
        if weight is None or scale is None or weight.data_type != _INT8 or len(weight.dims) != 2:
            continue
        if weight.values is None or weight.values.size != weight.dims[0] * weight.dims[1]:
            continue
        n = weight.dims[1]
        if scale.data_type != _FLOAT or scale.values is None or scale.values.size != n:
            continue
        if scale.dims not in ([n], [1, n]):
            continue
        return cast, mul, weight, scale
    return None
