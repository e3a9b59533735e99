"""Stochastic depth (per-sample residual-branch dropout) and element-wise dropout, with reproducible draws.

Both draw from StandardNormal: a value is kept when its draw is below the keep probability's
normal quantile (P = keep_prob exactly). MindSpore 2.10's CPU StandardNormal kernel seeds one
engine per task of its parallel launch from the op's seed, so a run repeats its draws exactly
(for a given kernel thread count). Its CPU Dropout kernel does not: the threads of its parallel
launch share one random engine, so the mask depends on their scheduling. Measured with two
kernel threads, 300 calls of nn.Dropout(p=0.1) on a (32, 1536) tensor after
mindspore.set_seed(0): a second process differed from the first in 286 and 9 of the 300 calls
(with one kernel thread: in none), and so did two demo trainings from their 6th-12th step;
StandardNormal differed in none.
"""
from statistics import NormalDist

from mindspore import nn, ops

from .rowwise import MulRows


class DropPath(nn.Cell):
    """Drops the whole residual branch of a sample with probability `drop_prob` in training.

    scale_by_keep=False is DeepMind's StochDepth (nfnets/base.py): the kept branches are
    not rescaled. scale_by_keep=True is timm's DropPath: kept branches are divided by the
    keep probability so the expectation is unchanged.

    A sample is kept when a standard normal draw is below the keep probability's quantile
    (P = keep_prob exactly). StandardNormal follows mindspore.set_seed and runs on every
    backend; ops.rand (UniformReal) is deprecated in MindSpore 2.10 and its replacement
    mint.rand has no CPU kernel, and ops.bernoulli ignores the global seed (measured).
    """

    def __init__(self, drop_prob=0.0, scale_by_keep=False):
        super().__init__()
        if not 0.0 <= drop_prob < 1.0:
            raise ValueError(f"drop_prob must be in [0, 1), got {drop_prob}")
        self.keep_prob = 1.0 - float(drop_prob)
        self.keep_quantile = NormalDist().inv_cdf(self.keep_prob) if drop_prob > 0 else 0.0
        self.scale_by_keep = scale_by_keep
        self.mul_rows = MulRows()

    def construct(self, x):
        if not self.training or self.keep_prob == 1.0:
            return x
        mask = self._mask(x.shape[0], x.dtype)
        return self.mul_rows(x, mask)  # one row per sample: see rowwise.py

    def mask_scale(self, scale, batch):
        """`scale` times the (batch, 1) factors construct() multiplies the samples by (in
        training), for a caller that applies them together with its own per-sample factors."""
        if not self.training or self.keep_prob == 1.0:
            return scale
        return self._mask(batch, scale.dtype) * scale

    def _mask(self, batch, dtype):
        mask = (ops.standard_normal((batch, 1)) < self.keep_quantile).astype(dtype)
        return mask / self.keep_prob if self.scale_by_keep else mask

    def extend_repr(self):
        return f"drop_prob={1.0 - self.keep_prob:.4f}, scale_by_keep={self.scale_by_keep}"


class Dropout(nn.Cell):
    """Element-wise dropout as nn.Dropout(p) (kept values scaled by 1 / (1 - p)), reproducible (see above)."""

    def __init__(self, p=0.0):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"p must be in [0, 1), got {p}")
        self.keep_prob = 1.0 - float(p)
        self.keep_quantile = NormalDist().inv_cdf(self.keep_prob) if p > 0 else 0.0

    def construct(self, x):
        if not self.training or self.keep_prob == 1.0:
            return x
        mask = (ops.standard_normal(x.shape) < self.keep_quantile).astype(x.dtype)
        return x * mask * (1.0 / self.keep_prob)

    def extend_repr(self):
        return f"p={1.0 - self.keep_prob:.4f}"
