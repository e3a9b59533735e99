"""The project's one configuration loader: a typed schema, YAML defaults and CLI overrides.

Every setting a run can have is declared once in `GROUPS` below, with its type, its
default, its allowed values and a one-line description. A run's settings are resolved
in three layers, later layers winning:

    schema defaults  <  the YAML file given by --config  <  --<key> VALUE on the command line

Everything is checked (unknown keys, types, ranges, combinations) before any heavy
import, and every mistake is reported as a one-line `ConfigError` that names the file or
flag, the key, the bad value and what is allowed. `src.errors.run_cli` turns that into
`error: <message>` on stderr and exit code 2.

This module must stay light: it imports only the standard library, PyYAML and the two
standard-library-only modules below it (src/errors.py, src/variants.py), so that
`python train.py --bad_key 1` fails in a fraction of a second and `src` can be used as a
library without a command line.

Typical entry point::

    def main():
        args, cfg = parse_cli(description="Train NFNet.")
        ...

    if __name__ == "__main__":
        run_cli(main)  # from src.errors
"""
import argparse
import copy
import difflib
import math
import os
import re
import sys
from dataclasses import dataclass
from typing import Optional

import yaml

from src.atomic import write_atomic
from src.errors import ConfigError, UserError, one_line as _one_line  # noqa: F401 (UserError: re-export)
from src.variants import VARIANTS

# The arch names and F0's row come from the variant table (src/variants.py), which the
# model builds its networks from too; F0's row gives the schema's per-variant defaults.
ARCH_NAMES = tuple(VARIANTS)
_F0 = VARIANTS["dm_nfnet_f0"]


@dataclass(frozen=True)
class Field:
    """One config key: its type, default, allowed values and a one-line description.

    `type` is bool, int, float, str or list (then `item` is the element type). Ranges
    are inclusive unless `low_open`/`high_open`; for lists they apply to each element.
    """

    name: str
    type: type
    default: object
    help: str
    item: Optional[type] = None
    choices: tuple = ()
    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    high_open: bool = False
    nullable: bool = False
    length: Optional[int] = None
    pattern: Optional[str] = None
    pattern_example: str = ""


# Shorthands for the common ranges.
POSITIVE = dict(low=0, low_open=True)              # > 0
NON_NEGATIVE = dict(low=0)                         # >= 0
AT_LEAST_ONE = dict(low=1)                         # >= 1
PROBABILITY = dict(low=0, high=1)                  # [0, 1]
RATE = dict(low=0, high=1, high_open=True)         # [0, 1)
# Upper bounds for sizes that set memory or time (a typo such as 1e9 fails here, not in an allocation);
# every other integer by 2**32 - 1 (seeds are 32-bit; nothing here counts further).
MAX_PIXELS = 4096
MAX_BATCH = 65536
INT_LIMIT = 2 ** 32 - 1

# RandAugment in timm's syntax, "rand" then "-<letters><number>" parts (rand-m9-n2-mstd0.5-inc1),
# or in DeepMind's, "randaugment_<layers><magnitude 2 digits>" (nfnets: randaugment_415 = 4 x 15).
RAND_AUGMENT_PATTERN = r"rand(-[a-z]+\d+(\.\d+)?)*|randaugment_\d{3,}"

