"""An ONNX model whose batch axis is free: batch-agnostic cells, then a symbolic batch dimension.

MindSpore 2.10 refuses to export ONNX from a dynamic-shape input ("Export ONNX format model not
support dynamic shape mode"), so the model is traced at a fixed batch and made dynamic afterwards:

1. Before tracing, the two cells whose reshapes bake the batch size into the graph (the
   squeeze-excite gate and the classifier head pool through (N*C, H*W) views, for MindSpore's
   CPU kernels: src/models/layers/rowwise.py) are replaced by forms that reshape with -1 and
   reduce over (H, W) directly. Same function; ONNX Runtime runs both the same way.
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
    """x * sigmoid(fc2(relu(fc1(mean_hw(x))))) * scale without a reshape that names the batch size."""

    def __init__(self, se):
        super().__init__()
        self.fc1, self.fc2 = se.fc1, se.fc2
        self.channels = se.fc1.weight.shape[1]

    def construct(self, x, scale=1.0):
        s = ops.mean(x, (2, 3)).reshape(-1, self.channels)
        s = ops.relu(ops.dense(s, self.fc1.weight.reshape(self.fc1.weight.shape[0], -1), self.fc1.bias))
        s = ops.sigmoid(ops.dense(s, self.fc2.weight.reshape(self.fc2.weight.shape[0], -1), self.fc2.bias)) * scale
        return x * s.reshape(-1, self.channels, 1, 1)


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
