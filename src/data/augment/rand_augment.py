"""RandAugment with timm's configuration strings, op sets and magnitude ranges.

``rand_augment_transform("rand-m5-n4-mstd0.5-inc1")`` builds a transform that
applies ``n`` operations, drawn with replacement from the op set, to each
image; each drawn operation runs with probability ``p`` at magnitude ``m`` on
timm's 0..10 scale, optionally jittered by Gaussian noise (``mstd``).

Behaviour follows timm 1.0.31 (timm/data/auto_augment.py), including its
randomness: each op first draws whether it runs, then its magnitude noise, then
a sign for signed arguments (negated when a uniform draw exceeds 0.5), then the
interpolation of geometric ops. Random numbers come from NumPy (see
random_state.py), not from Python's ``random`` as in timm.
"""
import re
from typing import NamedTuple, Callable, Optional

import numpy as np
from PIL import Image

from . import image_ops
from .random_state import resolve_rng

LEVEL_DENOM = 10.0  # magnitude m maps to level m / LEVEL_DENOM of each op's range
DEFAULT_FILL = (128, 128, 128)

STANDARD_OPS = (
    "AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd",
    "Color", "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY",
    "TranslateXRel", "TranslateYRel",
)
# Same operations, but stronger as the magnitude grows (Posterize keeps fewer
# bits, Solarize has a lower threshold, the enhancements move further from 1).
INCREASING_OPS = (
    "AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing", "SolarizeIncreasing",
    "SolarizeAdd", "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing",
    "SharpnessIncreasing", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel",
)

_PIL_FILTERS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
}
_RANDOM_FILTERS = (Image.Resampling.BILINEAR, Image.Resampling.BICUBIC)


class _OpSpec(NamedTuple):
    """An image function and how a level in [0, 1] (more with mmax) becomes its argument."""

    fn: Callable
    to_arg: Optional[Callable] = None  # (level, sign, hparams) -> argument
    signed: bool = False  # the argument's sign is random
    geometric: bool = False  # takes resample and fill


def _enhance(level, sign, hparams):
    return level * 1.8 + 0.1  # [0.1, 1.9], 1.0 (no change) at m=5


def _enhance_increasing(level, sign, hparams):
    return max(0.1, 1.0 + sign * (level * 0.9))  # 1 +- [0, 0.9]


def _posterize_bits(level):
    return int(level * 4)


def _solarize_threshold(level):
    return min(256, int(level * 256))


_OPS = {
    "AutoContrast": _OpSpec(image_ops.auto_contrast),
    "Equalize": _OpSpec(image_ops.equalize),
    "Invert": _OpSpec(image_ops.invert),
    "Rotate": _OpSpec(image_ops.rotate, lambda lv, s, hp: s * (lv * 30.0), True, True),
    "Posterize": _OpSpec(image_ops.posterize, lambda lv, s, hp: _posterize_bits(lv)),
    "PosterizeIncreasing": _OpSpec(image_ops.posterize, lambda lv, s, hp: 4 - _posterize_bits(lv)),
    "Solarize": _OpSpec(image_ops.solarize, lambda lv, s, hp: _solarize_threshold(lv)),
    "SolarizeIncreasing": _OpSpec(image_ops.solarize, lambda lv, s, hp: 256 - _solarize_threshold(lv)),
    "SolarizeAdd": _OpSpec(image_ops.solarize_add, lambda lv, s, hp: min(128, int(lv * 110))),
    "Color": _OpSpec(image_ops.color, _enhance),
    "ColorIncreasing": _OpSpec(image_ops.color, _enhance_increasing, signed=True),
    "Contrast": _OpSpec(image_ops.contrast, _enhance),
    "ContrastIncreasing": _OpSpec(image_ops.contrast, _enhance_increasing, signed=True),
    "Brightness": _OpSpec(image_ops.brightness, _enhance),
    "BrightnessIncreasing": _OpSpec(image_ops.brightness, _enhance_increasing, signed=True),
    "Sharpness": _OpSpec(image_ops.sharpness, _enhance),
    "SharpnessIncreasing": _OpSpec(image_ops.sharpness, _enhance_increasing, signed=True),
    "ShearX": _OpSpec(image_ops.shear_x, lambda lv, s, hp: s * (lv * 0.3), True, True),
    "ShearY": _OpSpec(image_ops.shear_y, lambda lv, s, hp: s * (lv * 0.3), True, True),
    "TranslateXRel": _OpSpec(
        image_ops.translate_x_rel, lambda lv, s, hp: s * (lv * hp.get("translate_pct", 0.45)), True, True),
    "TranslateYRel": _OpSpec(
        image_ops.translate_y_rel, lambda lv, s, hp: s * (lv * hp.get("translate_pct", 0.45)), True, True),
}


