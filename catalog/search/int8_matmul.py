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

ONNX files are protocol buffers, read and written here without the `onnx` package
(`catalog.search.onnx_graph`).

Rules:
- a `MatMul` is rewritten only when its second input is `Mul(Cast(W), s)` or `Mul(s, Cast(W))`
  with `W` a two-dimensional INT8 initializer `[K, N]` and `s` a FLOAT initializer of `N` values
  (shape `[N]` or `[1, N]`); anything else stays as it is;
- a `Gather` (axis 0) of `Mul(Cast(W), s)`, the same W and s with a scale per column or one per
  row (`[K, 1]`), becomes `Gather` of W's rows, `Cast` and `Mul` by s (or by the rows of s, looked
  up alike): the same floats, while the table stays int8 (ONNX Runtime folded the word
  embeddings' 30,522 rows into a float table, 47 MB, four times the int8 one);
- the `Cast` and `Mul` go when nothing else reads them;
- a graph with nothing to rewrite is returned unchanged (None).
"""

from __future__ import annotations

from dataclasses import dataclass

from catalog.search.onnx_graph import (
    DOMAIN,
    FLOAT,
    INT8,
    GraphError,
    Node,
    Tensor,
    graph_of,
    node_bytes,
    nodes_and_tensors,
    read_node,
    rebuilt,
    tensor_bytes,
)

__all__ = ["GraphError", "Rewritten", "rewrite"]

# --- the rewrite ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rewritten:
    model: bytes  # the rewritten ONNX model
    products: int  # how many MatMuls became DynamicQuantizeMatMul
    lookups: int = 0  # how many Gathers of scaled int8 weights now gather the int8 rows


def rewrite(model: bytes) -> Rewritten | None:
    """The model with every weight product of int8 weights and per-column float scales made one
    `DynamicQuantizeMatMul`, and every lookup of rows of such weights made on the int8 rows (see
    the module's rules); None when it has neither."""
    top, graph = graph_of(model)
    nodes, tensors = nodes_and_tensors(graph)
    producer = {output: node for node in nodes for output in node.outputs}

    placed: dict[int, list[Node]] = {}  # id(node) -> the nodes written in its place
    added: list[bytes] = []
    products = lookups = 0
    for node in nodes:
        base = node.name or node.outputs[0]
        found = _weight_product(node, producer, tensors)
        if found is not None:
            weight, scale = found
            n = weight.dims[1]
            scale_name, zero_name = f"{base}/int8_scale", f"{base}/int8_zero_point"
            assert scale.values is not None
            added.append(tensor_bytes(scale_name, FLOAT, [n], scale.values.astype("<f4").tobytes()))
            added.append(tensor_bytes(zero_name, INT8, [n], bytes(n)))
            product = node_bytes(
                f"{base}/int8",
                "DynamicQuantizeMatMul",
                DOMAIN,
                [node.inputs[0], weight.name, scale_name, zero_name],
                node.outputs,
            )
            placed[id(node)] = [read_node(product)]
            products += 1
            continue
        looked_up = _weight_lookup(node, producer, tensors)
        if looked_up is None:
            continue
        weight, scale = looked_up
        ids = node.inputs[1]
        rows, floats, row_scales = f"{base}/int8_rows", f"{base}/int8_rows_float", f"{base}/row_scales"
        lookup = [
            node_bytes(f"{base}/int8", "Gather", "", [weight.name, ids], [rows], axis=0),
            node_bytes(f"{base}/float", "Cast", "", [rows], [floats], to=FLOAT),
        ]
        if scale.dims == [weight.dims[0], 1]:  # a scale per row: looked up with its row
            lookup.append(node_bytes(f"{base}/scales", "Gather", "", [scale.name, ids], [row_scales], axis=0))
        else:
            row_scales = scale.name
        lookup.append(node_bytes(f"{base}/scaled", "Mul", "", [floats, row_scales], node.outputs))
        placed[id(node)] = [read_node(raw) for raw in lookup]
        lookups += 1
    if not placed:
        return None
    # the Casts and Muls nothing reads any more go (with the initializers only they read)
    order = [new for node in nodes for new in placed.get(id(node), [node])]
    return Rewritten(rebuilt(top, graph, order, added), products, lookups)


def _weight_lookup(
    node: Node, producer: dict[str, Node], tensors: dict[str, Tensor]
) -> tuple[Tensor, Tensor] | None:
    """The int8 weights and the scales of a Gather the rules rewrite."""
    if node.op_type != "Gather" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
        return None
    if node.ints.get("axis", 0) != 0:
        return None
    return _scaled_weights(node.inputs[0], producer, tensors, per_row=True)


def _weight_product(
    node: Node, producer: dict[str, Node], tensors: dict[str, Tensor]
) -> tuple[Tensor, Tensor] | None:
    """The int8 weights and the scales of a MatMul the rules rewrite."""
    if node.op_type != "MatMul" or node.domain not in ("", "ai.onnx") or len(node.inputs) != 2:
        return None
    return _scaled_weights(node.inputs[1], producer, tensors, per_row=False)


def _scaled_weights(
    name: str, producer: dict[str, Node], tensors: dict[str, Tensor], *, per_row: bool
) -> tuple[Tensor, Tensor] | None:
    """`name` as `Mul(Cast(W), s)` (or `Mul(s, Cast(W))`): W a two-dimensional INT8 initializer
    `[K, N]`, s a FLOAT initializer of a scale per column (`[N]` or `[1, N]`), or, with
    `per_row`, of one per row too (`[K, 1]`)."""
    mul = producer.get(name)
    if mul is None or mul.op_type != "Mul" or mul.domain not in ("", "ai.onnx") or len(mul.inputs) != 2:
        return None
    for cast_output, scale_name in (mul.inputs, mul.inputs[::-1]):
        cast = producer.get(cast_output)
        if cast is None or cast.op_type != "Cast" or len(cast.inputs) != 1 or cast.ints.get("to") != FLOAT:
            continue
        weight, scale = tensors.get(cast.inputs[0]), tensors.get(scale_name)
        if weight is None or scale is None or weight.data_type != INT8 or len(weight.dims) != 2:
            continue
        if weight.values is None or weight.values.size != weight.dims[0] * weight.dims[1]:
            continue
        k, n = weight.dims
        if scale.data_type != FLOAT or scale.values is None:
            continue
        if scale.dims in ([n], [1, n]) and scale.values.size == n:
            return weight, scale
        if per_row and scale.dims == [k, 1] and scale.values.size == k:
            return weight, scale
    return None
