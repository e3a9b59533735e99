"""Augmentations in NumPy and PIL: timm's RandAugment, random erasing and Mixup/CutMix, and
DeepMind's NFNet RandAugment and Mixup/CutMix (deepmind_*.py).

Every random step takes an ``rng`` (given when built or, winning, when called); see
random_state.py for seeding and worker processes.
"""
from .deepmind_mix import AugmentNormalize, DeepMindMixupCutMix
from .deepmind_rand_augment import DeepMindRandAugment
from .mixup import Mixup, cutmix_bbox_and_lam, mixup_target, rand_bbox, rand_bbox_minmax
from .rand_augment import (INCREASING_OPS, STANDARD_OPS, AugmentOp, RandAugment, parse_rand_augment,
                           rand_augment_transform)
from .random_erasing import RandomErasing

__all__ = [
    "AugmentNormalize", "AugmentOp", "DeepMindMixupCutMix", "DeepMindRandAugment", "INCREASING_OPS", "Mixup", "RandAugment", "RandomErasing", "STANDARD_OPS",
    "cutmix_bbox_and_lam", "mixup_target", "parse_rand_augment", "rand_augment_transform", "rand_bbox", "rand_bbox_minmax",
]