GROUPS = {
    "model": (
        Field("arch", str, "dm_nfnet_f0", "network name in the model registry", choices=ARCH_NAMES),
        Field("num_classes", int, 1000, "number of classes (size of the classifier)", low=1, high=1_000_000),
        Field("drop_rate", float, _F0.drop_rate, "dropout before the classifier", **RATE),
        Field("drop_path_rate", float, 0.25, "stochastic-depth rate of the deepest block", **RATE),
        Field("drop_path_mode", str, "deepmind",
              "deepmind: rate*i/N, no rescale; timm: linspace, rescaled by 1/keep",
              choices=("deepmind", "timm")),
        Field("ws_form", str, "timm",
              "weight standardization: timm (var + 1e-5) or deepmind (max(fan_in*var, 1e-4))",
              choices=("timm", "deepmind")),
        Field("gelu_form", str, "exact", "GELU: exact (erf, timm) or tanh (jax.nn.gelu, DeepMind)",
              choices=("exact", "tanh")),
        Field("pretrained", str, None, "checkpoint to start from (a converted timm .ckpt or a run's)",
              nullable=True),
        Field("finetune", bool, False, "drop a pretrained head whose class count differs"),
    ),
    "data": (
        Field("data_path", str, "data/imagenet", "dataset root: <data_path>/<split>/<class>/<image>"),
        Field("data_url", str, None,
              "seed's name for data_path; with enable_modelarts: the OBS URL to copy data from",
              nullable=True),
        Field("train_split", str, "train", "training sub-folder of data_path"),
        Field("val_split", str, "val", "validation sub-folder of data_path"),
        Field("num_parallel_workers", int, 16, "data-loading workers per process", low=1, high=256),
        Field("input_size", int, _F0.train_size, "training crop size in pixels", low=64, high=MAX_PIXELS),
        Field("test_input_size", int, _F0.test_size, "evaluation crop size in pixels", low=64, high=MAX_PIXELS),
        # pixels (the seed's form, DeepMind's eval): squash-resize to test_input_size + crop_pct,
        # then center crop. squash / shorter (timm's form): resize the whole image (squash) or
        # its shorter side to test_input_size / crop_pct, then center crop.
        Field("eval_crop_mode", str, "pixels",
              "how crop_pct is read: pixels, or a fraction (squash/shorter)", choices=("pixels", "squash", "shorter")),
        Field("crop_pct", float, 32,
              "pixels mode: integer pixels added before the center crop; else a fraction in (0, 1]",
              low=0, high=MAX_PIXELS),
        Field("interpolation", str, "bicubic", "resize interpolation (train and eval)",
              choices=("bicubic", "bilinear", "nearest", "random")),
        Field("eval_batch_size", int, None, "evaluation batch size per process (null: batch_size)",
              nullable=True, low=1, high=MAX_BATCH),
    ),
    "augmentation": (
        Field("auto_augment", str, "rand-m5-n4-mstd0.5-inc1",
              "RandAugment: timm's rand-m<M>-n<N>-... or DeepMind's randaugment_<N><MM>; null: off",
              nullable=True, pattern=RAND_AUGMENT_PATTERN,
              pattern_example="rand-m9-n2-mstd0.5-inc1' or 'randaugment_415"),
        Field("scale", list, [0.08, 1.0], "random-resized-crop area range, as fractions of the image",
              item=float, length=2, low=0, high=1, low_open=True),
        Field("ratio", list, [0.75, 1.3333333333333333], "random-resized-crop aspect-ratio range",
              item=float, length=2, **POSITIVE),
        # timm: RandomResizedCrop. deepmind (nfnets/dataset.py _decode_and_random_crop): TensorFlow's
        # sample_distorted_bounding_box over scale/ratio (min_object_covered 0.1, 10 attempts), else a
        # center crop; then flip and resize. train_resize tf_bicubic: TensorFlow's bicubic (no antialias)
        # to unclamped floats, mixed as floats, clipped to uint8 only for RandAugment.
        Field("train_crop", str, "timm",
              "timm: random-resized-crop; deepmind: TF's sample_distorted_bounding_box + center-crop fallback",
              choices=("timm", "deepmind")),
        Field("train_resize", str, "pil",
              "pil: PIL resize to uint8; tf_bicubic: TF's bicubic to floats (train_crop and mix_scheme deepmind)",
              choices=("pil", "tf_bicubic")),
        Field("hflip", float, 0.5, "horizontal-flip probability", **PROBABILITY),
        Field("re_prob", float, 0.0, "random-erasing probability", **PROBABILITY),
        Field("re_mode", str, "pixel", "random-erasing fill", choices=("const", "rand", "pixel")),
        Field("re_count", int, 1, "random-erasing boxes per image", low=1, high=100),
        Field("mix_up", float, 0.8, "Mixup alpha (0: off)", **NON_NEGATIVE),
        Field("cutmix", float, 1.0, "CutMix alpha (0: off)", **NON_NEGATIVE),
        Field("mixup_prob", float, 1.0, "probability of mixing a batch", **PROBABILITY),
        Field("switch_prob", float, 0.5, "probability of CutMix instead of Mixup when both are on",
              **PROBABILITY),
        Field("mixup_mode", str, "batch", "one lambda per batch, per pair or per element",
              choices=("batch", "pair", "elem")),
        # timm: per-image RandAugment, then Mixup or CutMix of the batch with itself reversed.
        # deepmind (nfnets/dataset.py): each example mixes two images, Mixup on the first half of
        # the batch and CutMix on the second, then RandAugment (mixup_prob, switch_prob and
        # mixup_mode are not used).
        Field("mix_scheme", str, "timm",
              "timm: RandAugment, then Mixup/CutMix per batch; deepmind: per-example mix, then RandAugment",
              choices=("timm", "deepmind")),
    ),
    "optimization": (
        Field("optimizer", str, "sgd_agc", "sgd_agc: SGD + adaptive gradient clipping",
              choices=("sgd_agc", "momentum", "adamw")),
        Field("base_lr", float, 0.1, "lr for a global batch of lr_reference_batch images", **POSITIVE),
        Field("lr_reference_batch", int, 256, "peak lr = base_lr * global batch / this", **AT_LEAST_ONE),
        Field("momentum", float, 0.9, "SGD momentum (sgd_agc, momentum)", **RATE),
        Field("use_nesterov", bool, True, "Nesterov momentum (needs momentum > 0)"),
        Field("weight_decay", float, 2e-5, "L2 weight decay, added after clipping", **NON_NEGATIVE),
        Field("clipping", float, 0.01, "AGC threshold; the paper uses larger values for small batches",
              **POSITIVE),
        Field("eps", float, 1e-3, "AGC floor on the parameter norm", **POSITIVE),
        Field("agc_exclude", list, ["head.fc.weight"],
              "parameters whose name contains one of these are not clipped", item=str),
        Field("no_decay", list, ["gain", "bias"],
              "parameters whose name contains one of these get no weight decay", item=str),
        Field("adamw_betas", list, [0.9, 0.999], "AdamW beta1, beta2", item=float, length=2, **RATE),
        Field("accumulation_step", int, 1, "micro-batches per optimizer step (gradients averaged)",
              **AT_LEAST_ONE),
    ),
    "schedule": (
        Field("lr_scheduler", str, "warmup_cosine", "per-step lr schedule after the warmup",
              choices=("warmup_cosine", "multistep", "exponential", "constant")),
        Field("epochs", int, 360, "training epochs (warmup included)", low=1, high=100_000),
        Field("warmup_length", int, 5, "linear-warmup epochs", **NON_NEGATIVE),
        Field("warmup_lr", float, 7e-7, "lr at the first warmup step", **NON_NEGATIVE),
        Field("min_lr", float, 6e-7, "lr at the end of the cosine", **NON_NEGATIVE),
        Field("lr_milestones", list, [], "multistep: epochs at which lr is multiplied by lr_gamma",
              item=int, **AT_LEAST_ONE),
        Field("lr_gamma", float, 0.1, "multistep: factor per milestone; exponential: factor per epoch",
              low=0, low_open=True, high=1),
    ),
    "loss": (
        Field("label_smoothing", float, 0.1, "label smoothing (folded into mixed targets)", **RATE),
    ),
    "amp": (
        Field("amp_level", str, "O2", "mindspore.amp level (O0: float32)",
              choices=("O0", "O1", "O2", "O3")),
        Field("amp_dtype", str, "float16", "low-precision type of O1-O3 (bfloat16: Ascend 910B and later)",
              choices=("float16", "bfloat16")),
        Field("is_dynamic_loss_scale", bool, True, "dynamic loss scale (overflow steps skipped)"),
        Field("loss_scale", float, 1024, "fixed loss scale, or the initial dynamic one", low=1, high=2 ** 24),
        Field("loss_scale_factor", float, 2, "dynamic: scale change on overflow / after a window",
              low=1, low_open=True),
        Field("loss_scale_window", int, 1000, "dynamic: finite steps before the scale grows",
              **AT_LEAST_ONE),
    ),
    "ema": (
        Field("ema", bool, True, "keep an exponential moving average of the weights"),
        Field("ema_decay", float, 0.99999, "EMA decay", **RATE),
        Field("ema_warmup", bool, True, "DeepMind's warm-up: decay_t = min(decay, (1+t)/(10+t))"),
        Field("use_ema", bool, True, "evaluate and export the EMA weights when present"),
    ),
    "training loop": (
        Field("trainer", str, "model", "model: mindspore Model.train; functional: value_and_grad loop",
              choices=("model", "functional")),
        Field("batch_size", int, 128, "training batch size per device", low=1, high=MAX_BATCH),
        Field("eval_while_train", bool, True, "evaluate during training (needed for the best checkpoint)"),
        Field("eval_interval", int, 1, "epochs between evaluations", **AT_LEAST_ONE),
        Field("log_interval", int, 100, "steps between progress lines", **AT_LEAST_ONE),
        Field("dataset_sink_mode", bool, False, "Model.train sink mode (Ascend/GPU)"),
    ),
    "checkpoints": (
        Field("output_dir", str, "output/dm_nfnet_f0",
              "run directory: checkpoints, logs, metrics, curves, config.yaml"),
        Field("overwrite_output", bool, False, "allow a new run in a non-empty output_dir"),
        Field("resume", str, None, "'auto' (latest in output_dir) or a checkpoint path", nullable=True),
        Field("save_every_epochs", int, 1, "epochs between checkpoints", **AT_LEAST_ONE),
        Field("keep_checkpoint_max", int, 10, "periodic checkpoints kept (the best is kept apart)",
              **AT_LEAST_ONE),
    ),
    "distributed": (
        Field("distribute", bool, False, "data parallel; also detected from the launcher"),
        Field("cluster_timeout", int, 600,
              "seconds before ranks give up on a dead rank (the msrun launcher uses the same value)",
              low=1, high=7 * 24 * 3600),
        Field("enable_modelarts", bool, False, "copy data from data_url and results to train_url"),
        Field("train_url", str, None, "ModelArts: OBS URL for the results", nullable=True),
    ),
    "reliability": (
        Field("strict_data", bool, False, "fail on the first unreadable image instead of skipping"),
        Field("max_nonfinite_steps", int, 5, "stop after this many consecutive non-finite losses",
              **AT_LEAST_ONE),
    ),
    "export": (
        Field("file_format", str, "MINDIR", "export format", choices=("MINDIR", "AIR", "ONNX")),
        Field("file_name", str, None, "export file name without extension (null: arch)", nullable=True),
        Field("export_batch_size", int, 1, "batch size of the exported graph", low=1, high=MAX_BATCH),
    ),
    "system": (
        Field("device_target", str, "Ascend", "backend", choices=("CPU", "GPU", "Ascend")),
        Field("device_id", int, 0, "device index on this machine", low=0, high=4095),
        Field("mode", str, "graph", "execution mode", choices=("graph", "pynative")),
        Field("seed", int, 0, "random seed (weights, data order, augmentation)", low=0, high=2 ** 32 - 1),
        Field("deterministic", bool, False, "deterministic kernels (slower; for exact resume checks)"),
    ),
}

