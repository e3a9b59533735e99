"""Stochastic depth (per-sample residual-branch dropout)."""
from mindspore import nn, ops

from .rowwise import MulRows


class DropPath(nn.Cell):
    """Drops the whole residual branch of a sample with probability `drop_prob` in training.

    scale_by_keep=False is DeepMind's StochDepth (nfnets/base.py): the kept branches are
    not rescaled. scale_by_keep=True is timm's DropPath: kept branches are divided by the
    keep probability so the expectation is unchanged.
    """

    def __init__(self, drop_prob=0.0, scale_by_keep=False):
        super().__init__()
        if not 0.0 <= drop_prob < 1.0:
            raise ValueError(f"drop_prob must be in [0, 1), got {drop_prob}")
        self.keep_prob = 1.0 - float(drop_prob)
        self.scale_by_keep = scale_by_keep
        self.mul_rows = MulRows()

    def construct(self, x):
        if not self.training or self.keep_prob == 1.0:
            return x
        mask = ops.floor(self.keep_prob + ops.rand((x.shape[0], 1), dtype=x.dtype))
        if self.scale_by_keep:
            mask = mask / self.keep_prob
        return self.mul_rows(x.reshape(x.shape[0], -1), mask).reshape(x.shape)  # see rowwise.py

    def extend_repr(self):
        return f"drop_prob={1.0 - self.keep_prob:.4f}, scale_by_keep={self.scale_by_keep}"
