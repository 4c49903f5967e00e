"""ONNX models read and written in protobuf's wire format: the few fields the graph rewrites of
the bundled model need (`catalog.search.int8_matmul`, `catalog.search.fused_attention`): a graph's
nodes, initializers and outputs, the model's operator sets. Every other field is copied as it is,
so that the `onnx` package (and its second of imports) is not needed. Field numbers are
`onnx.proto`'s. A message's fields are read as views of the bytes they were read from, never
copies: a 23 MB model read whole holds its weights once (`Buffer`)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np

# onnx.proto field numbers
MODEL_OPSET_IMPORT, MODEL_GRAPH = 8, 7
GRAPH_NODE, GRAPH_INITIALIZER, GRAPH_INPUT, GRAPH_OUTPUT = 1, 5, 11, 12
VALUE_INFO_NAME = 1
NODE_INPUT, NODE_OUTPUT, NODE_NAME, NODE_OP_TYPE, NODE_ATTRIBUTE, NODE_DOMAIN = 1, 2, 3, 4, 5, 7
ATTRIBUTE_NAME, ATTRIBUTE_I, ATTRIBUTE_INTS, ATTRIBUTE_TYPE = 1, 3, 8, 20
ATTRIBUTE_TYPE_INT = 2  # AttributeProto.AttributeType
TENSOR_DIMS, TENSOR_DATA_TYPE, TENSOR_FLOAT_DATA, TENSOR_NAME, TENSOR_RAW_DATA = 1, 2, 4, 8, 9
OPSET_DOMAIN, OPSET_VERSION = 1, 2
FLOAT, INT8, INT32, INT64 = 1, 3, 6, 7  # TensorProto.DataType
VARINT, I64, LEN, I32 = 0, 1, 2, 5
DOMAIN = "com.microsoft"


# what a message is read from and written back as: bytes, or a view of the bytes it came from
Buffer: TypeAlias = bytes | memoryview


class GraphError(ValueError):
    """The file is not a protocol buffer this module can read."""


# --- protobuf's wire format ----------------------------------------------------------------------


def varint(data: Buffer, at: int) -> tuple[int, int]:
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


def encode_varint(value: int) -> bytes:
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
class Field:
    number: int
    wire: int
    value: int | memoryview  # a varint's or fixed number's value; a length-delimited field's bytes
    raw: memoryview  # the field as it was read (key included): written back as it is when untouched


def fields(data: Buffer) -> Iterator[Field]:
    """The message's fields, each a view of `data`."""
    data = data if isinstance(data, memoryview) else memoryview(data)
    at = 0
    while at < len(data):
        start = at
        key, at = varint(data, at)
        number, wire = key >> 3, key & 7
        value: int | memoryview
        if wire == VARINT:
            value, at = varint(data, at)
        elif wire in (I64, I32):
            size = 8 if wire == I64 else 4
            if at + size > len(data):
                raise GraphError("a field runs past the end of its message")
            value, at = int(struct.unpack_from("<q" if wire == I64 else "<i", data, at)[0]), at + size
        elif wire == LEN:
            size, at = varint(data, at)
            if at + size > len(data):
                raise GraphError("a field runs past the end of its message")
            value, at = data[at : at + size], at + size
        else:
            raise GraphError(f"wire type {wire} (groups) is not used by ONNX")
        yield Field(number, wire, value, data[start:at])


def len_field(number: int, payload: Buffer) -> bytes:
    return b"".join((encode_varint(number << 3 | LEN), encode_varint(len(payload)), payload))


def varint_field(number: int, value: int) -> bytes:
    return encode_varint(number << 3 | VARINT) + encode_varint(value)


def text(f: Field) -> str:
    assert isinstance(f.value, memoryview)
    return str(f.value, "utf-8")


# --- the messages it reads -----------------------------------------------------------------------


@dataclass
class Node:
    raw: Buffer
    op_type: str = ""
    domain: str = ""
    name: str = ""
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    ints: dict[str, int] = field(default_factory=dict)  # its integer attributes
    lists: dict[str, list[int]] = field(default_factory=dict)  # its attributes of integers


