"""Convert a timm dm_nfnet_f* checkpoint into a MindSpore .ckpt.

    python -m src.tools.convert_weights INPUT OUTPUT [--arch dm_nfnet_f0]

INPUT is a timm state dict as published on the timm hub (model.safetensors) or a
PyTorch .pth/.bin (read with torch when it is installed). The project's models use
timm's parameter names and shapes (PyTorch OIHW convs, (out, in) linear), so the
conversion is a 1:1 copy checked name by name and shape by shape. The architecture is
inferred from the stage depths and widths unless --arch is given.

The output also carries timm's pretrained evaluation settings for the variant (test size,
crop_pct, squash crop, bicubic, mean/std; src/data/data_settings.py), which eval.py,
preprocess.py, export.py and predict.py then use unless told otherwise on the command line.
"""
import argparse
import json
import os
import re
import struct
import sys

import numpy as np

from src.atomic import atomic_path
from src.errors import UserError

_SAFETENSORS_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}
_WRAPPER_KEYS = ("state_dict_ema", "model_ema", "state_dict", "model")


class ConversionError(UserError):
    """The input is not a checkpoint of a known NFNet; the message says what does not fit."""


def read_safetensors(path):
    """name -> numpy array of a .safetensors file, without torch (bfloat16 widened to float32).

    Layout: 8-byte little-endian header length, a JSON header {name: {dtype, shape,
    data_offsets}}, then the raw little-endian tensor bytes.
    """
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ConversionError(f"{path} is not a safetensors file (too short)")
    (header_len,) = struct.unpack("<Q", raw[:8])
    try:
        header = json.loads(raw[8:8 + header_len])
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ConversionError(f"{path} is not a safetensors file (unreadable header)") from None
    data = memoryview(raw)[8 + header_len:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        dtype, shape = info["dtype"], tuple(info["shape"])
        if dtype == "BF16":
            bits = np.frombuffer(data[start:end], dtype="<u2").astype(np.uint32) << 16
            array = bits.view(np.float32)
        elif dtype in _SAFETENSORS_DTYPES:
            array = np.frombuffer(data[start:end], dtype=np.dtype(_SAFETENSORS_DTYPES[dtype]).newbyteorder("<"))
        else:
            raise ConversionError(f"{path}: tensor {name} has unsupported dtype {dtype}")
        tensors[name] = array.reshape(shape).copy()
    return tensors


def read_torch_checkpoint(path):
    """name -> numpy array of a PyTorch .pth/.bin state dict (needs torch)."""
    try:
        import torch
    except ImportError:
        raise ConversionError(f"{path}: reading PyTorch checkpoints needs torch; "
                              "convert it to .safetensors or install torch") from None
    obj = torch.load(path, map_location="cpu", weights_only=True)
    for key in _WRAPPER_KEYS:
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
            break
    if not isinstance(obj, dict):
        raise ConversionError(f"{path} does not hold a state dict")
    return {k: v.detach().float().numpy() for k, v in obj.items() if hasattr(v, "detach")}


def read_timm_state_dict(path):
    if not os.path.isfile(path):
        raise ConversionError(f"input not found: {path}")
    if path.endswith(".safetensors"):
        state = read_safetensors(path)
    else:
        state = read_torch_checkpoint(path)
    return {re.sub(r"^module\.", "", k): v for k, v in state.items()}


def infer_arch(state):
    """The registered variant whose depths and widths match the state dict's."""
    from src.models import MODEL_CFGS

    depths = [0, 0, 0, 0]
    for name in state:
        m = re.match(r"stages\.(\d+)\.(\d+)\.", name)
        if m and int(m.group(1)) < 4:
            depths[int(m.group(1))] = max(depths[int(m.group(1))], int(m.group(2)) + 1)
    widths = [state.get(f"stages.{i}.0.conv3.weight", np.zeros((0,))).shape[:1] for i in range(4)]
    widths = tuple(w[0] if w else 0 for w in widths)
    for name, cfg in MODEL_CFGS.items():
        if tuple(cfg.depths) == tuple(depths) and tuple(cfg.channels) == widths:
            return name
    raise ConversionError(f"no known NFNet has stage depths {tuple(depths)} and widths {widths}")


def convert_state_dict(state, arch=None):
    """Check `state` against the MindSpore network and return (arch, num_classes, {name: float32 array})."""
    from src.models import create_model

    arch = arch or infer_arch(state)
    if "head.fc.weight" not in state:
        raise ConversionError("the checkpoint has no classifier head.fc.weight")
    num_classes = int(state["head.fc.weight"].shape[0])
    network = create_model(arch, num_classes=num_classes)
    expected = {name: tuple(p.shape) for name, p in network.parameters_and_names()}
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    misshaped = sorted(n for n in set(expected) & set(state)
                       if tuple(np.shape(state[n])) != expected[n])
    if missing or unexpected or misshaped:
        parts = [f"{label}: {', '.join(names[:6])}{' ...' if len(names) > 6 else ''}"
                 for label, names in (("missing", missing), ("unexpected", unexpected), ("mis-shaped", misshaped))
                 if names]
        raise ConversionError(f"checkpoint does not match {arch}: " + "; ".join(parts))
    return arch, num_classes, {n: np.asarray(state[n], dtype=np.float32).reshape(expected[n]) for n in expected}


def save_checkpoint(weights, path, append_dict=None):
    """Write {name: array} (+ append_dict entries) as a MindSpore checkpoint, atomically (temporary file, then rename)."""
    import mindspore as ms

    with atomic_path(path) as tmp:  # keeps path's .ckpt: save_checkpoint appends ".ckpt" to other names
        ms.save_checkpoint([{"name": n, "data": ms.Tensor(a)} for n, a in weights.items()], tmp,
                           append_dict=append_dict)


def convert(input_path, output_path, arch=None):
    """Convert; returns (arch, num_classes, tensor count). The output carries timm_pretrained_settings(arch)."""
    from src.data.data_settings import checkpoint_entry, timm_pretrained_settings

    arch, num_classes, weights = convert_state_dict(read_timm_state_dict(input_path), arch)
    record = timm_pretrained_settings(arch, num_classes)
    save_checkpoint(weights, output_path, checkpoint_entry(record) if record else None)
    return arch, num_classes, len(weights)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m src.tools.convert_weights", description=__doc__.split("\n")[0])
    parser.add_argument("input", help="timm checkpoint: .safetensors, or .pth/.bin with torch installed")
    parser.add_argument("output", help="MindSpore .ckpt to write")
    parser.add_argument("--arch", default=None, help="variant name (inferred when omitted)")
    args = parser.parse_args(argv)
    if not args.output.endswith(".ckpt"):
        parser.error(f"output must end with .ckpt: {args.output}")
    if os.path.exists(args.output):
        parser.error(f"output exists, not overwriting: {args.output}")
    try:
        arch, num_classes, count = convert(args.input, args.output, args.arch)
    except (ConversionError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.output}: {arch}, {num_classes} classes, {count} tensors")
    from src.data.data_settings import apply_settings, describe_transform, timm_pretrained_settings

    record = timm_pretrained_settings(arch, num_classes)
    if record:
        from src.config import load_config

        cfg, _ = apply_settings(load_config(), record)
        print(f"evaluation settings ({record['source']}): {describe_transform(cfg, record)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