SCHEMA = {f.name: f for fields in GROUPS.values() for f in fields}

# Spellings of "nothing" accepted for nullable keys, in YAML and on the command line.
_NULL_WORDS = {"", "~", "null", "Null", "NULL", "none", "None"}
# YAML 1.1 reads 2e-5 (no dot) as text; for float keys we read such text as the number.
_EXPONENT_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")
_CLI = "command line"


# --------------------------------------------------------------------------- the Config object

class Config:
    """Resolved settings with attribute access (`cfg.base_lr`); read-only.

    Use `cfg.replace(key=value)` for a changed copy (validated like any other layer) and
    `cfg.to_dict()` for a plain dict in schema order.
    """

    __slots__ = ("_values",)

    def __init__(self, values):
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name):
        try:
            value = object.__getattribute__(self, "_values")[name]
        except KeyError:
            raise AttributeError(f"no config key {name!r}{_suggestion(name, SCHEMA)}") from None
        return list(value) if isinstance(value, list) else value

    def __setattr__(self, name, value):
        raise AttributeError(f"Config is read-only; use cfg.replace({name}=...)")

    def __eq__(self, other):
        return isinstance(other, Config) and self._values == other._values

    def __reduce__(self):
        return Config, (self._values,)

    def __repr__(self):
        return "Config(" + ", ".join(f"{k}={v!r}" for k, v in self._values.items()) + ")"

    def to_dict(self):
        return copy.deepcopy(self._values)

    def replace(self, **changes):
        """A copy with `changes` applied and the whole result validated again."""
        return _resolve([_Layer("config", self._values), _Layer("replace()", changes)])


