"""The PIL image operations RandAugment chooses from, with explicit arguments.

Each function maps a PIL image and the operation's argument to a new image.
No randomness here: the sign, interpolation and magnitude are decided by
rand_augment.py, which makes every operation testable at a fixed argument.
Geometric operations take ``resample`` (a PIL filter) and ``fill`` (the color
of pixels that come from outside the image).
"""
import numpy as np
from PIL import Image, ImageEnhance, ImageOps


def _affine(img, matrix, resample, fill):
    """Apply PIL's inverse affine map: output (x, y) samples input (a x + b y + c, d x + e y + f)."""
    return img.transform(img.size, Image.Transform.AFFINE, matrix, resample=resample, fillcolor=fill)


def shear_x(img, factor, resample, fill):
    return _affine(img, (1, factor, 0, 0, 1, 0), resample, fill)


def shear_y(img, factor, resample, fill):
    return _affine(img, (1, 0, 0, factor, 1, 0), resample, fill)


def translate_x_rel(img, fraction, resample, fill):
    """Shift by ``fraction`` of the width; positive moves the content left."""
    return _affine(img, (1, 0, fraction * img.size[0], 0, 1, 0), resample, fill)


def translate_y_rel(img, fraction, resample, fill):
    """Shift by ``fraction`` of the height; positive moves the content up."""
    return _affine(img, (1, 0, 0, 0, 1, fraction * img.size[1]), resample, fill)


def rotate(img, degrees, resample, fill):
    """Rotate counter-clockwise about the center, keeping the image size."""
    return img.rotate(degrees, resample=resample, fillcolor=fill)


def auto_contrast(img):
    return ImageOps.autocontrast(img)


def equalize(img):
    return ImageOps.equalize(img)


def invert(img):
    return ImageOps.invert(img)


def posterize(img, bits):
    """Keep the ``bits`` most significant bits of each channel; 0 bits gives black.

    Written as a lookup table because recent Pillow (13.0 here) rejects bits=0
    in ImageOps.posterize, which timm's level mappings produce (Posterize below
    m=2.5, PosterizeIncreasing at m=10) and where older Pillow returned black.
    """
    if bits >= 8:
        return img
    keep_mask = 0xFF & ~((1 << (8 - bits)) - 1)
    lut = [value & keep_mask for value in range(256)]
    return img.point(lut * len(img.getbands()))


def solarize(img, threshold):
    """Invert every value >= ``threshold``; 256 leaves the image unchanged."""
    return ImageOps.solarize(img, threshold)


def solarize_add(img, add, threshold=128):
    """Add ``add`` (saturating at 255) to every value below ``threshold``."""
    if img.mode not in ("L", "RGB"):
        return img
    values = np.arange(256)
    lut = np.where(values < threshold, np.minimum(values + add, 255), values)
    return img.point(lut.tolist() * len(img.getbands()))


def color(img, factor):
    """Blend with the grayscale image: 0 is gray, 1 is unchanged, >1 saturates."""
    return ImageEnhance.Color(img).enhance(factor)


def contrast(img, factor):
    """Blend with the mean gray level: 0 is flat gray, 1 is unchanged."""
    return ImageEnhance.Contrast(img).enhance(factor)


def brightness(img, factor):
    """Blend with black: 0 is black, 1 is unchanged."""
    return ImageEnhance.Brightness(img).enhance(factor)


def sharpness(img, factor):
    """Blend with a smoothed copy: 0 is smoothed, 1 is unchanged, >1 sharpens."""
    return ImageEnhance.Sharpness(img).enhance(factor)
