"""Convert a timm dm_nfnet_f* checkpoint or DeepMind's haiku release into a MindSpore .ckpt.

    python -m tools.convert_weights INPUT OUTPUT [--arch dm_nfnet_f0] [--overwrite]

INPUT is one of
- a timm state dict as published on the timm hub (model.safetensors) or a PyTorch .pth/.bin
  (read with torch's weights_only loader when torch is installed). The project's models use
  timm's parameter names and shapes (PyTorch OIHW convs, (out, in) linear), so the conversion
  is a 1:1 copy checked name by name and shape by shape;
- DeepMind's own release, `F0_haiku.npz` ... (deepmind-research nfnets/, the weights timm's
  dm_nfnet_* were converted from): haiku's parameters {module: {name: array}} under nfnet.py's
  and base.py's names (`NFNet/~/stem_conv0/w`, `NFNet/~/nf_block_3/~/conv1b/gain`, HWIO kernels,
  (in, out) linear weights), as a pickle (how DeepMind wrote it: read with a loader that builds
  NumPy arrays and plain containers only, so nothing in the file is run) or a NumPy .npz archive
  with those names as keys. See deepmind_to_ours for the mapping.

The architecture is inferred from the stage depths and widths unless --arch is given.

The output also carries the source's evaluation settings and model forms (src/data/data_settings.py):
timm's pretrained cfg for a timm checkpoint (test size, crop_pct, squash, bicubic, mean/std; timm's
weight standardization and exact GELU), DeepMind's for DeepMind's (test size + 32 squash then
center crop, bicubic; ws_form deepmind, gelu_form tanh: src/models/layers). eval.py, preprocess.py,
export.py and predict.py then use them unless told otherwise on the command line.

Every input is validated before use (header sizes, offsets, shapes, pickles) and every mistake is
one `error:` line naming the file, exit 2; an existing output is replaced only with --overwrite,
and never when it is the input.
"""
import argparse
import json
import math
import os
import pickle
import re
import struct
import sys
import zipfile

import numpy as np

from src.atomic import output_problem
from src.errors import UserError, one_line, run_cli

_SAFETENSORS_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}
_WRAPPER_KEYS = ("state_dict_ema", "model_ema", "state_dict", "model")
# a safetensors header is JSON text of a few hundred bytes per tensor; the format's own readers
# refuse headers above 100 MB (safetensors' MAX_HEADER_SIZE)
MAX_HEADER_BYTES = 100_000_000


class ConversionError(UserError):
    """The input is not a checkpoint of a known NFNet; the message says what does not fit."""


def _safetensors_header(path, size, f):
    """The validated JSON header of an open safetensors file of `size` bytes, and where its data starts."""
    if size < 8:
        raise ConversionError(f"{path} is not a safetensors file (too short: {size} bytes)")
    (header_len,) = struct.unpack("<Q", f.read(8))
    if header_len > min(size - 8, MAX_HEADER_BYTES):
        raise ConversionError(f"{path} is not a safetensors file: its header claims {header_len} bytes, "
                              f"the file has {size - 8} after the length field")
    try:
        header = json.loads(f.read(header_len))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ConversionError(f"{path} is not a safetensors file (unreadable header)") from None
    if not isinstance(header, dict):
        raise ConversionError(f"{path} is not a safetensors file: its header is a JSON {type(header).__name__}, "
                              f"not an object of tensors")
    return header, 8 + header_len


def _tensor_entry(path, name, info, data_size):
    """(dtype, shape, start, end) of one header entry, checked against the format and the file's size."""
    if not isinstance(info, dict):
        raise ConversionError(f"{path}: tensor {name} has no dtype/shape/data_offsets entry")
    missing = [key for key in ("dtype", "shape", "data_offsets") if key not in info]
    if missing:
        raise ConversionError(f"{path}: tensor {name} lacks {', '.join(missing)}")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if dtype != "BF16" and dtype not in _SAFETENSORS_DTYPES:
        raise ConversionError(f"{path}: tensor {name} has unsupported dtype {dtype}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                              for d in shape):
        raise ConversionError(f"{path}: tensor {name} has shape {shape!r}, not a list of sizes")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1]):
        raise ConversionError(f"{path}: tensor {name} has data_offsets {offsets!r}, not [start, end]")
    itemsize = 2 if dtype == "BF16" else np.dtype(_SAFETENSORS_DTYPES[dtype]).itemsize
    expected = math.prod(shape) * itemsize
    if offsets[1] - offsets[0] != expected:
        raise ConversionError(f"{path}: tensor {name} of shape {tuple(shape)} {dtype} needs {expected} bytes, "
                              f"its data_offsets span {offsets[1] - offsets[0]}")
    if offsets[1] > data_size:
        raise ConversionError(f"{path} is truncated: tensor {name} ends at byte {offsets[1]} of the data, "
                              f"the file holds {data_size}")
    return dtype, tuple(shape), offsets[0], offsets[1]


