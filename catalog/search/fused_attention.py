"""The bundled model's attention and GELU as ONNX Runtime's fused operators: its graph, once its
weight products run in int8 (`catalog.search.int8_matmul`), rewritten again in memory before ONNX
Runtime loads it.

The bundled all-MiniLM-L6-v2 was exported with each layer's self-attention written out in small
operators (the heads split and merged by `Reshape` and `Transpose`, the scaled product of the
queries and keys, the padding mask added, `Softmax` and its guard against NaN, the product with
the values) and each GELU as five; ONNX Runtime's own fusions do not recognise this form, so a
short query ran some 280 operators, most of them costing more to dispatch than to compute. Here:
- each layer's attention becomes `DynamicQuantizeLinear` and `QAttention` (`com.microsoft`): its
  three products (queries, keys, values) side by side as one int8 product `[D, 3D]` of the same
  weights, per-column scales, zero points and biases, and the attention mask given as it is (a
  key padding mask);
- each `Add(x, bias) -> Div(sqrt 2) -> Erf -> Add(1) -> Mul(0.5) -> Mul(x + bias)` becomes one
  `BiasGelu` (`com.microsoft`).
On the 2-core machine this alone takes about a fifth off the model's CPU per query and a quarter
per long message; with ONNX Runtime's `SkipLayerNormalization` fusion left off as well
(`catalog.search.embedder`), 30% and 44% (`bench/model_int8.py`). The vectors are not the
unfused graph's to the bit: the activations' int8 scale is taken per run from their extremes,
which a float rounding elsewhere moves, so each vector is within a cosine of 0.99 of the unfused
graph's (0.9995 on average).

Rules:
- an attention is fused only when its nodes are exactly those above, in that order of reading:
  `Softmax(Add(MatMul(Mul(Q', c), Mul(K', c)), Where(...)))`, then `IsNaN` and `Where` on it, a
  `MatMul` with V', `Transpose` and `Reshape` back; Q' and V' are `Transpose[0,2,1,3](Reshape(P))`,
  K' the same transposed again for the product; each P is `Add(DynamicQuantizeMatMul(x, W, s,
  z), b)` of one input x, with W an INT8 initializer `[D, D]`, s, z and b initializers of D
  values; the heads are D / the head size (the last value of the split's shape), and c squared is
  1 / sqrt(head size) (the scale `QAttention` applies);
- the graph has an input `attention_mask`, and the mask added is built from it;
- a GELU is fused only with the constants above;
- the fused nodes are written where the last node they replace was; every node whose outputs
  nothing reads any more goes (the replaced ones, what built the mask and the heads' shapes),
  then every initializer nothing reads;
- a graph with nothing to fuse is returned unchanged (None).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from catalog.search.onnx_graph import (
    DOMAIN,
    FLOAT,
    INT8,
    INT32,
    INT64,
    Node,
    Tensor,
    graph_input_names,
    graph_of,
    node_bytes,
    nodes_and_tensors,
    read_node,
    rebuilt,
    tensor_bytes,
)

__all__ = ["Fused", "fuse"]

MASK = "attention_mask"
HEADS = (0, 2, 1, 3)  # the Transpose that splits (and merges) the heads


@dataclass(frozen=True)
class Fused:
    model: bytes  # the rewritten ONNX model
    attentions: int  # layers whose attention became one QAttention
    gelus: int  # GELUs that became one BiasGelu


class _Graph:
    def __init__(self, nodes: list[Node], tensors: dict[str, Tensor]) -> None:
        self.tensors = tensors
        self.producer = {output: node for node in nodes for output in node.outputs}
        self.readers: dict[str, list[Node]] = {}
        for node in nodes:
            for name in node.inputs:
                self.readers.setdefault(name, []).append(node)

    def made(self, name: str, op_type: str, domain: str = "") -> Node | None:
        """The node of `op_type` (of `domain`) that makes `name`, if one does."""
        node = self.producer.get(name)
        if (
            node is None
            or node.op_type != op_type
            or node.domain not in ({domain} if domain else {"", "ai.onnx"})  # the default domain
        ):
            return None
        return node

    def built_from(self, name: str, source: str, most: int = 64) -> bool:
        """Whether `source` is among what makes `name` (looking at most `most` nodes back)."""
        seen: set[int] = set()
        todo = [name]
        while todo and len(seen) < most:
            current = todo.pop()
            if current == source:
                return True
            node = self.producer.get(current)
            if node is not None and id(node) not in seen:
                seen.add(id(node))
                todo.extend(node.inputs)
        return False

    def only_reader(self, name: str, op_type: str) -> Node | None:
        readers = self.readers.get(name, [])
        if len(readers) != 1 or readers[0].op_type != op_type or readers[0].domain not in ("", "ai.onnx"):
            return None
        return readers[0]

    def scalar(self, name: str) -> float | None:
        tensor = self.tensors.get(name)
        if tensor is None or tensor.values is None or tensor.values.size != 1:
            return None
        return float(tensor.values.reshape(-1)[0])

    def values(self, name: str, data_type: int, size: int) -> np.ndarray | None:
        tensor = self.tensors.get(name)
        if (
            tensor is None
            or tensor.data_type != data_type
            or tensor.values is None
            or tensor.values.size != size
        ):
            return None
        return tensor.values


@dataclass(frozen=True)
class _Product:
    """`Add(DynamicQuantizeMatMul(x, W, s, z), b)`: one of an attention's three products."""

    x: str
    weight: np.ndarray  # [D, D] int8
    scale: np.ndarray  # [D]
    zero: np.ndarray  # [D] int8
    bias: np.ndarray  # [D]
    nodes: tuple[Node, ...]


