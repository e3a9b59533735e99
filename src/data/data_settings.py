"""The data settings a checkpoint carries, so evaluation and deployment agree with training.

A checkpoint written by train.py, or converted from timm by tools/convert_weights.py,
holds one extra entry, ``data_settings``: JSON text with

    arch, num_classes         the network the weights belong to
    ws_form, gelu_form        the arithmetic the weights were trained with (src/models/layers:
                              timm's, or DeepMind's for DeepMind's weights and recipe)
    classes                   class names in label order (the training folders), or null
    input_size                training crop side (informative)
    test_input_size, crop_pct, eval_crop_mode, interpolation, mean, std
                              the evaluation transform (src.data.transforms.create_eval_transform)
    source                    where the values come from ("config of the training run",
                              "timm pretrained cfg dm_nfnet_f0.dm_in1k")

eval.py, preprocess.py, export.py and predict.py read it and use these values in place of
their config's (a YAML given with --config included): only a ``--key value`` on the
command line overrides a value the checkpoint carries. export.py writes the same record
next to the model (``<model file>.json``) for predict.py.

No MindSpore at import time: the entry points apply the record before their heavy imports.
"""
import json
import os

from src.atomic import write_json
from src.checkpoint_file import SETTINGS_KEY, read_text_entry
from src.errors import UserError

from .transforms import IMAGENET_MEAN, IMAGENET_STD

RECORD_KEY = SETTINGS_KEY  # the checkpoint entry that holds the record (src/checkpoint_file.py)
# the config keys of the evaluation transform, then the network's; a record sets these in a Config
TRANSFORM_KEYS = ("test_input_size", "crop_pct", "eval_crop_mode", "interpolation")
MODEL_KEYS = ("arch", "num_classes", "ws_form", "gelu_form")

# timm's pretrained configs of its dm_nfnet_f* weights (timm/models/nfnet.py, default_cfgs
# 'dm_nfnet_fN.dm_in1k', timm 1.0): train size, test size, crop_pct, all with
# crop_mode='squash', interpolation 'bicubic' and ImageNet's mean/std. For F0 the eval
# transform is resize to floor(256 / 0.9) = 284 (both sides), center crop 256.
_TIMM_SIZES = {
    "dm_nfnet_f0": (192, 256, 0.9),
    "dm_nfnet_f1": (224, 320, 0.91),
    "dm_nfnet_f2": (256, 352, 0.92),
    "dm_nfnet_f3": (320, 416, 0.94),
    "dm_nfnet_f4": (384, 512, 0.951),
    "dm_nfnet_f5": (416, 544, 0.954),
    "dm_nfnet_f6": (448, 576, 0.956),
}


def timm_pretrained_settings(arch, num_classes=1000):
    """The record of a checkpoint converted from timm's `arch` weights, or None for an arch timm lacks."""
    if arch not in _TIMM_SIZES:
        return None
    train_size, test_size, crop_pct = _TIMM_SIZES[arch]
    return dict(arch=arch, num_classes=int(num_classes), classes=None, input_size=train_size,
                test_input_size=test_size, crop_pct=crop_pct, eval_crop_mode="squash", interpolation="bicubic",
                mean=list(IMAGENET_MEAN), std=list(IMAGENET_STD), ws_form="timm", gelu_form="exact",
                source=f"timm pretrained cfg {arch}.dm_in1k")


def settings_from_config(cfg, classes=None, source="config of the training run"):
    """The record of a run with config `cfg` trained on `classes` (folder names in label order)."""
    record = {key: getattr(cfg, key) for key in MODEL_KEYS + TRANSFORM_KEYS}
    record.update(classes=list(classes) if classes is not None else None, input_size=cfg.input_size,
                  mean=list(IMAGENET_MEAN), std=list(IMAGENET_STD), source=source)
    return record


