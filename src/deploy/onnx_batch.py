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

Step 2 edits the ONNX protobuf with a schema of just the fields it touches (onnx.proto's
field numbers: ModelProto.graph = 7; GraphProto.input = 11, output = 12, value_info = 13;
ValueInfoProto.type = 2; TypeProto.tensor_type = 1; Tensor.shape = 2; TensorShapeProto.dim = 1;
Dimension.dim_value = 1, dim_param = 2; https://github.com/onnx/onnx/blob/main/onnx/onnx.proto).
Protobuf keeps every other field as unknown fields and writes them back unchanged, so the
`onnx` package is not needed.
"""
from mindspore import nn, ops

from src.atomic import write_atomic
from src.models.layers.replace import replace_cells
from src.models.layers.squeeze_excite import SqueezeExcite
from src.models.nfnet import ClassifierHead

BATCH_DIM = "batch"


class BatchFreeSqueezeExcite(nn.Cell):
    """x * sigmoid(fc2(relu(fc1(mean_hw(x))))) without a reshape that names the batch size."""

    def __init__(self, se):
        super().__init__()
        self.fc1, self.fc2 = se.fc1, se.fc2
        self.channels = se.fc1.weight.shape[1]

    def construct(self, x):
        s = ops.mean(x, (2, 3)).reshape(-1, self.channels)
        s = ops.relu(ops.dense(s, self.fc1.weight.reshape(self.fc1.weight.shape[0], -1), self.fc1.bias))
        s = ops.sigmoid(ops.dense(s, self.fc2.weight.reshape(self.fc2.weight.shape[0], -1), self.fc2.bias))
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


def _onnx_schema():
    """Message classes for the part of onnx.proto that holds the graph's input/output shapes."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    messages = {
        "Dimension": [("dim_value", 1, F.TYPE_INT64, None, F.LABEL_OPTIONAL),
                      ("dim_param", 2, F.TYPE_STRING, None, F.LABEL_OPTIONAL)],
        "TensorShapeProto": [("dim", 1, F.TYPE_MESSAGE, "Dimension", F.LABEL_REPEATED)],
        "TensorTypeProto": [("elem_type", 1, F.TYPE_INT32, None, F.LABEL_OPTIONAL),
                            ("shape", 2, F.TYPE_MESSAGE, "TensorShapeProto", F.LABEL_OPTIONAL)],
        "TypeProto": [("tensor_type", 1, F.TYPE_MESSAGE, "TensorTypeProto", F.LABEL_OPTIONAL)],
        "ValueInfoProto": [("name", 1, F.TYPE_STRING, None, F.LABEL_OPTIONAL),
                           ("type", 2, F.TYPE_MESSAGE, "TypeProto", F.LABEL_OPTIONAL)],
        "GraphProto": [("input", 11, F.TYPE_MESSAGE, "ValueInfoProto", F.LABEL_REPEATED),
                       ("output", 12, F.TYPE_MESSAGE, "ValueInfoProto", F.LABEL_REPEATED),
                       ("value_info", 13, F.TYPE_MESSAGE, "ValueInfoProto", F.LABEL_REPEATED)],
        "ModelProto": [("graph", 7, F.TYPE_MESSAGE, "GraphProto", F.LABEL_OPTIONAL)],
    }
    proto = descriptor_pb2.FileDescriptorProto(name="nfnet_onnx_subset.proto", package="nfnet_onnx_subset",
                                               syntax="proto2")
    for name, fields in messages.items():
        message = proto.message_type.add(name=name)
        for field, number, kind, type_name, label in fields:
            entry = message.field.add(name=field, number=number, type=kind, label=label)
            if type_name:
                entry.type_name = f".nfnet_onnx_subset.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("nfnet_onnx_subset.ModelProto"))


def make_batch_dynamic(path):
    """Rewrite the ONNX file at `path`: first dimension of every graph input and output -> "batch"."""
    model_class = _onnx_schema()
    model = model_class()
    with open(path, "rb") as f:
        model.ParseFromString(f.read())
    for value in list(model.graph.input) + list(model.graph.output):
        dims = value.type.tensor_type.shape.dim
        if len(dims):
            dims[0].ClearField("dim_value")
            dims[0].dim_param = BATCH_DIM
    del model.graph.value_info[:]
    write_atomic(path, model.SerializeToString())