# --------------------------------------------------------------------------- loading

class _Layer:
    """One source of values (a YAML file, the command line, ...) for error messages."""

    def __init__(self, source, values, flags=False):
        self.source = source
        self.values = values
        self.flags = flags  # name keys as --key in messages

    def where(self, key):
        return f"{self.source}: {'--' if self.flags else ''}{key}"


def load_config(path=None, overrides=None):
    """Resolve schema defaults < the YAML file at `path` < `overrides` (a key -> value dict).

    Override values are checked exactly like YAML values. Raises ConfigError.
    """
    layers = []
    if path is not None:
        layers.append(_Layer(str(path), _read_yaml(path)))
    if overrides:
        layers.append(_Layer("overrides", dict(overrides)))
    return _resolve(layers)


def _read_yaml(path):
    path = str(path)
    if not os.path.isfile(path):
        raise ConfigError(f"config file not found: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            data = _load_unique_keys(f, path)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or "invalid YAML"
        raise ConfigError(f"{path}: cannot parse YAML{line}: {_one_line(problem)}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read: {_one_line(e)}") from None
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise ConfigError(f"{path}: the top level must be a mapping of key: value, got {got}")
    return data


def _load_unique_keys(stream, path):
    """yaml.safe_load of `stream`, refusing a key given twice in one mapping (YAML itself lets the last win,
    so an edited config would silently train with whichever line came last): ConfigError naming the key and
    its lines."""
    loader = yaml.SafeLoader(stream)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _reject_duplicate_keys(node, path)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _reject_duplicate_keys(node, path, seen_nodes=None):
    seen_nodes = set() if seen_nodes is None else seen_nodes
    if id(node) in seen_nodes:  # an alias of a node already checked
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        lines = {}
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode):
                lines.setdefault(key.value, []).append(key.start_mark.line + 1)
        for key, at in lines.items():
            if len(at) > 1 and key != "<<":
                raise ConfigError(f"{path}: key {key} is given {len(at)} times (lines "
                                  f"{', '.join(map(str, at))}); keep one")
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
        for child in node.value:
            for sub in (child if isinstance(child, tuple) else (child,)):
                _reject_duplicate_keys(sub, path, seen_nodes)


