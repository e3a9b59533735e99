"""Constant scalings folded into the convolutions they feed, in an exported ONNX graph.

NFNet scales activations by constants between its convolutions: each GELU's output by gamma
(1.7015 for GELU) and a block's input by beta before its first convolution (and the transition
block's shortcut convolution). MindSpore's exporter writes each as Mul(x, c), c a Constant
(through a Cast). A convolution is linear in its input and its zero padding stays zero, so

    Conv(x * c, W) + b = Conv(x, c * W) + b

and the Mul can go: its consumers read x and their weights are scaled once, here. Only a Mul
whose every consumer is a Conv reading it as its input (and owning its weight) is folded; the
others (the squeeze-excite gates, the residual's alpha) stay. The pass runs on the traced
graph before src/deploy/gelu.py writes the GELUs out, so their own Mul by 0.5 is never touched.

Why: between two convolutions ONNX Runtime keeps activations in its blocked NCHWc layout and
fuses the GELU, but a Mul in between sends each activation back to NCHW and forth again
(ReorderOutput, Mul, ReorderInput). Measured on the Ice Lake (2 threads, F0 at 256 px, paired
in one process): 52 -> 12 ReorderInput nodes, batch 1 169 -> 155 ms, batch 8 1.20 -> 1.12 s.
"""
import collections

import numpy as np

from .onnx_proto import FLOAT


def scalar_constants(graph):
    """{tensor name: float} of the graph's one-element float32 constants: initializers, Constant
    nodes, and Casts to float of either."""
    values = {}
    for tensor in graph.initializer:
        value = _one_float(tensor)
        if value is not None:
            values[tensor.name] = value
    for node in graph.node:
        if node.op_type == "Constant":
            tensor = next((a.t for a in node.attribute if a.name == "value"), None)
            value = None if tensor is None else _one_float(tensor)
        elif node.op_type == "Cast" and node.input[0] in values:
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            value = values[node.input[0]] if to == FLOAT else None
        else:
            continue
        if value is not None:
            values[node.output[0]] = value
    return values


def _one_float(tensor):
    if tensor.data_type != FLOAT:
        return None
    data = _float_array(tensor)
    return float(data[0]) if data.size == 1 else None


def _float_array(tensor):
    if tensor.raw_data:
        return np.frombuffer(tensor.raw_data, dtype="<f4")
    return np.asarray(tensor.float_data, dtype=np.float32)


def _scale(tensor, factor):
    scaled = _float_array(tensor) * np.float32(factor)
    tensor.ClearField("float_data")
    tensor.raw_data = scaled.astype("<f4").tobytes()


def fold_scalar_muls(model):
    """Edit the ONNX `model` (onnx_proto.read_model): every foldable Mul(x, constant scalar) folded into
    the Conv weights it feeds; return how many Muls went. Constants left unused go too."""
    graph = model.graph
    nodes = list(graph.node)
    scalars = scalar_constants(graph)
    weights = {tensor.name: tensor for tensor in graph.initializer}
    graph_outputs = {value.name for value in graph.output}
    readers = collections.defaultdict(list)  # tensor name -> indices of the nodes that read it
    for index, node in enumerate(nodes):
        for name in node.input:
            readers[name].append(index)
    folded = set()
    # from the last node back: Mul(Mul(x, gamma), beta) folds beta first, then gamma into the same convs
    for index in reversed(range(len(nodes))):
        node = nodes[index]
        operand = _scaled_operand(node, scalars)
        if operand is None or node.output[0] in graph_outputs:
            continue
        x, factor = operand
        convs = readers[node.output[0]]
        if not convs or not all(_convolves(nodes[i], node.output[0], weights, readers) for i in convs):
            continue
        for i in convs:
            _scale(weights[nodes[i].input[1]], factor)
            nodes[i].input[0] = x
        readers[x] = [i for i in readers[x] if i != index] + convs
        folded.add(index)
    if not folded:
        return 0
    kept = _without_unused_constants([node for index, node in enumerate(nodes) if index not in folded],
                                     graph_outputs)
    del graph.node[:]
    graph.node.extend(kept)
    return len(folded)


def _scaled_operand(node, scalars):
    """(x, c) when `node` is Mul(x, c) or Mul(c, x) with c a known scalar and x not."""
    if node.op_type != "Mul" or len(node.input) != 2:
        return None
    a, b = node.input
    if b in scalars and a not in scalars:
        return a, scalars[b]
    if a in scalars and b not in scalars:
        return b, scalars[a]
    return None


def _convolves(node, name, weights, readers):
    """Whether `node` is a Conv reading `name` as its input only, with a float32 weight of its own."""
    return (node.op_type == "Conv" and len(node.input) >= 2 and node.input[0] == name and name not in node.input[1:]
            and node.input[1] in weights and weights[node.input[1]].data_type == FLOAT
            and len(readers[node.input[1]]) == 1)


def _without_unused_constants(nodes, graph_outputs):
    """`nodes` without the Constant and Cast nodes whose outputs nothing reads any more."""
    used = set(graph_outputs)
    kept = []
    for node in reversed(nodes):
        if node.op_type in ("Constant", "Cast") and not any(name in used for name in node.output):
            continue
        used.update(node.input)
        kept.append(node)
    return kept[::-1]
