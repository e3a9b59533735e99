"""The .bin files exchanged by preprocess.py, the inference apps and postprocess.py.

A tensor .bin is the raw little-endian float32 bytes of one C-contiguous array, with no
header (what the Ascend C++ app reads into an MSTensor and writes back):

    <output_path>/images/<name>.bin     one model input, (batch, 3, H, W)
    <result_path>/<name>_0.bin          output 0 for that input: logits, (batch, classes)
    <output_path>/labels.json           {"<name>": class index}, or a list of indices for a
                                        batched file (the real images of it, in row order)
    <output_path>/sources.json          {"<name>": [source image paths]}, for tracing results back

No MindSpore here: postprocess.py must run wherever NumPy does.
"""
import json
import os

import numpy as np

from src.atomic import write_atomic, write_json  # noqa: F401 (write_json: re-export)

from .errors import DeployError

IMAGES_DIR = "images"
LABELS_FILE = "labels.json"
SOURCES_FILE = "sources.json"
RESULT_SUFFIX = "_0.bin"  # output index 0 of the model
DTYPE = np.dtype("<f4")


def bin_name(index, batch_size):
    """Name (without .bin) of the index-th input file: img_00000042, or batch_00000042 when batched."""
    return f"{'img' if batch_size == 1 else 'batch'}_{index:08d}"


def result_name(name):
    """File name of output 0 for input `name`, as the C++ app and infer_cpu write it."""
    return name + RESULT_SUFFIX


def write_tensor(path, array):
    """Save `array` as raw float32 (little-endian, C order); not fsynced (many files, cheap to remake)."""
    write_atomic(path, np.ascontiguousarray(array, dtype=DTYPE).tobytes(), durable=False)


def read_tensor(path, shape=None):
    """Load a raw float32 .bin; with `shape`, check the size and reshape (DeployError on a mismatch)."""
    size = os.path.getsize(path)
    if size % DTYPE.itemsize:
        raise DeployError(f"{path}: {size} bytes is not a whole number of float32 values")
    data = np.fromfile(path, dtype=DTYPE)
    if shape is None:
        return data
    expected = int(np.prod(shape))
    if data.size != expected:
        raise DeployError(f"{path}: holds {data.size} float32 values, expected {expected} for shape "
                          f"{tuple(shape)} ({expected * DTYPE.itemsize} bytes)")
    return data.reshape(shape)


def read_labels(path):
    """{name: [class indices]} from a labels.json (a bare index means a one-image file)."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except FileNotFoundError:
        raise DeployError(f"label file not found: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DeployError(f"{path}: not a readable JSON label file ({exc})") from None
    if not isinstance(raw, dict) or not raw:
        raise DeployError(f"{path}: expected a non-empty JSON object {{\"<bin name>\": class index}}")
    labels = {}
    for name, value in raw.items():
        values = value if isinstance(value, list) else [value]
        if not values or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
            raise DeployError(f"{path}: label of {name!r} must be a class index >= 0 or a list of them, "
                              f"got {value!r}")
        labels[name] = values
    return labels


def list_bins(directory, suffix=".bin"):
    """Sorted names of the `suffix` files in `directory` (DeployError if it is missing or has none)."""
    if not os.path.isdir(directory):
        raise DeployError(f"folder not found: {directory}")
    names = sorted(f for f in os.listdir(directory) if f.endswith(suffix) and not f.startswith("."))
    if not names:
        raise DeployError(f"no {suffix} files in {directory}")
    return names


def mindir_input_shape(path):
    """(shape, float32?) of input 0 of a MINDIR file, read from its protobuf like the C++ GetInputs()."""
    from mindspore.train import mind_ir_pb2  # the MINDIR schema ships with MindSpore

    model = mind_ir_pb2.ModelProto()
    try:
        with open(path, "rb") as f:
            model.ParseFromString(f.read())
    except FileNotFoundError:
        raise DeployError(f"MINDIR file not found: {path}") from None
    except Exception as exc:  # protobuf DecodeError and friends
        raise DeployError(f"{path} is not a readable MINDIR file ({type(exc).__name__})") from None
    inputs = list(model.graph.input)
    if len(inputs) != 1 or not inputs[0].tensor:
        raise DeployError(f"{path}: expected a graph with one input tensor, found {len(inputs)} inputs")
    tensor = inputs[0].tensor[0]
    return tuple(int(d) for d in tensor.dims), tensor.data_type == mind_ir_pb2.TensorProto.FLOAT