def _resolve(layers):
    """Apply `layers` over the defaults, then check values and their combinations."""
    values = {name: _check_type(f, copy.deepcopy(f.default), f"default: {name}")
              for name, f in SCHEMA.items()}
    origin = {}  # key -> index of the layer that set it last
    retired = []
    for index, layer in enumerate(layers):
        _reject_unknown_keys(layer)
        retired += [(layer, key) for key in RETIRED_KEYS if key in layer.values]
        for key, raw in layer.values.items():
            if key in RETIRED_KEYS:
                continue
            values[key] = _check_type(SCHEMA[key], raw, layer.where(key))
            origin[key] = index

    def where(key):
        return layers[origin[key]].where(key) if key in origin else f"default: {key}"

    def set_last(*keys):
        return where(max(keys, key=lambda k: origin.get(k, -1)))

    _resolve_data_url(values, origin, where)
    for name, f in SCHEMA.items():
        values[name] = _check_value(f, values[name], where(name))
    _check_combinations(values, set_last)
    for layer, key in retired:
        _retire(layer, key, values)
    return Config(values)


# Keys that no longer configure anything: key -> (what took their place, the value it follows).
RETIRED_KEYS = {
    "depths": ("the stage depths follow arch (src/variants.py)", lambda v: list(VARIANTS[v["arch"]].depths)),
}


def _retire(layer, key, values):
    """A retired key in a YAML (e.g. the config.yaml of an older run): ignored with a one-line note when it
    agrees with what replaced it, else a one-line ConfigError; either way it says to delete the line."""
    why, follows = RETIRED_KEYS[key]
    value, expected = layer.values[key], follows(values)
    if value != expected:
        raise ConfigError(f"{layer.where(key)}: {value} does not match arch {values['arch']} ({expected}); "
                          f"{key} is no longer a setting, {why}: delete it")
    print(f"note: {layer.where(key)} is no longer a setting, {why}; ignored (delete it)", file=sys.stderr)


def _reject_unknown_keys(layer):
    bad = []
    for key in layer.values:
        if not isinstance(key, str):
            bad.append(f"key {key!r} is not a name")
        elif key not in SCHEMA and key not in RETIRED_KEYS:
            shown = f"--{key}" if layer.flags else repr(key)
            bad.append(f"unknown key {shown}{_suggestion(key, SCHEMA, layer.flags)}")
    if bad:
        raise ConfigError(f"{layer.source}: " + "; ".join(bad))


# timm's train.py flags whose name here is another (a timm user's first guess), for the suggestions
TIMM_NAMES = {"model": "arch", "data_dir": "data_path", "img_size": "input_size", "workers": "num_parallel_workers",
              "opt": "optimizer", "sched": "lr_scheduler", "mixup": "mix_up", "smoothing": "label_smoothing",
              "model_ema": "ema", "model_ema_decay": "ema_decay", "clip_grad": "clipping"}
# The model zoo's flags that no setting needs here: flag -> why it is ignored (accepted with a note)
SEED_FLAGS = {"inference": "the network is always run in inference mode by eval.py and export.py"}


def _suggestion(name, known, flags=False):
    """' (did you mean 'x'?)' for the nearest known names, or ''."""
    name = str(name).lstrip("-").replace("-", "_")
    if TIMM_NAMES.get(name) in known:
        return f" (did you mean {'--' if flags else ''}{TIMM_NAMES[name]}, timm's --{name}?)"
    matches = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    if not matches:  # e.g. lr -> base_lr, warmup_lr, min_lr
        parts = [k for k in known if name in k.split("_")]
        matches = sorted(parts, key=lambda k: not k.endswith("_" + name))[:3]
    if not matches:
        return ""
    shown = [f"--{m}" if flags else f"'{m}'" for m in matches]
    return f" (did you mean {' or '.join(shown)}?)"


def _resolve_data_url(values, origin, where):
    """Outside ModelArts, data_url is the seed's name for data_path: the later setting wins.

    After this both keys hold the same path, so a saved config reloads unchanged. With
    enable_modelarts, data_url is the remote source and data_path the local copy.
    """
    if values["enable_modelarts"] or values["data_url"] is None:
        return
    url_at, path_at = origin.get("data_url", -1), origin.get("data_path", -1)
    if url_at > path_at:
        values["data_path"] = values["data_url"]
    elif url_at == path_at and values["data_url"] != values["data_path"]:
        raise ConfigError(
            f"{where('data_url')} {values['data_url']!r} differs from data_path "
            f"{values['data_path']!r}; data_url is the seed's name for data_path, keep one")
    values["data_url"] = values["data_path"]


# --------------------------------------------------------------------------- checks

_TYPE_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string",
               list: "a list"}


