"""Mixup and CutMix with DeepMind's NFNet semantics (nfnets/dataset.py), then RandAugment.

DeepMind (augment_name 'cutmix_mixup_randaugment_405', augment_before_mix False) batches 2B
cropped, flipped and resized images (TensorFlow's bicubic: unclamped floats, src/data/tf_image.py),
draws for every image a Mixup ratio ~ Beta(alpha, alpha) and a CutMix box, and builds B examples: with q = B / 2, examples 0..q-1 are Mixup of images i and
q + i, examples q..2q-1 are CutMix of images 2q + i and 3q + i (``my_mixup_cutmix``). Only
then is RandAugment applied to each mixed image (clipped to 0..255 and truncated to uint8
first), and the image normalized. The target of an example is
``ratio * onehot(label) + (1 - ratio) * onehot(mix_label)``, label-smoothed afterwards
(experiment.py ``_loss_fn``); for CutMix the ratio is the box's area fraction, the box
holding the first image.

Here an example is built from an image pair (image, mix_image), so the batch holds B pairs
and no image is dropped; the folder source (src/data/sources.py) draws the two images of a pair
from two independent shuffles, which pairs images as DeepMind's shuffled stream does.
How this differs from timm's Mixup (mixup.py): timm mixes the batch with itself reversed,
one lambda per batch by default, Mixup or CutMix for the whole batch, with CutMix boxes of
area Beta(alpha, alpha) and RandAugment before mixing.
"""
from typing import NamedTuple

import numpy as np

from .random_state import call_step, resolve_rng, takes_rng

MEAN_RGB = (0.485 * 255, 0.456 * 255, 0.406 * 255)  # nfnets/dataset.py
STDDEV_RGB = (0.229 * 255, 0.224 * 255, 0.225 * 255)


class MixDraws(NamedTuple):
    """The random values of one batch, one entry per example."""

    mixup_ratio: np.ndarray  # float32 (B,), Beta(alpha, alpha)
    center_y: np.ndarray  # int (B,), CutMix box centre row in [0, H)
    center_x: np.ndarray  # int (B,), centre column in [0, W)
    proportion: np.ndarray  # float32 (B,), uniform [0, 1): 1 - proportion is the box side ratio squared


