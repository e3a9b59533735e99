"""Reductions and broadcasts over the rows of 2-D views: the shapes MindSpore's CPU kernels run well.

Measured with MindSpore 2.10's CPU backend (2 threads):
- ReduceMean/ReduceSum over several axes, or over all of them, is slow: 24 ms for the mean
  over (2, 3) of an 8x256x48x48 tensor, 3.5 ms for the same mean over the last axis of its
  (8*256, 48*48) view; 12 ms against 1.2 ms for a 1536x128x3x3 weight.
- A binary op that broadcasts (an (8, 256, 48, 48) tensor times a (1, 256, 1, 1) one) keeps
  an output-sized buffer per op for the life of the graph (+75 MB per such Mul); with the
  broadcast made explicit (broadcast_to, then a same-shape op) the memory is released.
So every per-row statistic is taken over the last axis of an (R, K) view and every per-row
factor is broadcast explicitly; the backward of broadcast_to is then a last-axis sum too.
"""
from mindspore import nn, ops


def rowwise(x):
    """The (shape[0], -1) view of x: one row per output unit / channel."""
    return x.reshape(x.shape[0], -1)


def mul_rows(rows, factor):
    """rows (R, K) times factor (R, 1), broadcast explicitly (see above)."""
    return rows * ops.broadcast_to(factor, rows.shape)


def scale_rows(x, factor):
    """x (any shape) viewed as (R, K), R = factor.size, times factor: an (R, 1) factor, or (N, C) for
    an NCHW x (one factor per sample and channel); the result has x's shape."""
    rows = factor.size
    return mul_rows(x.reshape(rows, -1), factor.reshape(rows, 1)).reshape(x.shape)


class MulRows(nn.Cell):
    """`scale_rows` as a cell, so a backend's fast form can take its place (fast_forms.py)."""

    def construct(self, x, factor):
        return scale_rows(x, factor)


class MulRowsAdd(nn.Cell):
    """scale_rows(x, factor) + addend (x's shape): an NF block's gated branch plus its shortcut, a
    cell so that a backend's fast form can do both in one pass (fast_forms.py)."""

    def construct(self, x, factor, addend):
        return scale_rows(x, factor) + addend


def mean_hw(x, keep_dims=False):
    """Mean of an NCHW tensor over H and W: (N, C) or, with keep_dims, (N, C, 1, 1)."""
    n, c = x.shape[0], x.shape[1]
    m = ops.mean(x.reshape(n * c, -1), 1)
    return m.reshape(n, c, 1, 1) if keep_dims else m.reshape(n, c)


class SqueezeHW(nn.Cell):
    """(mean_hw(x), x): the SE squeeze (N, C) and the tensor it gates, from one cell, so that a backend's
    fast form can take its place (fast_forms.py) and add the two gradients of x in its own backward pass
    (autodiff adds them in an AddN pass of its own)."""

    def construct(self, x):
        return mean_hw(x), x


def scale_channels(x, scale):
    """NCHW x times a per-(sample, channel) scale of shape (N, C) or (N, C, 1, 1)."""
    n, c = x.shape[0], x.shape[1]
    return mul_rows(x.reshape(n * c, -1), scale.reshape(n * c, 1)).reshape(x.shape)
