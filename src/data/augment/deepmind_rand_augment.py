"""RandAugment with DeepMind's NFNet semantics (nfnets/autoaugment.py), on HWC uint8 arrays.

``DeepMindRandAugment(num_layers=4, magnitude=15)`` is DeepMind's ``randaugment_415``: each of
``num_layers`` layers picks one of 16 ops uniformly and always applies it at the fixed
``magnitude`` (no probability gate: DeepMind draws a per-op prob but never uses it; no
magnitude noise; no clamp at 10: level 15 rotates by 45 degrees). Signed arguments (rotate,
shear, translate) are negated with probability 1/2. How the two RandAugments differ:

    point                timm (rand_augment.py)                 DeepMind (here)
    op applied           with probability p (0.5)               always
    magnitude            m + N(0, mstd), clamped to [0, mmax]   m exactly, any level
    op set               15 ops, 'increasing' variants (inc1)   16 ops: + Cutout, plain Posterize,
                                                                Solarize, enhancements
    translate            fraction of the image (0.45 at 10)     100 pixels at level 10
    resampling           bilinear/bicubic (PIL)                 nearest (tensorflow_addons)
    fill                 ImageNet mean color                    gray 128

Every op follows the TensorFlow code, including its integer truncations and its quirks:
``contrast`` blends towards (number of pixels / 256) rather than the mean gray level, because
DeepMind's code divides the histogram's sum, not its weighted sum, by 256. The randomness comes
from NumPy (see random_state.py); op functions take their random values as arguments.
"""
import math

import numpy as np

from .random_state import resolve_rng

MAX_LEVEL = 10.0
TRANSLATE_CONST = 100  # pixels at level 10 (distort_image_with_randaugment's augmentation_hparams)
CUTOUT_CONST = 40  # half side in pixels at level 10
REPLACE = 128  # fill of pixels from outside the image and of the cutout square
GRAY_WEIGHTS = np.array([0.2989, 0.5870, 0.1140], dtype=np.float32)  # tf.image.rgb_to_grayscale

OPS = (
    "AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "Color", "Contrast",
    "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateX", "TranslateY", "Cutout", "SolarizeAdd",
)


def parse_level(config_str):
    """DeepMind's augment level, ``randaugment_415`` or ``415``: (num_layers 4, magnitude 15).

    As nfnets/dataset.py _augment_image: a value above 100 carries the layer count in its hundreds;
    otherwise 2 layers.
    """
    digits = config_str.rsplit("_", 1)[-1]
    if not digits.isdigit():
        raise ValueError(f"DeepMind RandAugment level must be like 'randaugment_415', got {config_str!r}")
    magnitude = int(digits)
    if magnitude > 100:
        return magnitude // 100, magnitude % 100
    return 2, magnitude


# ----------------------------------------------------------------------------- ops

def blend(image1, image2, factor):
    """image1 + factor * (image2 - image1); truncated to uint8, clipped first when extrapolating."""
    if factor == 0.0:
        return image1
    if factor == 1.0:
        return image2
    temp = image1.astype(np.float32) + np.float32(factor) * (image2.astype(np.float32) - image1.astype(np.float32))
    if 0.0 < factor < 1.0:
        return temp.astype(np.uint8)
    return np.clip(temp, 0.0, 255.0).astype(np.uint8)


def grayscale(image):
    """tf.image.rgb_to_grayscale of uint8: weighted sum of x * (1/255), back to uint8 by * 255.5, truncated."""
    x = image.astype(np.float32) * np.float32(1.0 / 255.0)
    gray = x[..., 0] * GRAY_WEIGHTS[0] + x[..., 1] * GRAY_WEIGHTS[1] + x[..., 2] * GRAY_WEIGHTS[2]
    return (gray * np.float32(255.5)).astype(np.uint8)[..., None]


def auto_contrast(image):
    """Stretch each channel to 0..255 (channels with a single value are kept)."""
    out = np.empty_like(image)
    for c in range(3):
        channel = image[..., c]
        lo, hi = np.float32(channel.min()), np.float32(channel.max())
        if hi > lo:
            scale = np.float32(255.0) / (hi - lo)
            channel = np.clip(channel.astype(np.float32) * scale - lo * scale, 0.0, 255.0).astype(np.uint8)
        out[..., c] = channel
    return out


