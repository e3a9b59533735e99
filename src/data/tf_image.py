"""TensorFlow's image ops that DeepMind's NFNet input pipeline (nfnets/dataset.py) runs, in NumPy.

``sample_distorted_bounding_box``: the sampling of ``tf.image.sample_distorted_bounding_box``
(tensorflow/core/kernels/image/sample_distorted_bounding_box_op.cc) with one bounding box, the
whole image, as DeepMind passes it. Random values come from a ``np.random.RandomState`` in place
of TensorFlow's Philox stream, so single draws differ from TensorFlow's and their distribution
does not. How it differs from timm's RandomResizedCrop: the aspect ratio is uniform (not
log-uniform), the crop's *height* is uniform between the smallest and largest that fit the area
range (not its area), the area is checked against ``min_object_covered`` of the image, and the
offsets are uniform in [0, H - h) (the bottom and right edges are reached only by full-size crops).

``resize_bicubic``: ``tf.image.resize(..., BICUBIC)`` (antialias False, so ResizeBicubic with
half_pixel_centers): Keys' cubic (a = -0.5) from a 1024-entry table, taps outside the image
dropped and the rest renormalized, no antialiasing, float32 output that is not clamped (values
below 0 and above 255 survive).
"""
import math

import numpy as np

_TABLE_SIZE = 1024


def _lrint(x):
    """lrintf: nearest integer, halves to even."""
    return int(np.rint(np.float32(x)))


def _random_crop(width, height, min_area_fraction, max_area_fraction, aspect, rng):
    """GenerateRandomCrop: (top, left, h, w) with w = round(aspect * h), or None."""
    f32 = np.float32
    min_area = f32(f32(min_area_fraction) * f32(width)) * f32(height)
    max_area = f32(f32(max_area_fraction) * f32(width)) * f32(height)
    crop_h = _lrint(np.sqrt(f32(min_area / aspect)))
    max_h = _lrint(np.sqrt(f32(max_area / aspect)))
    if _lrint(f32(max_h) * aspect) > width:  # the largest height whose rounded width still fits
        max_h = int((width + 0.5 - float(f32(1e-7))) / float(aspect))
        if _lrint(f32(max_h) * aspect) > width:
            max_h -= 1
    max_h = min(max_h, height)
    crop_h = min(crop_h, max_h)
    if crop_h < max_h:
        crop_h += rng.randint(max_h - crop_h + 1)
    crop_w = _lrint(f32(crop_h) * aspect)
    area = f32(crop_w * crop_h)
    if area < min_area:  # rounding: one pixel taller, then one shorter
        crop_h += 1
        crop_w = _lrint(f32(crop_h) * aspect)
        area = f32(crop_w * crop_h)
    if area > max_area:
        crop_h -= 1
        crop_w = _lrint(f32(crop_h) * aspect)
        area = f32(crop_w * crop_h)
    if area < min_area or area > max_area or not (0 < crop_w <= width and 0 < crop_h <= height):
        return None
    top = rng.randint(height - crop_h) if crop_h < height else 0
    left = rng.randint(width - crop_w) if crop_w < width else 0
    return top, left, crop_h, crop_w


def sample_distorted_bounding_box(height, width, rng, min_object_covered=0.1, aspect_ratio_range=(0.75, 1.33),
                                  area_range=(0.05, 1.0), max_attempts=100):
    """(top, left, crop_height, crop_width) as tf.image.sample_distorted_bounding_box with the bounding box
    [0, 0, 1, 1] (the same as none with use_image_if_no_bounding_boxes): the first of ``max_attempts``
    crops whose area is at least ``min_object_covered`` of the image, else the whole image."""
    low, high = np.float32(aspect_ratio_range[0]), np.float32(aspect_ratio_range[1])
    image_area = np.float32(height * width)
    for _ in range(max_attempts):
        aspect = np.float32(rng.random()) * (high - low) + low
        box = _random_crop(width, height, area_range[0], area_range[1], aspect, rng)
        if box is not None and box[2] * box[3] >= 1 and \
                np.float32(box[2] * box[3]) / image_area >= np.float32(min_object_covered):
            return box
    return 0, 0, height, width


def _cubic_weights(scale, out_size, in_size):
    """Per output index: the 4 input indices and float32 weights of ResizeBicubic (half-pixel, Keys a = -0.5)."""
    a = -0.5
    x = np.arange(_TABLE_SIZE + 1, dtype=np.float64) / _TABLE_SIZE  # InitCoeffsTable: computed in double
    near = (((a + 2) * x - (a + 3)) * x * x + 1).astype(np.float32)
    x = x + 1.0
    far = ((((a * x) - 5 * a) * x + 8 * a) * x - 4 * a).astype(np.float32)
    in_loc = (np.arange(out_size, dtype=np.float32) + np.float32(0.5)) * np.float32(scale) - np.float32(0.5)
    base = np.floor(in_loc).astype(np.int64)
    offset = np.rint((in_loc - base.astype(np.float32)) * np.float32(_TABLE_SIZE)).astype(np.int64)
    taps = base[:, None] + np.arange(-1, 3)
    weights = np.stack([far[offset], near[offset], near[_TABLE_SIZE - offset], far[_TABLE_SIZE - offset]], axis=1)
    inside = (taps >= 0) & (taps < in_size)
    weights = np.where(inside, weights, np.float32(0))
    total = weights[:, 0] + weights[:, 1] + weights[:, 2] + weights[:, 3]
    weights = weights * (np.float32(1) / total)[:, None]
    return np.clip(taps, 0, in_size - 1), weights.astype(np.float32)


def _interpolate(values, taps, weights, axis):
    """sum_k values[.., taps[:, k], ..] * weights[:, k] along ``axis``, in float32 and in TensorFlow's order
    (k = 0..3)."""
    shape = [1] * values.ndim
    shape[axis] = -1
    index = [slice(None)] * values.ndim
    total = None
    for k in range(4):
        index[axis] = taps[:, k]
        term = values[tuple(index)] * weights[:, k].reshape(shape)
        total = term if total is None else total + term
    return total


def resize_bicubic(image, height, width):
    """HWC image (any dtype) -> float32 (height, width, C), as tf.image.resize(image, (height, width), 'bicubic').

    TensorFlow interpolates each output pixel's 4 rows first, then the 4 columns; here the same two
    passes run over whole axes, channels first (gathering along the last axis is the fast one).
    """
    image = np.asarray(image)
    in_h, in_w = image.shape[:2]
    rows, row_weights = _cubic_weights(np.float32(in_h) / np.float32(height), height, in_h)
    cols, col_weights = _cubic_weights(np.float32(in_w) / np.float32(width), width, in_w)
    planes = np.ascontiguousarray(np.moveaxis(image, -1, 0), dtype=np.float32)  # (C, H, W)
    vertical = _interpolate(planes, rows, row_weights, axis=1)
    return np.ascontiguousarray(np.moveaxis(_interpolate(vertical, cols, col_weights, axis=2), 0, -1))
