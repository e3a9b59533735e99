"""Reading and writing the parts of an ONNX file this project edits, without the `onnx` package.

The message classes are built from a schema of only the fields the edits touch, with onnx.proto's
field numbers (https://github.com/onnx/onnx/blob/main/onnx/onnx.proto): ModelProto.graph = 7;
GraphProto.node = 1, initializer = 5, input = 11, output = 12, value_info = 13; NodeProto.input = 1,
output = 2, name = 3, op_type = 4, attribute = 5; AttributeProto.name = 1, i = 3, t = 5;
TensorProto.dims = 1, data_type = 2, float_data = 4 (packed), name = 8, raw_data = 9;
ValueInfoProto.name = 1, type = 2; TypeProto.tensor_type = 1; TypeProto.Tensor.elem_type = 1,
shape = 2; TensorShapeProto.dim = 1; Dimension.dim_value = 1, dim_param = 2. Protobuf keeps every
other field as an unknown field and writes it back unchanged.
"""
import functools

from src.atomic import write_atomic

FLOAT = 1  # TensorProto.DataType.FLOAT


@functools.lru_cache(maxsize=None)
def model_class():
    """The ModelProto message class of the subset schema."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    one, many = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    messages = {
        "Dimension": [("dim_value", 1, F.TYPE_INT64, None, one), ("dim_param", 2, F.TYPE_STRING, None, one)],
        "TensorShapeProto": [("dim", 1, F.TYPE_MESSAGE, "Dimension", many)],
        "TensorTypeProto": [("elem_type", 1, F.TYPE_INT32, None, one),
                            ("shape", 2, F.TYPE_MESSAGE, "TensorShapeProto", one)],
        "TypeProto": [("tensor_type", 1, F.TYPE_MESSAGE, "TensorTypeProto", one)],
        "ValueInfoProto": [("name", 1, F.TYPE_STRING, None, one), ("type", 2, F.TYPE_MESSAGE, "TypeProto", one)],
        "TensorProto": [("dims", 1, F.TYPE_INT64, None, many), ("data_type", 2, F.TYPE_INT32, None, one),
                        ("float_data", 4, F.TYPE_FLOAT, None, many), ("name", 8, F.TYPE_STRING, None, one),
                        ("raw_data", 9, F.TYPE_BYTES, None, one)],
        "AttributeProto": [("name", 1, F.TYPE_STRING, None, one), ("i", 3, F.TYPE_INT64, None, one),
                           ("t", 5, F.TYPE_MESSAGE, "TensorProto", one)],
        "NodeProto": [("input", 1, F.TYPE_STRING, None, many), ("output", 2, F.TYPE_STRING, None, many),
                      ("name", 3, F.TYPE_STRING, None, one), ("op_type", 4, F.TYPE_STRING, None, one),
                      ("attribute", 5, F.TYPE_MESSAGE, "AttributeProto", many)],
        "GraphProto": [("node", 1, F.TYPE_MESSAGE, "NodeProto", many),
                       ("initializer", 5, F.TYPE_MESSAGE, "TensorProto", many),
                       ("input", 11, F.TYPE_MESSAGE, "ValueInfoProto", many),
                       ("output", 12, F.TYPE_MESSAGE, "ValueInfoProto", many),
                       ("value_info", 13, F.TYPE_MESSAGE, "ValueInfoProto", many)],
        "ModelProto": [("graph", 7, F.TYPE_MESSAGE, "GraphProto", one)],
    }
    proto = descriptor_pb2.FileDescriptorProto(name="nfnet_onnx_subset.proto", package="nfnet_onnx_subset",
                                               syntax="proto2")
    for name, fields in messages.items():
        message = proto.message_type.add(name=name)
        for field, number, kind, type_name, label in fields:
            entry = message.field.add(name=field, number=number, type=kind, label=label)
            if kind == F.TYPE_FLOAT and label == many:
                entry.options.packed = True  # as onnx.proto declares float_data
            if type_name:
                entry.type_name = f".nfnet_onnx_subset.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("nfnet_onnx_subset.ModelProto"))


def read_model(path):
    model = model_class()()
    with open(path, "rb") as f:
        model.ParseFromString(f.read())
    return model


def write_model(path, model):
    write_atomic(path, model.SerializeToString())