def equalize(image):
    """Histogram equalization per channel, PIL's step rule (unchanged when the step is 0)."""
    out = np.empty_like(image)
    for c in range(3):
        channel = image[..., c]
        histo = np.bincount(channel.ravel(), minlength=256)
        nonzero = histo[histo != 0]
        step = (nonzero.sum() - nonzero[-1]) // 255
        if step == 0:
            out[..., c] = channel
            continue
        lut = (np.cumsum(histo) + step // 2) // step
        lut = np.clip(np.concatenate([[0], lut[:-1]]), 0, 255)
        out[..., c] = lut[channel]
    return out


def invert(image):
    return 255 - image


def posterize(image, bits):
    """Keep the top ``bits`` bits. TensorFlow's bit shifts clamp the shift to 7 for uint8, so 0 bits
    (levels 0-2) keeps the top bit: [0, 100, 127, 128, 200, 255] -> [0, 0, 0, 128, 128, 128]."""
    shift = min(8 - bits, 7)
    return (image >> shift) << shift


def solarize(image, threshold):
    """Invert values >= threshold, with the threshold cast to uint8 as ``tf.where(image < threshold, ...)``
    casts DeepMind's Python int: it wraps, 256 (level 10) -> 0, so Solarize@10 is Invert, and 384
    (level 15) -> 128, so Solarize@15 is Solarize@5."""
    return np.where(image < np.uint8(int(threshold) % 256), image, 255 - image)


def solarize_add(image, addition, threshold=128):
    added = np.clip(image.astype(np.int64) + addition, 0, 255).astype(np.uint8)
    return np.where(image < threshold, added, image)


def color(image, factor):
    return blend(np.repeat(grayscale(image), 3, axis=-1), image, factor)


def contrast(image, factor):
    """Blend with a flat image of value H*W/256 (DeepMind's 'mean', see the module docstring)."""
    mean = np.float32(image.shape[0] * image.shape[1]) / np.float32(256.0)
    degenerate = np.full(image.shape, np.clip(mean, 0.0, 255.0), dtype=np.float32).astype(np.uint8)
    return blend(degenerate, image, factor)


def brightness(image, factor):
    return blend(np.zeros_like(image), image, factor)


def sharpness(image, factor):
    """Blend with PIL's SMOOTH filter (3x3, centre 5, /13) applied inside a 1-pixel border."""
    x = image.astype(np.float32)
    kernel = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]], dtype=np.float32) / np.float32(13.0)
    height, width = image.shape[:2]
    smooth = np.zeros((height - 2, width - 2, 3), dtype=np.float32)
    for dy in range(3):
        for dx in range(3):
            smooth += kernel[dy, dx] * x[dy:dy + height - 2, dx:dx + width - 2]
    degenerate = image.copy()
    degenerate[1:-1, 1:-1] = np.clip(smooth, 0.0, 255.0).astype(np.uint8)
    return blend(degenerate, image, factor)


def _round_half_away(x):
    """C++ std::round: halves away from zero (the fraction x - trunc(x) is exact in float)."""
    whole = np.trunc(x)
    return (whole + np.sign(x) * (np.abs(x - whole) >= 0.5)).astype(np.int64)


def _transform_nearest(image, matrix):
    """Output (x, y) takes input (a0 x + a1 y + a2, b0 x + b1 y + b2), rounded half away from zero;
    points outside the image get REPLACE (tensorflow_addons transform, NEAREST, then unwrap)."""
    a0, a1, a2, b0, b1, b2 = matrix
    height, width = image.shape[:2]
    ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
    src_x = np.float32(a0) * xs + np.float32(a1) * ys + np.float32(a2)
    src_y = np.float32(b0) * xs + np.float32(b1) * ys + np.float32(b2)
    src_x, src_y = _round_half_away(src_x), _round_half_away(src_y)
    inside = (src_x >= 0) & (src_x < width) & (src_y >= 0) & (src_y < height)
    out = np.full_like(image, REPLACE)
    out[inside] = image[src_y[inside], src_x[inside]]
    return out


def rotate(image, degrees):
    """Rotate about the image centre (tensorflow_addons angles_to_projective_transforms): the offsets in
    float32 as TensorFlow computes them; in float64 a few pixels per image at level 15 land on the other
    side of a rounding edge."""
    height, width = (np.float32(side - 1) for side in image.shape[:2])  # all in float32, as TensorFlow
    radians = np.float32(degrees * (math.pi / 180.0))
    # cos/sin rounded from float64: equal to TensorFlow's at every level 0-30 of either sign (NumPy's
    # float32 cos is 1 ulp off at levels 13 and 21, which moves pixels on a rounding edge)
    cos, sin = np.float32(math.cos(radians)), np.float32(math.sin(radians))
    x_offset = (width - (cos * width - sin * height)) / np.float32(2.0)
    y_offset = (height - (sin * width + cos * height)) / np.float32(2.0)
    return _transform_nearest(image, (cos, -sin, x_offset, sin, cos, y_offset))