def effective_settings(cfg, record=None):
    """The record of what is used now: `cfg`'s values (a checkpoint's applied, command line over them),
    the checkpoint's classes and mean/std (export.py writes this next to the model)."""
    record = record or {}
    out = settings_from_config(cfg, record.get("classes"), source=record.get("source", "config"))
    mean, std = normalization(record)
    out.update(mean=list(mean), std=list(std), input_size=record.get("input_size", cfg.input_size))
    return out


def checkpoint_entry(record):
    """{RECORD_KEY: JSON text}, for MindSpore's save_checkpoint(append_dict=...)."""
    return {RECORD_KEY: json.dumps(record, sort_keys=True)}


def _check(record, where):
    if not isinstance(record, dict) or not all(k in record for k in TRANSFORM_KEYS):
        raise UserError(f"{where}: the data settings are not readable (expected {', '.join(TRANSFORM_KEYS)})")
    return record


def read_checkpoint_settings(path):
    """The record carried by the checkpoint at `path`, or None (older checkpoints, foreign or unreadable
    files: those are reported with one line when the weights are loaded). Reads without MindSpore."""
    try:
        text = read_text_entry(path, RECORD_KEY)
    except OSError:
        return None
    if text is None:
        return None
    try:
        return _check(json.loads(text), path)
    except json.JSONDecodeError:
        raise UserError(f"{path}: its {RECORD_KEY} entry is not JSON") from None


def sidecar_path(model_path):
    """Where export.py writes the record of an exported model: `<model file>.json`."""
    return model_path + ".json"


def write_sidecar(model_path, record):
    path = sidecar_path(model_path)
    write_json(path, record)
    return path


def read_sidecar(model_path):
    """The record next to an exported model, or None."""
    path = sidecar_path(model_path)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return _check(json.load(f), path)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"{path}: not a readable data-settings file ({exc})") from None


def apply_settings(cfg, record, explicit=(), keys=MODEL_KEYS + TRANSFORM_KEYS):
    """(cfg with the record's `keys` except those in `explicit`, {key: (config value, record value)} changed).

    `explicit` holds the keys given on the command line: they win over the record.
    """
    if not record:
        return cfg, {}
    changes = {}
    for key in keys:
        value = record.get(key)
        if key in explicit or value is None or value == getattr(cfg, key):
            continue
        changes[key] = value
    if not changes:
        return cfg, {}
    replace = dict(changes)
    if "crop_pct" in replace or "eval_crop_mode" in replace:  # they are checked together
        replace.setdefault("crop_pct", record.get("crop_pct", cfg.crop_pct))
        replace.setdefault("eval_crop_mode", record.get("eval_crop_mode", cfg.eval_crop_mode))
    return cfg.replace(**replace), {key: (getattr(cfg, key), value) for key, value in changes.items()}


def normalization(record):
    """(mean, std) of the record, ImageNet's when it has none."""
    record = record or {}
    return tuple(record.get("mean") or IMAGENET_MEAN), tuple(record.get("std") or IMAGENET_STD)


def describe_transform(cfg, record=None):
    """'resize 284x284, center crop 256, bicubic, mean (...) std (...)': the eval transform, for the log."""
    from .transforms import eval_resize_size

    size = eval_resize_size(cfg.test_input_size, cfg.crop_pct, cfg.eval_crop_mode)
    resize = f"resize shorter side {size}" if cfg.eval_crop_mode == "shorter" else f"resize {size}x{size}"
    mean, std = normalization(record)
    return (f"{resize}, center crop {cfg.test_input_size}, {cfg.interpolation}, "
            f"mean {_fmt(mean)} std {_fmt(std)}")


def _fmt(values):
    return "(" + ", ".join(f"{v:g}" for v in values) + ")"


def applied_note(changes, origin):
    """One line telling which settings came from `origin` instead of the config, or ''."""
    if not changes:
        return ""
    parts = ", ".join(f"{key} {new}" for key, (_, new) in changes.items())
    return f"using the data settings of {origin}: {parts} (a --key on the command line overrides them)"
