"""Stochastic depth (per-sample residual-branch dropout)."""
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
        mask = (ops.standard_normal((x.shape[0], 1)) < self.keep_quantile).astype(x.dtype)
        if self.scale_by_keep:
            mask = mask / self.keep_prob
        return self.mul_rows(x.reshape(x.shape[0], -1), mask).reshape(x.shape)  # see rowwise.py

    def extend_repr(self):
        return f"drop_prob={1.0 - self.keep_prob:.4f}, scale_by_keep={self.scale_by_keep}"