def shear_x(image, level):
    return _transform_nearest(image, (1.0, level, 0.0, 0.0, 1.0, 0.0))


def shear_y(image, level):
    return _transform_nearest(image, (1.0, 0.0, 0.0, level, 1.0, 0.0))


def translate_x(image, pixels):
    """Shift the content left by ``pixels``."""
    return _transform_nearest(image, (1.0, 0.0, pixels, 0.0, 1.0, 0.0))


def translate_y(image, pixels):
    return _transform_nearest(image, (1.0, 0.0, 0.0, 0.0, 1.0, pixels))


def cutout(image, pad_size, center_y, center_x):
    """Fill the (2 pad_size)-wide square centred at (center_y, center_x), clipped to the image, with REPLACE."""
    height, width = image.shape[:2]
    top, left = max(0, center_y - pad_size), max(0, center_x - pad_size)
    bottom = height - max(0, height - center_y - pad_size)
    right = width - max(0, width - center_x - pad_size)
    out = image.copy()
    out[top:bottom, left:right] = REPLACE
    return out


# ----------------------------------------------------------------------------- levels

def _enhance_factor(level):
    return level / MAX_LEVEL * 1.8 + 0.1


# op name -> (function, level -> argument or None, argument's sign is random)
_OPS = {
    "AutoContrast": (auto_contrast, None, False),
    "Equalize": (equalize, None, False),
    "Invert": (invert, None, False),
    "Rotate": (rotate, lambda level: level / MAX_LEVEL * 30.0, True),
    "Posterize": (posterize, lambda level: int(level / MAX_LEVEL * 4), False),
    "Solarize": (solarize, lambda level: int(level / MAX_LEVEL * 256), False),
    "SolarizeAdd": (solarize_add, lambda level: int(level / MAX_LEVEL * 110), False),
    "Color": (color, _enhance_factor, False),
    "Contrast": (contrast, _enhance_factor, False),
    "Brightness": (brightness, _enhance_factor, False),
    "Sharpness": (sharpness, _enhance_factor, False),
    "ShearX": (shear_x, lambda level: level / MAX_LEVEL * 0.3, True),
    "ShearY": (shear_y, lambda level: level / MAX_LEVEL * 0.3, True),
    "TranslateX": (translate_x, lambda level: level / MAX_LEVEL * TRANSLATE_CONST, True),
    "TranslateY": (translate_y, lambda level: level / MAX_LEVEL * TRANSLATE_CONST, True),
    "Cutout": (cutout, lambda level: int(level / MAX_LEVEL * CUTOUT_CONST), False),
}


def level_to_arg(name, level):
    """The op's argument at ``level`` before any random sign (None for ops without one)."""
    to_arg = _OPS[name][1]
    return None if to_arg is None else to_arg(float(level))


def apply_op(image, name, level, negate=False, cutout_center=None):
    """Apply op ``name`` at ``level`` to an HWC uint8 array, with its random values given."""
    fn, _, signed = _OPS[name]
    arg = level_to_arg(name, level)
    if arg is None:
        return fn(image)
    if signed and negate:
        arg = -arg
    if name == "Cutout":
        return fn(image, arg, *cutout_center)
    return fn(image, arg)


class DeepMindRandAugment:
    """``num_layers`` ops drawn uniformly from OPS, each always applied at ``magnitude``.

    Takes and returns an HWC uint8 array (a PIL image is converted). Draws per layer: the op
    index, then for signed ops whether to negate (probability 1/2), for Cutout its centre.
    """

    def __init__(self, num_layers=2, magnitude=10, rng=None):
        self.num_layers = num_layers
        self.magnitude = magnitude
        self.rng = rng

    @classmethod
    def from_level(cls, config_str, rng=None):
        """From DeepMind's augment level, e.g. ``randaugment_415``."""
        num_layers, magnitude = parse_level(config_str)
        return cls(num_layers, magnitude, rng)

    def __call__(self, image, rng=None):
        rng = resolve_rng(rng, self.rng)
        image = np.asarray(image, dtype=np.uint8)
        for _ in range(self.num_layers):
            name = OPS[rng.randint(len(OPS))]
            negate = bool(_OPS[name][2] and rng.random() < 0.5)
            center = None
            if name == "Cutout":
                center = (rng.randint(image.shape[0]), rng.randint(image.shape[1]))
            image = apply_op(image, name, self.magnitude, negate, center)
        return image

    def __repr__(self):
        return f"DeepMindRandAugment(num_layers={self.num_layers}, magnitude={self.magnitude})"
