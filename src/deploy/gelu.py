"""Exact (erf) GELU in the ONNX graph, although MindSpore 2.10's exporter has no Erf converter.

MindSpore's ONNX exporter has no Erf/Erfc converter, and its GeLU converter emits the tanh
approximation (up to ~5e-4 off the erf form the weights were trained with). So the network is
traced with a marker in place of each GELU, a Tanh (an operator NFNet does not otherwise use),
and the written graph is edited afterwards: every marker becomes ONNX's own exact GELU,

    gelu(x) = Mul(Mul(x, Add(Erf(Div(x, sqrt(2))), 1)), 0.5)

(Erf is an ONNX operator since opset 9). ONNX Runtime fuses exactly this pattern into its Gelu
kernel (its GeluFusion, at the default optimization level), one pass instead of the ~28
elementary operators an Erf-free formula needs, which took ~55 % of F0's ONNX Runtime time.
The marker cell keeps GammaAct's gamma as a separate Mul after it.

A tanh-form GELU (gelu_form "tanh", DeepMind's) becomes its own formula,

    gelu(x) = Mul(Mul(x, Add(Tanh(Mul(Add(x, Mul(Mul(Mul(x, x), x), 0.044715)), sqrt(2/pi))), 1)), 0.5)

written out rather than left to MindSpore's GeLU converter, so the graph says which form it computes.

The edit goes through src/deploy/onnx_proto.py; the number of markers in the graph must equal
the number of GELUs swapped, so a network that used Tanh itself is refused, not silently changed.
"""
import math

import numpy as np
from mindspore import nn, ops

from src.models.layers import GammaAct
from src.models.layers.replace import replace_cells

from .errors import DeployError
from .onnx_proto import FLOAT

MARKER = "Tanh"
_CONSTANTS = {"nfnet_gelu_sqrt2": math.sqrt(2.0), "nfnet_gelu_one": 1.0, "nfnet_gelu_half": 0.5,
              "nfnet_gelu_cubic": 0.044715, "nfnet_gelu_sqrt_2_over_pi": math.sqrt(2.0 / math.pi)}
# each form's nodes: (op, inputs); None is the previous node's output, "x" the GELU's input
_STEPS = {
    "exact": [("Div", ["x", "nfnet_gelu_sqrt2"]), ("Erf", [None]), ("Add", [None, "nfnet_gelu_one"]),
              ("Mul", ["x", None]), ("Mul", [None, "nfnet_gelu_half"])],
    "tanh": [("Mul", ["x", "x"]), ("Mul", [None, "x"]), ("Mul", [None, "nfnet_gelu_cubic"]), ("Add", ["x", None]),
             ("Mul", [None, "nfnet_gelu_sqrt_2_over_pi"]), ("Tanh", [None]), ("Add", [None, "nfnet_gelu_one"]),
             ("Mul", ["x", None]), ("Mul", [None, "nfnet_gelu_half"])],
}


class OnnxGeluMarker(nn.Cell):
    """Traced as Tanh(x) * gamma; `restore_erf_gelu` turns the Tanh into the GELU of `gelu_form`.

    Only for tracing an ONNX export: what MindSpore computes with it is tanh, not GELU.
    """

    def __init__(self, gamma, gelu_form="exact"):
        super().__init__()
        self.gamma = float(gamma)
        self.gelu_form = gelu_form

    def construct(self, x):
        return ops.tanh(x) * self.gamma


def use_onnx_gelu_markers(network):
    """Swap every GELU GammaAct of `network` (in place) for an OnnxGeluMarker; return the count.

    Other activations (ReLU, SiLU) export as they are and stay.
    """
    return replace_cells(network, lambda cell: isinstance(cell, GammaAct) and cell.act_type == "gelu",
                         lambda _name, act: OnnxGeluMarker(act.gamma, act.gelu_form))


def count_markers(network):
    """How many OnnxGeluMarker cells `network` holds: the Tanh nodes its ONNX graph must have."""
    return sum(isinstance(cell, OnnxGeluMarker) for _, cell in network.cells_and_names())


def marker_form(network):
    """The gelu_form of `network`'s markers ("exact" when it has none); one form per network."""
    forms = {cell.gelu_form for _, cell in network.cells_and_names() if isinstance(cell, OnnxGeluMarker)}
    if len(forms) > 1:
        raise DeployError(f"the network mixes GELU forms {sorted(forms)}; an ONNX export takes one")
    return forms.pop() if forms else "exact"


def restore_erf_gelu(model, expected, gelu_form="exact"):
    """Edit the ONNX `model` (onnx_proto.read_model): each of its `expected` Tanh markers becomes the GELU
    of `gelu_form` (exact: Erf; tanh: its formula). Returns the count."""
    graph = model.graph
    nodes = list(graph.node)
    markers = [n for n in nodes if n.op_type == MARKER]
    if len(markers) != expected:
        raise DeployError(f"{len(markers)} {MARKER} nodes in the exported graph, expected one per GELU "
                          f"({expected}); a network with its own {MARKER} cannot use the GELU markers")
    if not markers:
        return 0
    used = {v for _, inputs in _STEPS[gelu_form] for v in inputs if v in _CONSTANTS}
    for name in sorted(used):
        graph.initializer.add(name=name, data_type=FLOAT, raw_data=np.float32(_CONSTANTS[name]).tobytes())
    del graph.node[:]
    for node in nodes:
        if node.op_type != MARKER:
            graph.node.append(node)
            continue
        x, y, tag = node.input[0], node.output[0], node.name or node.output[0]
        steps = _STEPS[gelu_form]
        previous = None
        for i, (op_type, inputs) in enumerate(steps):
            inputs = [previous if v is None else x if v == "x" else v for v in inputs]
            output = y if i == len(steps) - 1 else f"{tag}/gelu_{i}"
            graph.node.add(op_type=op_type, name=f"{tag}/gelu_{op_type.lower()}_{i}", input=inputs, output=[output])
            previous = output
    return len(markers)