def _product(g: _Graph, name: str, steps: tuple[tuple[str, tuple[int, ...] | None], ...]) -> _Product | None:
    """Follow `steps` (op type, Transpose's perm) back from `name` to the product that makes it."""
    nodes: list[Node] = []
    for op_type, perm in steps:
        node = g.made(name, op_type)
        if node is None or (perm is not None and tuple(node.lists.get("perm", ())) != perm):
            return None
        nodes.append(node)
        name = node.inputs[0]
    add = g.made(name, "Add")
    if add is None or len(add.inputs) != 2:
        return None
    product = g.made(add.inputs[0], "DynamicQuantizeMatMul", DOMAIN)
    if product is None or len(product.inputs) != 4:
        return None
    weight = g.tensors.get(product.inputs[1])
    if (
        weight is None
        or weight.data_type != INT8
        or len(weight.dims) != 2
        or weight.dims[0] != weight.dims[1]
    ):
        return None
    d = weight.dims[0]
    scale = g.values(product.inputs[2], FLOAT, d)
    zero = g.values(product.inputs[3], INT8, d)
    bias = g.values(add.inputs[1], FLOAT, d)
    if weight.values is None or weight.values.size != d * d or scale is None or zero is None or bias is None:
        return None
    return _Product(product.inputs[0], weight.values.reshape(d, d), scale, zero, bias, (*nodes, add, product))


@dataclass(frozen=True)
class _Attention:
    q: _Product
    k: _Product
    v: _Product
    heads: int
    merged: Node  # the Reshape that merges the heads: the fused nodes are written in its place


