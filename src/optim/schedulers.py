"""Per-step learning-rate schedules as numpy arrays, and the batch-size LR rule.

Every schedule returns a float32 array with one entry per optimizer step
(``epochs * steps_per_epoch`` entries); MindSpore optimizers take such an
array as ``learning_rate`` and use entry t at global step t, so resuming from
a checkpoint (which stores the optimizer's ``global_step``) resumes the
schedule too. Warmup is counted inside the total, as in DeepMind's
``WarmupCosineDecay``: for t < W = warmup_epochs * steps_per_epoch,

    lr_t = warmup_lr + (lr - warmup_lr) * t / W

and the named schedule takes over from step W.
"""
import math

import numpy as np

__all__ = ["scale_lr", "warmup_cosine_lr", "multistep_lr", "exponential_lr", "constant_lr",
           "create_scheduler", "SCHEDULERS"]


def scale_lr(base_lr, global_batch_size, base_batch_size=256):
    """Linear scaling rule: base_lr * global_batch_size / 256 (DeepMind's lr_scale_by_bs).

    ``global_batch_size`` is the number of images behind one optimizer step:
    per-device batch * devices * accumulation_step. Gradient accumulation is
    counted here once and nowhere else (the earlier port also multiplied the
    learning rate by the accumulation steps, scaling it twice).
    """
    return base_lr * global_batch_size / base_batch_size


def _linear_warmup(values, lr, warmup_lr, warmup_steps):
    """Replace the first ``warmup_steps`` entries by the line from warmup_lr towards lr."""
    steps = np.arange(warmup_steps, dtype=np.float64)
    values[:warmup_steps] = warmup_lr + (lr - warmup_lr) * steps / max(warmup_steps, 1)
    return values.astype(np.float32)


def warmup_cosine_lr(lr, min_lr, total_steps, warmup_steps=0, warmup_lr=0.0):
    """DeepMind's WarmupCosineDecay, sampled at steps 0 .. total_steps - 1.

    After the warmup, with c = (t - W) / (total_steps - W):

        lr_t = min_lr + 0.5 * (lr - min_lr) * (1 + cos(pi * c))

    so lr_W = lr and the last step is just above min_lr (min_lr itself would
    be reached at step total_steps, which is never taken). Both branches give
    lr at t = W, where DeepMind picks the warmup one.
    """
    t = np.arange(total_steps, dtype=np.float64)
    progress = (t - warmup_steps) / max(total_steps - warmup_steps, 1)
    values = min_lr + 0.5 * (lr - min_lr) * (1.0 + np.cos(math.pi * progress))
    return _linear_warmup(values, lr, warmup_lr, warmup_steps)


def multistep_lr(lr, steps_per_epoch, total_steps, milestones, gamma=0.1, warmup_steps=0,
                 warmup_lr=0.0):
    """lr * gamma ** (number of milestones <= epoch); milestones in epochs, as in MultiStepLR."""
    epoch = np.arange(total_steps) // steps_per_epoch
    decays = np.searchsorted(np.sort(np.asarray(milestones)), epoch, side="right")
    values = lr * gamma ** decays.astype(np.float64)
    return _linear_warmup(values, lr, warmup_lr, warmup_steps)


def exponential_lr(lr, steps_per_epoch, total_steps, gamma, warmup_steps=0, warmup_lr=0.0):
    """lr * gamma ** (whole epochs since the warmup ended), DeepMind's WarmupExpDecay per epoch."""
    t = np.arange(total_steps)
    decays = np.maximum(t - warmup_steps, 0) // steps_per_epoch
    values = lr * gamma ** decays.astype(np.float64)
    return _linear_warmup(values, lr, warmup_lr, warmup_steps)


def constant_lr(lr, total_steps, warmup_steps=0, warmup_lr=0.0):
    """lr at every step, after the optional linear warmup."""
    values = np.full(total_steps, lr, dtype=np.float64)
    return _linear_warmup(values, lr, warmup_lr, warmup_steps)


SCHEDULERS = ("warmup_cosine", "multistep", "exponential", "constant")


def create_scheduler(steps_per_epoch, scheduler="warmup_cosine", lr=0.1, min_lr=0.0,
                     warmup_epochs=0, warmup_lr=0.0, epochs=360, milestones=None, gamma=0.1):
    """Per-step learning rates for a whole run.

    Args:
        steps_per_epoch: optimizer steps per epoch (after accumulation).
        scheduler: "warmup_cosine", "multistep", "exponential" or "constant".
        lr: peak learning rate, usually ``scale_lr(base_lr, global_batch)``.
        min_lr: final value of the cosine ("warmup_cosine" only).
        warmup_epochs: length of the linear warmup, in epochs (may be
            fractional; rounded to whole steps), counted inside ``epochs``.
        warmup_lr: learning rate at step 0 of the warmup.
        epochs: total epochs, warmup included.
        milestones: epochs at which "multistep" multiplies by ``gamma``.
        gamma: decay factor of "multistep" (per milestone) and
            "exponential" (per epoch).

    Returns:
        float32 numpy array of length ``epochs * steps_per_epoch``.
    """
    if scheduler not in SCHEDULERS:
        raise ValueError(f"unknown scheduler '{scheduler}'; choose one of {', '.join(SCHEDULERS)}")
    if steps_per_epoch < 1 or epochs < 1:
        raise ValueError(f"steps_per_epoch and epochs must be >= 1, "
                         f"got {steps_per_epoch} and {epochs}")
    total_steps = int(epochs * steps_per_epoch)
    warmup_steps = int(round(warmup_epochs * steps_per_epoch))
    if not 0 <= warmup_steps <= total_steps:
        raise ValueError(f"warmup_epochs={warmup_epochs} must lie between 0 and epochs={epochs}")
    if scheduler == "multistep" and milestones is None:
        raise ValueError("the multistep scheduler needs milestones (epochs)")
    warmup = {"warmup_steps": warmup_steps, "warmup_lr": warmup_lr}
    build = {
        "warmup_cosine": lambda: warmup_cosine_lr(lr, min_lr, total_steps, **warmup),
        "multistep": lambda: multistep_lr(lr, steps_per_epoch, total_steps, milestones, gamma,
                                          **warmup),
        "exponential": lambda: exponential_lr(lr, steps_per_epoch, total_steps, gamma, **warmup),
        "constant": lambda: constant_lr(lr, total_steps, **warmup),
    }
    return build[scheduler]()