def read_node(raw: Buffer) -> Node:
    node = Node(raw)
    for f in fields(raw):
        if f.wire != LEN:
            continue
        if f.number == NODE_INPUT:
            node.inputs.append(text(f))
        elif f.number == NODE_OUTPUT:
            node.outputs.append(text(f))
        elif f.number == NODE_OP_TYPE:
            node.op_type = text(f)
        elif f.number == NODE_DOMAIN:
            node.domain = text(f)
        elif f.number == NODE_NAME:
            node.name = text(f)
        elif f.number == NODE_ATTRIBUTE:
            assert isinstance(f.value, memoryview)
            name, value, values = "", None, []
            for g in fields(f.value):
                if g.number == ATTRIBUTE_NAME and g.wire == LEN:
                    name = text(g)
                elif g.number == ATTRIBUTE_I and g.wire == VARINT and isinstance(g.value, int):
                    value = signed(g.value)
                elif g.number == ATTRIBUTE_INTS:
                    values.extend(_ints(g))
            if value is not None:
                node.ints[name] = value
            if values:
                node.lists[name] = values
    return node


def node_bytes(
    name: str, op_type: str, domain: str, inputs: list[str], outputs: list[str], **ints: int
) -> bytes:
    """A NodeProto (`ints`: its integer attributes; an input named "" is an optional one left out)."""
    attributes = (
        len_field(
            NODE_ATTRIBUTE,
            len_field(ATTRIBUTE_NAME, key.encode())
            + varint_field(ATTRIBUTE_I, value & (1 << 64) - 1)  # two's complement
            + varint_field(ATTRIBUTE_TYPE, ATTRIBUTE_TYPE_INT),
        )
        for key, value in ints.items()
    )
    return b"".join(
        [
            *(len_field(NODE_INPUT, i.encode()) for i in inputs),
            *(len_field(NODE_OUTPUT, o.encode()) for o in outputs),
            len_field(NODE_NAME, name.encode()),
            len_field(NODE_OP_TYPE, op_type.encode()),
            *attributes,
            len_field(NODE_DOMAIN, domain.encode()),
        ]
    )


def signed(value: int) -> int:
    """An int64 read as a varint (a negative one is ten bytes of two's complement)."""
    return value - (1 << 64) if value >= 1 << 63 else value


def _ints(f: Field) -> list[int]:
    """The values of a repeated int64 field, packed or not."""
    if f.wire == VARINT:
        assert isinstance(f.value, int)
        return [signed(f.value)]
    values, at = [], 0
    if f.wire == LEN:
        assert isinstance(f.value, memoryview)
        while at < len(f.value):
            value, at = varint(f.value, at)
            values.append(signed(value))
    return values


@dataclass
class Tensor:
    name: str
    data_type: int
    dims: list[int]
    values: np.ndarray | None  # its data, where held in the file (raw or float data)


def read_tensor(raw: Buffer) -> Tensor:
    name, data_type, dims = "", 0, []
    data: memoryview | None = None
    floats: list[float] = []
    for f in fields(raw):
        if f.number == TENSOR_NAME and f.wire == LEN:
            name = text(f)
        elif f.number == TENSOR_DATA_TYPE and f.wire == VARINT:
            assert isinstance(f.value, int)
            data_type = f.value
        elif f.number == TENSOR_DIMS:
            if f.wire == VARINT:
                assert isinstance(f.value, int)
                dims.append(f.value)
            elif f.wire == LEN:  # packed
                assert isinstance(f.value, memoryview)
                at = 0
                while at < len(f.value):
                    dim, at = varint(f.value, at)
                    dims.append(dim)
        elif f.number == TENSOR_RAW_DATA and f.wire == LEN:
            assert isinstance(f.value, memoryview)
            data = f.value
        elif f.number == TENSOR_FLOAT_DATA:
            if f.wire == LEN:  # packed
                assert isinstance(f.value, memoryview)
                floats.extend(struct.unpack(f"<{len(f.value) // 4}f", f.value))
            elif f.wire == I32:
                assert isinstance(f.value, int)
                floats.append(struct.unpack("<f", struct.pack("<i", f.value))[0])
    values: np.ndarray | None = None
    if data is not None and data_type == FLOAT:
        values = np.frombuffer(data, dtype="<f4")
    elif data is not None and data_type == INT8:
        values = np.frombuffer(data, dtype=np.int8)
    elif data is not None and data_type == INT64:
        values = np.frombuffer(data, dtype="<i8")
    elif floats and data_type == FLOAT:
        values = np.asarray(floats, dtype=np.float32)
    return Tensor(name, data_type, dims, values)