def _parse_interpolation(value):
    """hparams['interpolation'] -> a fixed PIL filter, or a tuple to draw from per call."""
    if value is None or value == "random":
        return _RANDOM_FILTERS
    if isinstance(value, str):
        if value not in _PIL_FILTERS:
            choices = sorted(_PIL_FILTERS) + ["random"]
            raise ValueError(f"unknown RandAugment interpolation {value!r}, use one of {choices}")
        return _PIL_FILTERS[value]
    if isinstance(value, (list, tuple)):
        return tuple(_parse_interpolation(v) for v in value)
    return Image.Resampling(value)


class AugmentOp:
    """One RandAugment operation, applied with probability ``prob``.

    Args:
        name: an op name from STANDARD_OPS or INCREASING_OPS (timm's names).
        prob: probability that a call changes the image.
        magnitude: strength on the 0..10 scale.
        hparams: optional dict; keys used: img_mean (fill color for geometric
            ops, default gray 128), interpolation ('bilinear', 'bicubic',
            'nearest', a PIL filter, or 'random'/absent for a per-call choice
            between bilinear and bicubic), translate_pct (default 0.45),
            magnitude_std (0: fixed magnitude, > 0: Gaussian noise, inf:
            uniform in [0, magnitude]) and magnitude_max (clamp, default 10).
        rng: default np.random.RandomState; one passed to the call wins, None: NumPy's global state
            (see random_state.py).
    """

    def __init__(self, name, prob=0.5, magnitude=10, hparams=None, rng=None):
        if name not in _OPS:
            raise ValueError(f"unknown RandAugment op {name!r}")
        self.name = name
        self.prob = prob
        self.magnitude = magnitude
        self.hparams = dict(hparams or {})
        self.fill = self.hparams.get("img_mean", DEFAULT_FILL)
        self.interpolation = _parse_interpolation(self.hparams.get("interpolation"))
        self.magnitude_std = self.hparams.get("magnitude_std", 0)
        self.magnitude_max = self.hparams.get("magnitude_max")
        self.rng = rng

    @property
    def _spec(self):
        # Looked up by name rather than stored, so that ops pickle (the table holds lambdas).
        return _OPS[self.name]

    def __call__(self, img, rng=None):
        rng = resolve_rng(rng, self.rng)
        if self.prob < 1.0 and rng.random() > self.prob:
            return img
        magnitude = self.magnitude
        if self.magnitude_std == float("inf"):
            magnitude = rng.uniform(0, magnitude)
        elif self.magnitude_std > 0:
            magnitude = rng.normal(magnitude, self.magnitude_std)
        sign = -1 if self._spec.signed and rng.random() > 0.5 else 1
        resample = None
        if self._spec.geometric and isinstance(self.interpolation, tuple):
            resample = self.interpolation[rng.randint(len(self.interpolation))]
        return self.apply(img, magnitude, sign, resample)

    def apply(self, img, magnitude, sign=1, resample=None):
        """Apply the op deterministically to a PIL image.

        ``magnitude`` is clamped to [0, magnitude_max or 10]; ``sign`` (+1/-1)
        is used by signed ops only; ``resample`` defaults to the configured
        interpolation, or bicubic when that is a random choice.
        """
        spec = self._spec
        if spec.to_arg is None:
            return spec.fn(img)
        upper = self.magnitude_max or LEVEL_DENOM
        level = max(0.0, min(float(magnitude), upper)) / LEVEL_DENOM
        arg = spec.to_arg(level, sign, self.hparams)
        if not spec.geometric:
            return spec.fn(img, arg)
        if resample is None:
            fixed = not isinstance(self.interpolation, tuple)
            resample = self.interpolation if fixed else Image.Resampling.BICUBIC
        return spec.fn(img, arg, resample=resample, fill=self.fill)

    def __repr__(self):
        return (f"AugmentOp(name={self.name}, p={self.prob}, m={self.magnitude}, "
                f"mstd={self.magnitude_std}, mmax={self.magnitude_max})")