def read_safetensors(path):
    """name -> numpy array of a .safetensors file, without torch (bfloat16 widened to float32).

    Layout: 8-byte little-endian header length, a JSON header {name: {dtype, shape,
    data_offsets}}, then the raw little-endian tensor bytes. The header is checked whole (its
    length, each entry's fields, offsets against shapes and the file's size) before any data is read.
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        header, data_start = _safetensors_header(path, size, f)
        entries = {name: _tensor_entry(path, name, info, size - data_start)
                   for name, info in header.items() if name != "__metadata__"}
        data = f.read()
    tensors = {}
    for name, (dtype, shape, start, end) in entries.items():
        if dtype == "BF16":
            bits = np.frombuffer(data[start:end], dtype="<u2").astype(np.uint32) << 16
            array = bits.view(np.float32)
        else:
            array = np.frombuffer(data[start:end], dtype=np.dtype(_SAFETENSORS_DTYPES[dtype]).newbyteorder("<"))
        tensors[name] = array.reshape(shape).copy()
    return tensors


def read_torch_checkpoint(path):
    """name -> numpy array of a PyTorch .pth/.bin state dict (needs torch; weights_only, so nothing runs)."""
    if os.path.getsize(path) == 0:
        raise ConversionError(f"{path} is empty (0 bytes), not a PyTorch checkpoint")
    try:
        import torch
    except ImportError:
        raise ConversionError(f"{path}: reading PyTorch checkpoints needs torch; "
                              "convert it to .safetensors or install torch") from None
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        # PyTorch's message is several paragraphs (and advises weights_only=False); keep what it refused
        found = re.search(r"GLOBAL ([\w.]+)", str(exc))
        what = f" (it needs {found.group(1)})" if found else ""
        raise ConversionError(f"{path} holds more than tensors and plain containers, which torch's weights_only "
                              f"loader refuses{what}; nothing in it was run. Re-save its state_dict() "
                              "with torch.save, or as .safetensors") from None
    except (EOFError, RuntimeError, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConversionError(f"{path} is not a readable PyTorch checkpoint ({first[:200]})") from None
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


# ----- DeepMind's haiku release -----

DEEPMIND_ROOT = "NFNet/~/"
# NFBlock's modules (nfnet.py NFBlock.__init__) -> ours (timm's names)
_DM_BLOCK = {"conv0": "conv1", "conv1": "conv2", "conv1b": "conv2b", "conv2": "conv3",
             "conv_shortcut": "downsample.conv", "squeeze_excite/~/linear": "attn_last.fc1",
             "squeeze_excite/~/linear_1": "attn_last.fc2"}
_DM_PARAMS = {"w": "weight", "b": "bias", "bias": "bias", "gain": "gain"}


def _numpy_global(module, name):
    import importlib
    import warnings

    with warnings.catch_warnings():  # numpy 2 names numpy.core numpy._core and warns on the old name
        warnings.simplefilter("ignore", DeprecationWarning)
        for candidate in (module, module.replace("numpy.core", "numpy._core", 1)):
            try:
                return getattr(importlib.import_module(candidate), name)
            except (ImportError, AttributeError):
                continue
    raise AttributeError(name)


def _dill_create_array(f, args, state, npdict=None):
    """What dill's pickles of arrays call (dill._dill._create_array), for NumPy's reconstructors only."""
    if f is not _numpy_global("numpy.core.multiarray", "_reconstruct") or npdict:
        raise pickle.UnpicklingError("its arrays are built by something else than NumPy's _reconstruct")
    array = f(*args)
    array.__setstate__(state)
    return array


class _ArraysOnlyUnpickler(pickle.Unpickler):
    """Builds NumPy arrays, dtypes and plain containers only: a pickle naming anything else (a class
    or function whose call could run code) is refused before anything is built from it. DeepMind
    wrote its release with dill, whose arrays go through dill._dill._create_array: that one is
    answered by _dill_create_array, which calls nothing but NumPy's reconstructor."""

    _ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
                ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
                ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
                ("numpy", "ndarray"), ("numpy", "dtype"), ("collections", "OrderedDict"),
                ("dill._dill", "_create_array")}

    def find_class(self, module, name):
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"it needs {module}.{name}, which is not a NumPy array or a plain container")
        if module == "dill._dill":
            return _dill_create_array
        if module == "collections":
            import collections

            return collections.OrderedDict
        return _numpy_global(module, name)


def _flatten(tree, prefix=""):
    """{"a": {"b": x}} -> {"a/b": x} (haiku's {module: {param: array}} as one level)."""
    flat = {}
    for key, value in tree.items():
        name = f"{prefix}/{key}" if prefix else str(key)
        if isinstance(value, dict):
            flat.update(_flatten(value, name))
        else:
            flat[name] = value
    return flat