def tensor_name(raw: Buffer) -> str:
    for f in fields(raw):
        if f.number == TENSOR_NAME and f.wire == LEN:
            return text(f)
    return ""


def tensor_bytes(name: str, data_type: int, dims: list[int], data: bytes) -> bytes:
    packed = b"".join(encode_varint(d) for d in dims)
    return b"".join(
        [
            len_field(TENSOR_DIMS, packed),
            varint_field(TENSOR_DATA_TYPE, data_type),
            len_field(TENSOR_NAME, name.encode()),
            len_field(TENSOR_RAW_DATA, data),
        ]
    )


def graph_output_names(graph: list[Field]) -> set[str]:
    return _value_names(graph, GRAPH_OUTPUT)


def graph_input_names(graph: list[Field]) -> set[str]:
    return _value_names(graph, GRAPH_INPUT)


def _value_names(graph: list[Field], number: int) -> set[str]:
    names = set()
    for f in graph:
        if f.number == number and isinstance(f.value, memoryview):
            for g in fields(f.value):
                if g.number == VALUE_INFO_NAME and g.wire == LEN:
                    names.add(text(g))
    return names


def assemble(top: list[Field], graph: bytes) -> bytes:
    """The model of `top` (a ModelProto's fields) with `graph` for its graph, and the operator set
    of the `com.microsoft` domain imported where it was not."""
    out: list[Buffer] = []
    has_domain = False
    for f in top:
        if f.number == MODEL_GRAPH and f.wire == LEN:
            out.append(len_field(MODEL_GRAPH, graph))
        else:
            if f.number == MODEL_OPSET_IMPORT and isinstance(f.value, memoryview):
                has_domain |= any(
                    g.number == OPSET_DOMAIN and g.value == DOMAIN.encode() for g in fields(f.value)
                )
            out.append(f.raw)
    if not has_domain:
        opset = len_field(OPSET_DOMAIN, DOMAIN.encode()) + varint_field(OPSET_VERSION, 1)
        out.append(len_field(MODEL_OPSET_IMPORT, opset))
    return b"".join(out)


def rebuilt(top: list[Field], graph: list[Field], nodes: list[Node], added: list[bytes]) -> bytes:
    """The model of `top` and `graph` (their fields) with `nodes` for its nodes, in order (written
    where its first node was), and the initializers `added` besides its own: every node whose
    outputs nothing reads goes (what the graph gives out is read), then every initializer nothing
    reads (one that is also a graph input is that input's default: it stays)."""
    kept = graph_output_names(graph)
    while True:
        read = kept | {name for node in nodes for name in node.inputs}
        alive = [node for node in nodes if any(output in read for output in node.outputs)]
        if len(alive) == len(nodes):
            break
        nodes = alive
    read |= graph_input_names(graph)
    out: list[Buffer] = []
    written = False
    for f in graph:
        if f.number == GRAPH_NODE and f.wire == LEN:
            if not written:
                out.extend(len_field(GRAPH_NODE, node.raw) for node in nodes)
                written = True
        elif f.number == GRAPH_INITIALIZER and isinstance(f.value, memoryview):
            if tensor_name(f.value) in read:
                out.append(f.raw)
        else:
            out.append(f.raw)
    out.extend(len_field(GRAPH_INITIALIZER, t) for t in added)
    return assemble(top, b"".join(out))


def nodes_and_tensors(graph: list[Field]) -> tuple[list[Node], dict[str, Tensor]]:
    """A graph's nodes, in order, and its initializers by name."""
    nodes = [read_node(f.value) for f in graph if f.number == GRAPH_NODE and isinstance(f.value, memoryview)]
    tensors = {}
    for f in graph:
        if f.number == GRAPH_INITIALIZER and isinstance(f.value, memoryview):
            tensor = read_tensor(f.value)
            tensors[tensor.name] = tensor
    return nodes, tensors


def graph_of(model: Buffer) -> tuple[list[Field], list[Field]]:
    """A model's fields and its graph's fields."""
    top = list(fields(model))
    graphs = [f for f in top if f.number == MODEL_GRAPH and f.wire == LEN]
    if len(graphs) != 1:
        raise GraphError("the model holds no graph (or several)")
    raw = graphs[0].value
    assert isinstance(raw, memoryview)
    return top, list(fields(raw))
