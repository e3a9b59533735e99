"""timm-compatible augmentations in NumPy and PIL: RandAugment, random erasing, Mixup/CutMix.

Randomness comes from NumPy's global state unless an ``rng`` is passed; see
random_state.py for seeding and worker processes.
"""
from .mixup import Mixup, cutmix_bbox_and_lam, mixup_target, rand_bbox, rand_bbox_minmax
from .rand_augment import INCREASING_OPS, STANDARD_OPS, AugmentOp, RandAugment, rand_augment_transform
from .random_erasing import RandomErasing

__all__ = [
    "AugmentOp", "INCREASING_OPS", "Mixup", "RandAugment", "RandomErasing", "STANDARD_OPS",
    "cutmix_bbox_and_lam", "mixup_target", "rand_augment_transform", "rand_bbox", "rand_bbox_minmax",
]