def read_deepmind_npz(path):
    """"module/param" -> numpy array of DeepMind's haiku release (pickle or NumPy .npz; module docstring)."""
    if not os.path.isfile(path):
        raise ConversionError(f"input not found: {path}")
    if os.path.getsize(path) == 0:
        raise ConversionError(f"{path} is empty (0 bytes), not DeepMind's weights")
    try:
        if zipfile.is_zipfile(path):
            with np.load(path, allow_pickle=False) as archive:
                flat = {name: archive[name] for name in archive.files}
        else:
            with open(path, "rb") as f:
                tree = _ArraysOnlyUnpickler(f).load()
            if not isinstance(tree, dict):
                raise ConversionError(f"{path} holds a {type(tree).__name__}, not haiku's parameters "
                                      "{module: {name: array}}")
            flat = _flatten(tree)
    except pickle.UnpicklingError as exc:
        raise ConversionError(f"{path} is not DeepMind's weights ({one_line(exc)[:200]}); nothing in it was run"
                              ) from None
    except (EOFError, ValueError, OSError, zipfile.BadZipFile) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConversionError(f"{path} is not a readable DeepMind .npz ({first[:200]})") from None
    bad = sorted(name for name, value in flat.items() if not isinstance(value, np.ndarray))
    if bad:
        raise ConversionError(f"{path}: {', '.join(bad[:3])} are not arrays")
    return flat


def _deepmind_block_index(module):
    """nf_block -> 0, nf_block_7 -> 7 (haiku numbers the second and later instances of a name)."""
    m = re.fullmatch(r"nf_block(?:_(\d+))?", module)
    return None if m is None else int(m.group(1) or 0)


def deepmind_block_count(flat):
    blocks = {_deepmind_block_index(name[len(DEEPMIND_ROOT):].split("/~/")[0]) for name in flat}
    return len(blocks - {None})


def deepmind_to_ours(flat, depths, path="input"):
    """DeepMind's haiku parameters -> our (timm's) names and layouts, for a network of stage `depths`.

    Modules (nfnet.py): stem_conv{i} -> stem.conv{i+1}; the k-th NFBlock (nf_block, nf_block_1, ...)
    -> stages.<s>.<b> in order; its conv0 / conv1 / conv1b / conv2 / conv_shortcut -> conv1 / conv2 /
    conv2b / conv3 / downsample.conv, squeeze_excite/~/linear{,_1} -> attn_last.fc1/fc2, skip_gain
    -> skipinit_gain; final_conv; linear -> head.fc. Layouts: WSConv2D's w is HWIO -> OIHW and its
    gain (O,) -> (O, 1, 1, 1); hk.Linear's w is (in, out) -> (out, in), 1x1 convs for the SE.
    """
    places = [(s, b) for s, depth in enumerate(depths) for b in range(depth)]
    state = {}
    for name, value in flat.items():
        if not name.startswith(DEEPMIND_ROOT):
            raise ConversionError(f"{path}: {name} is not a parameter of DeepMind's NFNet (names start {DEEPMIND_ROOT})")
        module, _, param = name[len(DEEPMIND_ROOT):].rpartition("/")
        top, _, inner = module.partition("/~/")
        block = _deepmind_block_index(top)
        if re.fullmatch(r"stem_conv\d", top) and not inner:
            ours = f"stem.conv{int(top[-1]) + 1}"
        elif top == "final_conv" and not inner:
            ours = "final_conv"
        elif top == "linear" and not inner:
            ours = "head.fc"
        elif block is not None and block < len(places) and (inner in _DM_BLOCK or (not inner and param == "skip_gain")):
            stage, index = places[block]
            ours = f"stages.{stage}.{index}" + (f".{_DM_BLOCK[inner]}" if inner else "")
        else:
            raise ConversionError(f"{path}: {name} has no place in a network of stage depths {tuple(depths)}")
        if param == "skip_gain":
            state[f"{ours}.skipinit_gain"] = np.asarray(value, np.float32).reshape(())
            continue
        if param not in _DM_PARAMS:
            raise ConversionError(f"{path}: {name}: unknown parameter {param!r}")
        value = np.asarray(value, np.float32)
        if param == "w" and value.ndim == 4:  # HWIO -> OIHW
            value = value.transpose(3, 2, 0, 1)
        elif param == "w" and value.ndim == 2:  # (in, out) -> (out, in); the SE's are 1x1 convs here
            value = value.T if ours == "head.fc" else value.T.reshape(value.shape[1], value.shape[0], 1, 1)
        elif param == "gain":
            value = value.reshape(-1, 1, 1, 1)
        state[f"{ours}.{_DM_PARAMS[param]}"] = np.ascontiguousarray(value)
    return state


