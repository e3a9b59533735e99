"""The checkpoint file: its names, its entries, the one writer and the readers (MindSpore's .ckpt).

A checkpoint written by train.py holds every Parameter of the train cell (the network's
weights, the optimizer's moments and `global_step`, EMA weights under `EMA_PREFIX`, loss
scale, overflow counter, ...) plus a few metadata entries stored through MindSpore's
`append_dict`:

    epoch_num   epochs completed when the checkpoint was written (MindSpore's own name)
    step_num    train steps (Model.train steps) completed by then
    best_top1   best evaluation top-1 seen so far in the run (absent before the first eval)
    metric_*    the evaluation metrics of the best checkpoint (metric_top1, metric_loss, ...)
    epoch_step  train steps already run of the epoch after epoch_num (a mid-epoch checkpoint
                written when the run was stopped by a signal; 0 or absent otherwise)
    so_far_*    a mid-epoch checkpoint's sums of those steps (loss, steps, seconds: the callbacks'
                epoch_so_far), so that the resumed epoch's metrics row covers all its steps
    batch_size, device_num, accumulation_step, steps_per_epoch, epochs
                the run's shape (src/run/checkpointing.py: check_resume)
    data_settings  the run's classes and evaluation transform as JSON text
                (src/data/data_settings.py), read without MindSpore by `read_text_entry`

One converted from timm or DeepMind (tools/convert_weights.py) holds the network's weights
and `data_settings`, written by the same `save_checkpoint`.

File names in a run directory: `<prefix>-<epoch>_<step>.ckpt` (MindSpore's ModelCheckpoint
naming, `periodic_name`) and `<prefix>_best.ckpt` (`best_name`).

Files become visible only complete: `save_checkpoint` writes a hidden temporary file, fsyncs
it and renames it into place, so a kill -9 at any moment leaves either the previous file or the
new one, never a truncated file under a checkpoint's name. MindSpore is imported only by the
functions that need it, so eval.py reads the data settings before its heavy imports.
"""
import io
import os
import re

from src.atomic import atomic_path
from src.errors import UserError

# The EMA averages of the weights are stored as "ema." + the weight's name (src/trainers/ema.py).
EMA_PREFIX = "ema."
EPOCH_KEY, STEP_KEY, BEST_KEY, METRIC_PREFIX = "epoch_num", "step_num", "best_top1", "metric_"
SETTINGS_KEY = "data_settings"
EPOCH_STEP_KEY = "epoch_step"
SO_FAR_PREFIX = "so_far_"  # a mid-epoch checkpoint's sums of its epoch_step steps (src/run/callbacks.py)
# the run's shape, stored in every checkpoint of train.py
RUN_KEYS = ("batch_size", "device_num", "accumulation_step", "steps_per_epoch", "epochs")

# <prefix>-<epoch>_<step>.ckpt and <prefix>_best.ckpt; hidden names (temporaries) never match.
PERIODIC_NAME = re.compile(r"^(?P<prefix>[^.].*)-(?P<epoch>\d+)_(?P<step>\d+)\.ckpt$")
RUN_CHECKPOINT_NAME = re.compile(r"^(?P<prefix>[^.].*?)(-\d+_\d+|_best)\.ckpt$")


class CheckpointError(UserError):
    """A checkpoint that cannot be loaded into the network; the message names what does not fit."""


class OutputWriteError(UserError):
    """A file of the run could not be written (disk full, read-only, permission): one line naming
    the path and what was kept."""


def periodic_name(prefix, epoch, step):
    return f"{prefix}-{epoch}_{step}.ckpt"


def best_name(prefix):
    return f"{prefix}_best.ckpt"


def is_metadata(name):
    """True for the append_dict entries above (not a Parameter of the train cell)."""
    return (name in (EPOCH_KEY, STEP_KEY, BEST_KEY, EPOCH_STEP_KEY, SETTINGS_KEY, *RUN_KEYS)
            or name.startswith((METRIC_PREFIX, SO_FAR_PREFIX)))


def first_line(exc):
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# --------------------------------------------------------------------------- writing

def _metadata_tensors(append_dict):
    """append_dict with Python numbers as MindSpore accepts them.

    Floats become float64 tensors: MindSpore stores a plain Python float as float32,
    which would round a top-1 such as 0.8347 in its 8th digit.
    """
    import numpy as np
    from mindspore import Tensor

    out = {}
    for key, value in (append_dict or {}).items():
        if isinstance(value, (bool, np.bool_)):
            out[key] = bool(value)
        elif isinstance(value, (int, np.integer)):
            out[key] = int(value)
        elif isinstance(value, (float, np.floating)):
            out[key] = Tensor(np.float64(value))
        else:
            out[key] = value
    return out