def _check_type(field, value, where):
    """Return `value` in the field's type, or raise ConfigError; ints are accepted as floats."""
    if isinstance(value, str) and field.nullable and value.strip() in _NULL_WORDS:
        value = None
    if value is None:
        if field.nullable:
            return None
        raise ConfigError(f"{where}: must be set, expected {_describe_type(field)}")
    if field.type is list:
        if isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected {_describe_type(field)}, got {_show(value)}")
        return [_check_scalar(field.item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    return _check_scalar(field.type, value, where)


def _check_scalar(kind, value, where):
    if kind is float and isinstance(value, str) and _EXPONENT_NUMBER.fullmatch(value.strip()):
        value = float(value)
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
    }[kind]
    if not ok:
        raise ConfigError(f"{where}: expected {_TYPE_WORDS[kind]}, got {_show(value)}")
    if kind is float:
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(f"{where}: expected a finite number, got {value}")
    if kind is int and abs(value) > INT_LIMIT:
        raise ConfigError(f"{where}: {value} is out of range (at most {INT_LIMIT})")
    if kind is str and "\0" in value:
        raise ConfigError(f"{where}: contains a NUL character")
    return value


def _check_value(field, value, where):
    """Allowed values, ranges, list length and pattern; returns the canonical value."""
    if value is None:
        return None
    texts = value if isinstance(value, list) else [value]
    if (field.type is str or field.item is str) and not all(isinstance(t, str) and t.strip() for t in texts):
        raise ConfigError(f"{where}: must not be empty" + (" (nor hold an empty name)" if field.type is list else
                                                          " (or leave the key out for its default)"))
    if field.choices:
        canonical = {c.lower(): c for c in field.choices}.get(value.lower())
        if canonical is None:
            raise ConfigError(f"{where}: {value!r} is not allowed; choose one of: "
                              f"{', '.join(field.choices)}")
        value = canonical
    if field.pattern and not re.fullmatch(field.pattern, value):
        raise ConfigError(f"{where}: {value!r} is not valid; expected the form "
                          f"{field.pattern_example!r} (or null)")
    if field.length is not None and len(value) != field.length:
        raise ConfigError(f"{where}: expected {field.length} values, got {value}")
    items = value if isinstance(value, list) else [value]
    for i, v in enumerate(items):
        if not _in_range(field, v):
            at = f"{where}[{i}]" if isinstance(value, list) else where
            raise ConfigError(f"{at}: must be {_describe_range(field)}, got {v}")
    return value


def _in_range(field, v):
    if field.low is not None and (v < field.low or (field.low_open and v == field.low)):
        return False
    if field.high is not None and (v > field.high or (field.high_open and v == field.high)):
        return False
    return True


def _describe_range(field):
    if field.low is not None and field.high is not None:
        left, right = "(" if field.low_open else "[", ")" if field.high_open else "]"
        return f"in {left}{field.low:g}, {field.high:g}{right}"
    if field.low is not None:
        return f"{'>' if field.low_open else '>='} {field.low:g}"
    return f"{'<' if field.high_open else '<='} {field.high:g}"


_ITEM_WORDS = {int: "integers", float: "numbers", str: "strings"}


def _describe_type(field):
    if field.type is list:
        return f"a list of {_ITEM_WORDS[field.item]}"
    return _TYPE_WORDS[field.type] + (" or null" if field.nullable else "")


def _check_combinations(v, at):
    """Checks that involve several keys; `at(*keys)` names whichever of them was set last."""
    if v["warmup_length"] > v["epochs"]:
        raise ConfigError(f"{at('warmup_length', 'epochs')}: warmup_length {v['warmup_length']} "
                          f"exceeds epochs {v['epochs']} (the warmup is part of the total)")
    milestones = v["lr_milestones"]
    if v["lr_scheduler"] == "multistep" and not milestones:
        raise ConfigError(f"{at('lr_milestones', 'lr_scheduler')}: lr_scheduler multistep needs "
                          f"lr_milestones, a list of epochs such as [30, 60, 90]")
    if any(b <= a for a, b in zip(milestones, milestones[1:])) or \
            (milestones and milestones[-1] > v["epochs"]):
        raise ConfigError(f"{at('lr_milestones', 'epochs')}: lr_milestones {milestones} must "
                          f"increase and stay <= epochs {v['epochs']}")
    crop, mode = v["crop_pct"], v["eval_crop_mode"]
    if mode == "pixels":
        if crop != int(crop):
            raise ConfigError(f"{at('crop_pct', 'eval_crop_mode')}: crop_pct {crop:g} must be a "
                              f"whole number of pixels with eval_crop_mode pixels")
        v["crop_pct"] = int(crop)
    elif not 0 < crop <= 1:
        raise ConfigError(f"{at('crop_pct', 'eval_crop_mode')}: crop_pct {crop:g} must be a "
                          f"fraction in (0, 1] with eval_crop_mode {mode}")
    if v["use_nesterov"] and v["momentum"] == 0 and v["optimizer"] != "adamw":
        raise ConfigError(f"{at('use_nesterov', 'momentum')}: use_nesterov needs momentum > 0")
    mixing = v["mix_up"] > 0 or v["cutmix"] > 0
    if mixing and v["mix_scheme"] == "timm" and v["mixup_mode"] == "pair" and v["batch_size"] % 2:
        raise ConfigError(f"{at('batch_size', 'mixup_mode')}: mixup_mode pair needs an even "
                          f"batch_size, got {v['batch_size']}")
    if v["mix_scheme"] == "deepmind":
        if v["cutmix"] not in (0, 1):
            raise ConfigError(f"{at('cutmix', 'mix_scheme')}: mix_scheme deepmind draws the CutMix box "
                              f"area uniformly (alpha 1): cutmix must be 0 or 1, got {v['cutmix']:g}")
        if v["mix_up"] > 0 and v["cutmix"] > 0 and v["batch_size"] % 2:
            raise ConfigError(f"{at('batch_size', 'mix_scheme')}: mix_scheme deepmind splits the batch "
                              f"into a Mixup and a CutMix half: batch_size must be even, got {v['batch_size']}")
    if v["train_resize"] == "tf_bicubic":
        for key, needed in (("train_crop", "deepmind"), ("mix_scheme", "deepmind"), ("re_prob", 0)):
            if v[key] != needed:
                raise ConfigError(f"{at(key, 'train_resize')}: train_resize tf_bicubic is DeepMind's pipeline: "
                                  f"it needs {key} {needed}, got {v[key]}")
        if v["auto_augment"] and not v["auto_augment"].startswith("randaugment_"):
            raise ConfigError(f"{at('auto_augment', 'train_resize')}: train_resize tf_bicubic needs DeepMind's "
                              f"RandAugment ('randaugment_NNN') or none, got {v['auto_augment']!r}")
    _check_rand_augment_magnitude(v["auto_augment"], at("auto_augment"))
    if v["enable_modelarts"]:
        for key in ("data_url", "train_url"):
            if v[key] is None:
                raise ConfigError(f"{at(key, 'enable_modelarts')}: {key} must be set when "
                                  f"enable_modelarts is true")


def _check_rand_augment_magnitude(config_str, where):
    """A timm string whose magnitude exceeds its clamp (mmax, 10 by default) would silently train
    weaker than it says (src/data/augment/rand_augment.py: RandAugmentSettings.effective_magnitude)."""
    if not config_str or not config_str.startswith("rand-"):
        return
    parts = dict(re.fullmatch(r"([a-z]+)(.*)", p).groups() for p in config_str.split("-")[1:] if p)
    magnitude = int(float(parts.get("m", 10)))
    clamp = int(float(parts.get("mmax", 10)))
    if magnitude > clamp:
        hint = f"add -mmax{magnitude}" if "mmax" not in parts else f"raise mmax to {magnitude}"
        raise ConfigError(f"{where}: {config_str!r} asks for magnitude {magnitude}, but timm's syntax clamps "
                          f"magnitudes to {clamp}; {hint}")


def _show(value, limit=60):
    text = repr(value)
    text = text if len(text) <= limit else text[:limit - 3] + "..."
    return f"{_one_line(text)} ({type(value).__name__})"


# --------------------------------------------------------------------------- command line

class _ArgumentParser(argparse.ArgumentParser):
    """argparse that reports mistakes as ConfigError (one line, exit 2 via run_cli)."""

    def error(self, message):
        raise ConfigError(f"{_CLI}: {_one_line(message)}")


_DEST = "config_key:"  # namespace prefix that keeps config keys apart from script flags


def build_parser(description, add_script_args=None, shown_keys=None):
    """An ArgumentParser with --config, the caller's own flags and --<key> for every config key.

    `add_script_args(parser)` adds the script's flags (e.g. eval.py's --checkpoint); they
    must not reuse a config key's name. Config flags are left as raw strings here;
    `parse_cli` converts and checks them. With `shown_keys`, --help lists only those keys
    (the ones the script uses); the others are still accepted, e.g. from a launcher.
    """
    epilog = None if shown_keys is None else \
        "Only the settings this script uses are listed; any other config key is accepted and ignored."
    parser = _ArgumentParser(description=description, allow_abbrev=False, epilog=epilog)
    parser.add_argument("--config", metavar="PATH",
                        help="YAML file with the run's settings; the flags below override it")
    if add_script_args is not None:
        add_script_args(parser)
    for group_name, fields in GROUPS.items():
        group = parser.add_argument_group(f"config: {group_name}")
        for f in fields:
            extra = dict(nargs="?", const="true") if f.type is bool else {}
            shown = shown_keys is None or f.name in shown_keys
            group.add_argument(f"--{f.name}", dest=_DEST + f.name, default=argparse.SUPPRESS,
                               metavar=_metavar(f), help=_flag_help(f) if shown else argparse.SUPPRESS, **extra)
    return parser


def parse_cli(argv=None, description="", add_script_args=None, shown_keys=None):
    """Parse `argv` (default sys.argv[1:]) into (script_args, Config).

    `shown_keys`: the config keys --help lists (default all; see build_parser).
    --config PATH is loaded as YAML, then every --<key> VALUE (or --key=VALUE) overrides
    it. A value is read as YAML (so 0.2, false, [1,2,6,3] and null work) and checked like
    a YAML value; for text keys the value is taken verbatim. A bool flag alone means true.
    `script_args.cli_keys` is the set of config keys given on the command line.
    """
    parser = build_parser(description, add_script_args, shown_keys)
    argv = _drop_seed_flags(sys.argv[1:] if argv is None else list(argv))
    namespace, unknown = parser.parse_known_args(argv)
    if unknown:
        raise ConfigError(_unknown_args_message(unknown, parser))
    script_args, cli_values = argparse.Namespace(), {}
    for dest, raw in vars(namespace).items():
        if dest.startswith(_DEST):
            key = dest[len(_DEST):]
            cli_values[key] = _parse_flag_value(SCHEMA[key], raw)
        else:
            setattr(script_args, dest, raw)
    layers = []
    if script_args.config is not None:
        layers.append(_Layer(script_args.config, _read_yaml(script_args.config)))
    layers.append(_Layer(_CLI, cli_values, flags=True))
    script_args.cli_keys = frozenset(cli_values)  # what the user set by hand (e.g. over a checkpoint's settings)
    return script_args, _resolve(layers)


def _drop_seed_flags(argv):
    """`argv` without the model zoo's flags of SEED_FLAGS (`--inference True`), each dropped with a note."""
    out, skip = [], False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        flag = arg.split("=", 1)[0]
        if flag.startswith("--") and flag[2:] in SEED_FLAGS:
            has_value = "=" not in arg and i + 1 < len(argv) and not argv[i + 1].startswith("-")
            skip = has_value
            print(f"note: {flag} (the model zoo's flag) is not needed: {SEED_FLAGS[flag[2:]]}; ignored",
                  file=sys.stderr)
            continue
        out.append(arg)
    return out


def group_keys(*groups):
    """The config keys of the named groups of GROUPS, in schema order (for shown_keys)."""
    return tuple(f.name for group in groups for f in GROUPS[group])


def _parse_flag_value(field, raw):
    if field.nullable and raw.strip() in _NULL_WORDS:
        return None
    if field.type is str:
        return raw
    text = raw.strip()
    if field.type is list and not text.startswith("["):
        text = f"[{text}]"  # --lr_milestones 30,60 means [30, 60]
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        raise ConfigError(f"{_CLI}: --{field.name}: cannot read {raw!r}; expected "
                          f"{_describe_type(field)}") from None


def _unknown_args_message(unknown, parser):
    known = [s.lstrip("-") for action in parser._actions for s in action.option_strings
             if s.startswith("--")]
    for item in unknown:
        if item.startswith("-"):
            flag = item.split("=", 1)[0]
            if flag.lstrip("-") in RETIRED_KEYS:
                return f"{_CLI}: {flag} is no longer a setting, {RETIRED_KEYS[flag.lstrip('-')][0]}"
            return f"{_CLI}: unknown option {flag}{_suggestion(flag, known, flags=True)}"
    return f"{_CLI}: unexpected argument {unknown[0]!r} (options are written --key value)"


def _metavar(field):
    if field.choices:
        return "{" + ",".join(field.choices) + "}"
    if field.type is list:
        return f"[{field.item.__name__.upper()},...]"
    return field.type.__name__.upper()


def _flag_help(field):
    default = "null" if field.default is None else field.default
    text = f"{field.help} (default {default}"
    if field.low is not None or field.high is not None:
        text += f"; {_describe_range(field)}"
    return (text + ")").replace("%", "%%")


# --------------------------------------------------------------------------- saving, entry points

def format_yaml(values, header=(), notes=None):
    """Render `values` as grouped YAML with `# note` comments (schema help by default).

    `header` lines become comments at the top; `notes` maps a key to the comment written
    after it instead of the schema's help. The result loads back with yaml.safe_load.
    """
    notes = notes or {}
    lines = [f"# {line}" if line else "#" for line in header]
    for group_name, fields in GROUPS.items():
        lines.append(f"\n# ===== {group_name} ===== #")
        for f in fields:
            if f.name in values:
                text = f"{f.name}: {_yaml_scalar(values[f.name])}"
                lines.append(f"{text:<44} # {notes.get(f.name, f.help)}")
    return "\n".join(lines).lstrip("\n") + "\n"


def _yaml_scalar(value):
    if isinstance(value, list):
        return "[" + ", ".join(_yaml_scalar(v) for v in value) + "]"
    if isinstance(value, float) and value != 0 and abs(value) < 1e-3:
        mantissa, exponent = f"{value:e}".split("e")
        mantissa = mantissa.rstrip("0")
        return f"{mantissa}0e{int(exponent):+d}" if mantissa.endswith(".") else \
            f"{mantissa}e{int(exponent):+d}"  # e.g. 7.0e-7, which YAML 1.1 reads as a float
    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    return text[:-len("...")].strip() if text.endswith("...") else text


def save_config(cfg, path):
    """Write the resolved config as YAML at `path` (atomically: temp file, then rename)."""
    values = cfg.to_dict() if isinstance(cfg, Config) else dict(cfg)
    text = format_yaml(values, header=["Resolved configuration of this run; reload it with "
                                       "--config <this file>."])
    write_atomic(path, text)