def deepmind_pretrained_settings(arch, num_classes=1000):
    """The record of a checkpoint converted from DeepMind's release: DeepMind's evaluation (nfnets/
    experiment.py eval_preproc 'resize_crop_32': squash to test size + 32, center crop, bicubic;
    ImageNet mean/std, dataset.py) and model forms (base.py WSConv2D, jax.nn.gelu)."""
    from src.data.transforms import IMAGENET_MEAN, IMAGENET_STD
    from src.variants import VARIANTS

    v = VARIANTS[arch]
    return dict(arch=arch, num_classes=int(num_classes), classes=None, input_size=v.train_size,
                test_input_size=v.test_size, crop_pct=32, eval_crop_mode="pixels", interpolation="bicubic",
                mean=list(IMAGENET_MEAN), std=list(IMAGENET_STD), ws_form="deepmind", gelu_form="tanh",
                source=f"DeepMind nfnets release ({arch}, haiku weights)")


def convert_deepmind(flat, arch=None, path="input"):
    """(arch, num_classes, weights) of DeepMind's parameters `flat`, as convert_state_dict."""
    from src.models import MODEL_CFGS

    if arch:
        return convert_state_dict(deepmind_to_ours(flat, MODEL_CFGS[arch].depths, path), arch)
    count = deepmind_block_count(flat)
    candidates = [name for name, cfg in MODEL_CFGS.items() if sum(cfg.depths) == count]
    errors = []
    for name in candidates:
        try:
            state = deepmind_to_ours(flat, MODEL_CFGS[name].depths, path)
            return convert_state_dict(state, infer_arch(state))
        except ConversionError as exc:
            errors.append(str(exc))
    raise ConversionError(errors[0] if errors else f"{path}: no known NFNet has {count} blocks")


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


def is_deepmind_release(path):
    return path.endswith(".npz")


def check_paths(input_path, output_path, overwrite=False):
    """Refuse, in one line, an output that cannot or must not be written, before any reading."""
    if not os.path.isfile(input_path):
        raise ConversionError(f"input not found: {input_path}" if not os.path.exists(input_path)
                              else f"input is not a file: {input_path}")
    if not output_path.endswith(".ckpt"):
        raise ConversionError(f"output must end with .ckpt: {output_path}")
    problem = output_problem(output_path, [input_path], overwrite=overwrite)  # the entry points' one check
    if problem:
        raise ConversionError(f"output {output_path}: {problem}")


def convert(input_path, output_path, arch=None):
    """Convert; returns (arch, num_classes, tensor count, record). The output carries the record:
    timm_pretrained_settings(arch) for a timm checkpoint, deepmind_pretrained_settings for DeepMind's."""
    import mindspore as ms

    from src.checkpoint_file import OutputWriteError, save_checkpoint
    from src.data.data_settings import checkpoint_entry, timm_pretrained_settings

    if is_deepmind_release(input_path):
        arch, num_classes, weights = convert_deepmind(read_deepmind_npz(input_path), arch, input_path)
        record = deepmind_pretrained_settings(arch, num_classes)
    else:
        arch, num_classes, weights = convert_state_dict(read_timm_state_dict(input_path), arch)
        record = timm_pretrained_settings(arch, num_classes)
    try:
        save_checkpoint([{"name": n, "data": ms.Tensor(a)} for n, a in weights.items()], output_path,
                        checkpoint_entry(record) if record else None)  # the format's one writer (atomic)
    except OutputWriteError as exc:
        raise ConversionError(str(exc)) from None
    return arch, num_classes, len(weights), record


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tools.convert_weights", description=__doc__.split("\n")[0])
    parser.add_argument("input", help="timm checkpoint (.safetensors, or .pth/.bin with torch installed) "
                                      "or DeepMind's haiku release (.npz)")
    parser.add_argument("output", help="MindSpore .ckpt to write")
    parser.add_argument("--arch", default=None, help="variant name (inferred when omitted)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output (never the input)")
    args = parser.parse_args(argv)
    check_paths(args.input, args.output, args.overwrite)
    if args.arch is not None:
        from src.models import MODEL_CFGS

        if args.arch not in MODEL_CFGS:
            raise ConversionError(f"--arch {args.arch}: unknown; allowed: {', '.join(MODEL_CFGS)}")
    arch, num_classes, count, record = convert(args.input, args.output, args.arch)
    print(f"wrote {args.output}: {arch}, {num_classes} classes, {count} tensors")
    if record:
        from src.config import load_config
        from src.data.data_settings import apply_settings, describe_transform

        cfg, _ = apply_settings(load_config(), record)
        print(f"evaluation settings ({record['source']}): {describe_transform(cfg, record)}; "
              f"model forms: ws_form {record['ws_form']}, gelu_form {record['gelu_form']}")
    return 0


if __name__ == "__main__":
    run_cli(main)