def save_checkpoint(cell_or_param_list, path, append_dict=None):
    """Write a MindSpore checkpoint so that `path` only ever holds a complete file.

    MindSpore's save_checkpoint renames its own temporary file into place but neither
    fsyncs it nor keeps the old file until then (it deletes an existing target first), so
    a crash can lose both versions. Here the checkpoint is written under a hidden name in
    the same directory, fsynced, then moved over `path` with os.replace (atomic on POSIX)
    and the directory fsynced. The save is synchronous: async_save would let training
    change the parameters while they are written and would move the rename out of our
    hands. A CRC32 is stored so that loading with crc_check detects later corruption.

    Args:
        cell_or_param_list: an nn.Cell, or a list of {"name", "data"} dicts, or a dict,
            as mindspore.save_checkpoint accepts.
        path: target file; ".ckpt" is appended when missing, as MindSpore does.
        append_dict: extra str -> int/float/bool/str/Tensor entries (epoch, step, metrics).

    Returns:
        The final path.
    """
    import mindspore as ms

    path = os.path.abspath(path if path.endswith(".ckpt") else path + ".ckpt")
    try:
        # the temporary ends in .ckpt, so MindSpore neither renames it nor appends a suffix
        with atomic_path(path) as tmp:
            ms.save_checkpoint(cell_or_param_list, tmp, append_dict=_metadata_tensors(append_dict),
                               async_save=False, crc_check=True)
    except OSError as exc:
        raise OutputWriteError(f"cannot write {path}: {exc.strerror or first_line(exc)}") from None
    return path


# --------------------------------------------------------------------------- reading

def load(path, **kwargs):
    """ms.load_checkpoint (name -> Parameter or metadata) with one-line CheckpointErrors for
    missing, empty and unreadable files; a `choice_func` that keeps nothing gives {}."""
    import mindspore as ms

    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint not found: {path}")
    if os.path.getsize(path) == 0:
        raise CheckpointError(f"{path} is empty (0 bytes), not a checkpoint")
    try:
        return ms.load_checkpoint(path, **kwargs)
    except Exception as exc:  # MindSpore raises ValueError/RuntimeError with multi-line text
        if "empty after filter" in str(exc):
            return {}
        raise CheckpointError(f"{path} is not a readable MindSpore checkpoint ({first_line(exc)})") from None


def read_checkpoint(path):
    """name -> numpy array of a MindSpore .ckpt or .safetensors file (the metadata text left out)."""
    fmt = "safetensors" if path.endswith(".safetensors") else "ckpt"
    return {name: p.asnumpy() for name, p in load(path, format=fmt).items() if not isinstance(p, str)}


def _varint(f):
    value, shift = 0, 0
    while True:
        byte = f.read(1)
        if not byte:
            raise EOFError
        value |= (byte[0] & 0x7F) << shift
        if byte[0] < 0x80:
            return value
        shift += 7


def _fields(data):
    """(field number, wire type, value) of a small protobuf message held in `data` (bytes)."""
    f, end = io.BytesIO(data), len(data)
    while f.tell() < end:
        key = _varint(f)
        number, wire = key >> 3, key & 7
        if wire == 0:
            yield number, wire, _varint(f)
        elif wire == 2:
            yield number, wire, f.read(_varint(f))
        else:
            return


def read_text_entry(path, name):
    """The text stored under `name` by MindSpore's save_checkpoint(append_dict={name: str}), or None.

    MindSpore's .ckpt is a `Checkpoint` protobuf (mindspore/train/checkpoint.proto: repeated
    Value{1: tag, 2: TensorProto{1: dims, 2: tensor_type, 3: tensor_content}}), optionally
    followed by a "crc_num" trailer; a str entry is a TensorProto of type "str" whose content
    is NumPy's UCS-4 text. The walk seeks past every other entry, so eval.py reads a 300 MB
    checkpoint's settings in milliseconds and before importing MindSpore (its layout checks
    come first).
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        while f.tell() < size:
            try:
                if f.read(1) != b"\x0a":  # field 1, length-delimited: a Value; anything else ends the list
                    return None
                length = _varint(f)
                start = f.tell()
                if f.read(1) != b"\x0a":  # Value field 1: its tag comes first
                    return None
                tag = f.read(_varint(f))
                if tag == name.encode():
                    f.seek(start)
                    value = dict((n, v) for n, _, v in _fields(f.read(length)))
                    tensor = dict((n, v) for n, _, v in _fields(value.get(2, b"")))
                    if tensor.get(2) != b"str":
                        return None
                    return tensor.get(3, b"").decode("utf-32-le").rstrip("\x00")
                f.seek(start + length)
            except (EOFError, UnicodeDecodeError):
                return None
    return None