def cutmix_mask(height, width, center_y, center_x, proportion):
    """DeepMind's ``cutmix_padding``: a float32 (H, W, 1) mask, 1 inside a box of side
    ``int(sqrt(1 - proportion) * side)`` centred at (center_y, center_x), clipped to the image."""
    side_ratio = np.sqrt(np.float32(1.0) - np.float32(proportion))
    cut_w = int(side_ratio * np.float32(width))
    cut_h = int(side_ratio * np.float32(height))
    x1, x2 = np.clip([center_x - cut_w // 2, center_x + cut_w // 2], 0, width)
    y1, y2 = np.clip([center_y - cut_h // 2, center_y + cut_h // 2], 0, height)
    mask = np.zeros((height, width, 1), dtype=np.float32)
    mask[y1:y2, x1:x2] = 1.0
    return mask


def normalize(image):
    """HWC 0..255 -> float32 CHW, (x - MEAN_RGB) / STDDEV_RGB as nfnets/dataset.py _normalize_image."""
    x = np.asarray(image, dtype=np.float32)
    x = (x - np.asarray(MEAN_RGB, np.float32)) / np.asarray(STDDEV_RGB, np.float32)
    return np.ascontiguousarray(x.transpose(2, 0, 1))


class AugmentNormalize:
    """DeepMind's ``augment_normalize`` (nfnets/dataset.py ``_augment_image``, ``_normalize_image``) of one HWC
    image, uint8 or float: with ``augment`` (e.g. DeepMindRandAugment), clip to 0..255, truncate to uint8 and
    augment; then normalize to float32 CHW. Without ``augment`` the image is normalized unclipped, as there."""

    def __init__(self, augment=None):
        self.augment = augment
        self.augment_takes_rng = takes_rng(augment)

    def __call__(self, image, rng=None):
        if self.augment is not None:
            image = call_step(self.augment, np.clip(image, 0.0, 255.0).astype(np.uint8), rng, self.augment_takes_rng)
        return normalize(image)


class DeepMindMixupCutMix:
    """Mix image pairs per example (first half Mixup, second half CutMix), then augment and normalize.

    Args:
        mixup_alpha: Beta(alpha, alpha) of the Mixup ratio (DeepMind: 0.2); 0 turns Mixup off.
        cutmix: CutMix on (DeepMind's box area is uniform, i.e. alpha 1).
        num_classes: width of the targets.
        label_smoothing: applied to the mixed targets.
        augment: per-image callable on an HWC uint8 array (e.g. DeepMindRandAugment), run after
            mixing on the clipped and truncated image; None: no augmentation.
        rng: default np.random.RandomState; one passed to the call wins, None: NumPy's global state
            (see random_state.py).

    With both on the batch size must be even (half Mixup, half CutMix).
    """

    mixes_pairs = True  # create_dataset feeds (image, mix_image, label, mix_label) batches

    def __init__(self, mixup_alpha=0.2, cutmix=True, num_classes=1000, label_smoothing=0.1, augment=None,
                 rng=None):
        if mixup_alpha <= 0 and not cutmix:
            raise ValueError("DeepMindMixupCutMix needs mixup_alpha > 0 or cutmix")
        self.mixup_alpha = mixup_alpha
        self.cutmix = cutmix
        self.num_classes = num_classes
        self.label_smoothing = label_smoothing
        self.augment = augment
        self.rng = rng

    def num_mixup(self, batch_size):
        """Examples 0..n-1 use Mixup, the rest CutMix."""
        if not self.cutmix:
            return batch_size
        if self.mixup_alpha <= 0:
            return 0
        if batch_size % 2:
            raise ValueError(f"Mixup and CutMix split the batch in halves: batch size must be even, got {batch_size}")
        return batch_size // 2

    def draw(self, batch_size, height, width, rng=None):
        rng = resolve_rng(rng, self.rng)
        alpha = self.mixup_alpha if self.mixup_alpha > 0 else 1.0
        return MixDraws(rng.beta(alpha, alpha, size=batch_size).astype(np.float32),
                        rng.randint(0, height, size=batch_size), rng.randint(0, width, size=batch_size),
                        rng.random(batch_size).astype(np.float32))

    def mix(self, images, mix_images, draws):
        """(float32 BHWC mixed images, float32 (B,) ratio of the first image's label)."""
        a = np.asarray(images, dtype=np.float32)
        b = np.asarray(mix_images, dtype=np.float32)
        n_mixup = self.num_mixup(len(a))
        ratio = draws.mixup_ratio.copy()
        mixed = np.empty_like(a)
        for i in range(len(a)):
            if i < n_mixup:
                mixed[i] = ratio[i] * a[i] + (np.float32(1.0) - ratio[i]) * b[i]
            else:
                mask = cutmix_mask(a.shape[1], a.shape[2], draws.center_y[i], draws.center_x[i],
                                   draws.proportion[i])
                mixed[i] = mask * a[i] + (np.float32(1.0) - mask) * b[i]
                ratio[i] = mask.mean(dtype=np.float32)
        return mixed, ratio

    def targets(self, labels, mix_labels, ratio):
        eye = np.eye(self.num_classes, dtype=np.float32)
        r = np.asarray(ratio, dtype=np.float32)[:, None]
        y = r * eye[np.asarray(labels)] + (np.float32(1.0) - r) * eye[np.asarray(mix_labels)]
        return (np.float32(1.0 - self.label_smoothing) * y + np.float32(self.label_smoothing / self.num_classes))

    def __call__(self, images, mix_images, labels, mix_labels, rng=None):
        """Pairs of HWC images (uint8 or float) and int labels -> (float32 NCHW batch, float32 targets)."""
        images = np.asarray(images)
        if images.ndim != 4 or np.shape(mix_images) != images.shape:
            raise ValueError(f"expected two BHWC batches of one shape, got {images.shape} and {np.shape(mix_images)}")
        rng = resolve_rng(rng, self.rng)
        draws = self.draw(len(images), images.shape[1], images.shape[2], rng)
        mixed, ratio = self.mix(images, mix_images, draws)
        augment_normalize = AugmentNormalize(self.augment)
        out = np.stack([augment_normalize(image, rng) for image in mixed])
        return out, self.targets(labels, mix_labels, ratio)