def _attention(g: _Graph, softmax: Node) -> _Attention | None:
    """The attention around `softmax`, when it is the rules' pattern."""
    if softmax.ints.get("axis", -1) != -1 or len(softmax.inputs) != 1:
        return None
    scores = g.made(softmax.inputs[0], "Add")
    if scores is None or len(scores.inputs) != 2:
        return None
    product = g.made(scores.inputs[0], "MatMul")
    masked = g.made(scores.inputs[1], "Where")
    if (
        product is None
        or masked is None
        or len(product.inputs) != 2
        or not g.built_from(masked.inputs[0], MASK)
    ):
        return None
    q_mul, k_mul = (g.made(name, "Mul") for name in product.inputs)
    if q_mul is None or k_mul is None:
        return None
    q_scale, k_scale = g.scalar(q_mul.inputs[1]), g.scalar(k_mul.inputs[1])
    # the NaN guard: Where(IsNaN(p), 0, p), then the product with the values
    readers = g.readers.get(softmax.outputs[0], [])
    isnan = next((r for r in readers if r.op_type == "IsNaN"), None)
    guard = g.only_reader(isnan.outputs[0], "Where") if isnan is not None else None
    if isnan is None or guard is None or len(readers) != 2 or guard not in readers:
        return None
    weighted = g.only_reader(guard.outputs[0], "MatMul")
    if weighted is None or weighted.inputs[0] != guard.outputs[0]:
        return None
    merge = g.only_reader(weighted.outputs[0], "Transpose")
    merged = g.only_reader(merge.outputs[0], "Reshape") if merge is not None else None
    if merge is None or merged is None or tuple(merge.lists.get("perm", ())) != HEADS:
        return None
    split = (("Transpose", HEADS), ("Reshape", None))
    transposed = (("Reshape", None), ("Transpose", (0, 2, 1)), ("Reshape", None), *split)  # for Q.K^T
    q = _product(g, q_mul.inputs[0], split)
    k = _product(g, k_mul.inputs[0], transposed)
    v = _product(g, weighted.inputs[1], split)
    if q is None or k is None or v is None or not (q.x == k.x == v.x):
        return None
    d = q.weight.shape[0]
    if k.weight.shape[0] != d or v.weight.shape[0] != d:
        return None
    # the head size: the last value of the shape the queries are split to
    shape = g.made(q.nodes[1].inputs[1], "Concat") if len(q.nodes[1].inputs) == 2 else None
    size = g.values(shape.inputs[-1], INT64, 1) if shape is not None and shape.inputs else None
    if size is None or size[0] <= 0 or d % int(size[0]):
        return None
    head = int(size[0])
    if (
        q_scale is None
        or q_scale != k_scale
        or not math.isclose(q_scale * q_scale, 1 / math.sqrt(head), rel_tol=1e-5)
    ):
        return None
    return _Attention(q, k, v, d // head, merged)


def _gelu(g: _Graph, erf: Node) -> tuple[Node, Node] | None:
    """`BiasGelu` of the GELU around `erf`, and its last node (written in its place)."""
    div = g.made(erf.inputs[0], "Div")
    if div is None or not math.isclose(g.scalar(div.inputs[1]) or 0.0, math.sqrt(2), rel_tol=1e-6):
        return None
    add = g.made(div.inputs[0], "Add")
    if add is None or len(add.inputs) != 2 or g.made(add.inputs[0], "DynamicQuantizeMatMul", DOMAIN) is None:
        return None
    bias = g.tensors.get(add.inputs[1])
    if bias is None or bias.data_type != FLOAT or len(bias.dims) != 1:
        return None
    one = g.only_reader(erf.outputs[0], "Add")
    if one is None or g.scalar(one.inputs[1]) != 1.0:
        return None
    half = g.only_reader(one.outputs[0], "Mul")
    if half is None or g.scalar(next((i for i in half.inputs if i != one.outputs[0]), "")) != 0.5:
        return None
    last = g.only_reader(half.outputs[0], "Mul")
    if last is None or sorted(last.inputs) != sorted([add.outputs[0], half.outputs[0]]):
        return None
    if sorted(id(r) for r in g.readers.get(add.outputs[0], [])) != sorted([id(div), id(last)]):
        return None
    base = last.name or last.outputs[0]
    fused = node_bytes(f"{base}/bias_gelu", "BiasGelu", DOMAIN, list(add.inputs), last.outputs)
    return read_node(fused), last


def fuse(model: bytes) -> Fused | None:
    """The model with its attentions and GELUs fused (see the module's rules); None when it has
    none of either."""
    top, graph = graph_of(model)
    nodes, tensors = nodes_and_tensors(graph)
    g = _Graph(nodes, tensors)

    placed: dict[int, list[Node]] = {}  # id(node) -> the nodes written in its place
    added: list[bytes] = []
    attentions = gelus = 0
    mask = f"{MASK}/int32"
    masked = MASK in graph_input_names(graph)  # the mask QAttention is given
    for node in nodes:
        if node.op_type != "Softmax" or not masked:
            continue
        found = _attention(g, node)
        if found is None:
            continue
        base = found.merged.outputs[0]
        names = {part: f"{base}/qkv_{part}" for part in ("weight", "scale", "zero", "bias")}
        parts = (found.q, found.k, found.v)
        d = found.q.weight.shape[0]
        added += [
            tensor_bytes(names["weight"], INT8, [d, 3 * d], np.hstack([p.weight for p in parts]).tobytes()),
            tensor_bytes(
                names["scale"], FLOAT, [3 * d], np.hstack([p.scale for p in parts]).astype("<f4").tobytes()
            ),
            tensor_bytes(names["zero"], INT8, [3 * d], np.hstack([p.zero for p in parts]).tobytes()),
            tensor_bytes(
                names["bias"], FLOAT, [3 * d], np.hstack([p.bias for p in parts]).astype("<f4").tobytes()
            ),
        ]
        quantized = [f"{base}/x_quantized", f"{base}/x_scale", f"{base}/x_zero"]
        quantize = node_bytes(f"{base}/quantize", "DynamicQuantizeLinear", "", [found.q.x], quantized)
        attention = node_bytes(
            f"{base}/attention",
            "QAttention",
            DOMAIN,
            [
                quantized[0],
                names["weight"],
                names["bias"],
                quantized[1],
                names["scale"],
                mask,
                quantized[2],
                names["zero"],
            ],
            [base],
            num_heads=found.heads,
        )
        placed[id(found.merged)] = [read_node(quantize), read_node(attention)]
        attentions += 1
    for node in nodes:
        if node.op_type != "Erf":
            continue
        found_gelu = _gelu(g, node)
        if found_gelu is None:
            continue
        fused, last = found_gelu
        placed[id(last)] = [fused]
        gelus += 1
    if not attentions and not gelus:
        return None

    order: list[Node] = []
    if attentions:
        order.append(read_node(node_bytes(f"{MASK}/cast", "Cast", "", [MASK], [mask], to=INT32)))
    for node in nodes:
        order.extend(placed.get(id(node), [node]))
    # what nothing reads any more goes: the attentions' and GELUs' parts, the mask's, the heads' shapes
    return Fused(rebuilt(top, graph, order, added), attentions, gelus)