class RandAugment:
    """Apply ``num_layers`` ops drawn uniformly with replacement from ``ops``.

    Accepts a PIL image or an HWC uint8 array and returns the same type.
    """

    def __init__(self, ops, num_layers=2, rng=None):
        self.ops = list(ops)
        self.num_layers = num_layers
        self.rng = rng

    def __call__(self, img, rng=None):
        is_array = isinstance(img, np.ndarray)
        if is_array:
            img = Image.fromarray(img)
        chosen = resolve_rng(rng, self.rng).choice(len(self.ops), self.num_layers)
        for index in chosen:
            img = self.ops[index](img, rng=rng)
        return np.array(img) if is_array else img

    def __repr__(self):
        ops = "".join(f"\n\t{op}" for op in self.ops)
        return f"RandAugment(n={self.num_layers}, ops={ops})"


def _parse_section(section):
    if section.startswith("t"):  # timm's named or weighted op sets ('tweights', 't3a')
        raise ValueError(f"RandAugment config section {section!r}: transform sets ('t...') are not supported")
    match = re.fullmatch(r"([a-z]+)(\d.*)", section)
    if match is None:
        raise ValueError(f"unknown RandAugment config section {section!r}")
    key, value = match.groups()
    converters = {"m": int, "n": int, "p": float, "mstd": float, "mmax": int, "inc": int}
    if key not in converters:
        raise ValueError(f"unknown RandAugment config key {key!r} in section {section!r}")
    try:
        return key, converters[key](value)
    except ValueError:
        raise ValueError(f"bad value in RandAugment config section {section!r}") from None


class RandAugmentSettings(NamedTuple):
    """What a timm RandAugment string asks for (see rand_augment_transform for the keys)."""

    magnitude: int = 10
    num_layers: int = 2
    prob: float = 0.5
    magnitude_std: Optional[float] = None  # None: not in the string
    magnitude_max: Optional[int] = None  # None: not in the string (timm clamps to 10)
    increasing: bool = False

    @property
    def effective_magnitude(self):
        """The magnitude the ops really use: timm clamps m to mmax, or to 10 without mmax."""
        return min(self.magnitude, LEVEL_DENOM if self.magnitude_max is None else self.magnitude_max)


def parse_rand_augment(config_str):
    """Parse a timm RandAugment string such as ``rand-m15-n4-mstd0.5-inc1-mmax15`` into RandAugmentSettings."""
    sections = config_str.split("-")
    if sections[0] != "rand":
        raise ValueError(f"RandAugment config must start with 'rand-', got {config_str!r}")
    values = {}
    for section in filter(None, sections[1:]):
        key, value = _parse_section(section)
        if key == "mstd":
            value = float("inf") if value > 100 else value
        values[{"m": "magnitude", "n": "num_layers", "p": "prob", "mstd": "magnitude_std",
                "mmax": "magnitude_max", "inc": "increasing"}[key]] = value
    if "increasing" in values:
        values["increasing"] = bool(values["increasing"])
    return RandAugmentSettings(**values)


def rand_augment_transform(config_str, hparams=None, rng=None):
    """Build a RandAugment from a timm config string such as ``rand-m5-n4-mstd0.5-inc1``.

    Sections after ``rand`` (any order, separated by '-'):
        m<int>: magnitude on the 0..10 scale (default 10).
        n<int>: ops applied per image (default 2).
        p<float>: probability of each applied op (default 0.5).
        mstd<float>: std of Gaussian magnitude noise; above 100 means uniform
            sampling in [0, m] (default 0, no noise).
        mmax<int>: clamp magnitudes to [0, mmax] instead of [0, 10]. Without it a
            magnitude above 10 acts as 10 (timm's behaviour): ``rand-m15`` needs ``-mmax15``.
        inc<0|1>: 1 selects INCREASING_OPS, 0 (the default) STANDARD_OPS.
    As in timm, magnitude_std / magnitude_max already present in ``hparams``
    take precedence over mstd / mmax in the string. ``hparams`` is not modified.
    See AugmentOp for the other hparams keys and ``rng``.
    """
    settings = parse_rand_augment(config_str)
    hparams = dict(hparams or {})
    if settings.magnitude_std is not None:
        hparams.setdefault("magnitude_std", settings.magnitude_std)
    if settings.magnitude_max is not None:
        hparams.setdefault("magnitude_max", settings.magnitude_max)
    names = INCREASING_OPS if settings.increasing else STANDARD_OPS
    ops = [AugmentOp(name, prob=settings.prob, magnitude=settings.magnitude, hparams=hparams, rng=rng)
           for name in names]
    return RandAugment(ops, settings.num_layers, rng=rng)
