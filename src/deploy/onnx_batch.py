"""An ONNX model whose batch axis is free: batch-agnostic cells, then a symbolic batch dimension.

MindSpore 2.10 refuses to export ONNX from a dynamic-shape input ("Export ONNX format model not
support dynamic shape mode"), so the model is traced at a fixed batch and made dynamic afterwards:

1. Before tracing, the two cells whose reshapes bake the batch size into the graph (the
   squeeze-excite gate and the classifier head pool through (N*C, H*W) views, for MindSpore's
   CPU kernels: src/models/layers/rowwise.py) are replaced by forms that reduce over (H, W)
   directly (the gate's two FC layers as 1x1 convolutions on the pooled (N, C, 1, 1) tensor, the
   head's with -1). Same function; ONNX Runtime gives the same logits.
2. After export, the graph's input and output get the symbolic first dimension "batch", and
   the per-tensor shape annotations (value_info, all traced at the fixed batch) are dropped;
   ONNX Runtime infers them again at load time.

Step 2 edits the ONNX protobuf read through src/deploy/onnx_proto.py (a schema of just the fields
the edits touch), so the `onnx` package is not needed.
"""
from mindspore import nn, ops

from src.models.layers.replace import replace_cells
from src.models.layers.squeeze_excite import SqueezeExcite
from src.models.nfnet import ClassifierHead


BATCH_DIM = "batch"


class BatchFreeSqueezeExcite(nn.Cell):
    """x * sigmoid(fc2(relu(fc1(mean_hw(x))))) * scale without a reshape that names the batch size.

    fc1 and fc2 run as 1x1 convolutions on the (N, C, 1, 1) mean, as timm's SE does. OpenVINO ran the
    MatMul form as 24 FullyConnected primitives (F0, batch 1 at 256 px, 2 threads on the Ice Lake: 6.2 ms
    by its per-layer counters, the convolutions 5.2 ms); paired in one process, 40 calls each, batch 1
    142.6 -> 139.0 ms (timm's ONNX 139.0), ONNX Runtime unchanged (batch 8 1,143 -> 1,142 ms), and
    ONNX Runtime's logits bit-identical."""

    def __init__(self, se):
        super().__init__()
        self.fc1, self.fc2 = se.fc1, se.fc2

    def construct(self, x, scale=1.0, addend=None):
        s = ops.mean(x, (2, 3), keep_dims=True)
        s = ops.relu(ops.conv2d(s, self.fc1.weight, self.fc1.bias))
        y = x * (ops.sigmoid(ops.conv2d(s, self.fc2.weight, self.fc2.bias)) * scale)
        return y if addend is None else y + addend


class BatchFreeHead(nn.Cell):
    """Global average pool and the linear classifier (eval: no dropout), batch left free."""

    def __init__(self, head):
        super().__init__()
        self.fc = head.fc

    def construct(self, x):
        return self.fc(ops.mean(x, (2, 3)))


def use_batch_free_cells(network):
    """Swap the SE gates and the classifier head of `network` (in place) for batch-free forms; return the count."""
    return (replace_cells(network, lambda cell: isinstance(cell, SqueezeExcite),
                          lambda _name, se: BatchFreeSqueezeExcite(se))
            + replace_cells(network, lambda cell: isinstance(cell, ClassifierHead),
                            lambda _name, head: BatchFreeHead(head)))


def make_batch_dynamic(model):
    """Edit the ONNX `model` (onnx_proto.read_model): first dimension of every graph input and output -> "batch"."""
    for value in list(model.graph.input) + list(model.graph.output):
        dims = value.type.tensor_type.shape.dim
        if len(dims):
            dims[0].ClearField("dim_value")
            dims[0].dim_param = BATCH_DIM
    del model.graph.value_info[:]
