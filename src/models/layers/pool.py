"""Global average pooling written as a last-axis reduction.

MindSpore 2.10's CPU ReduceMean/ReduceSum over several axes, or over all of them, is
slow: measured here (2 threads) 24 ms for the mean over (2, 3) of an 8x256x48x48 tensor,
against 3.5 ms for the same mean over the last axis of its (8*256, 48*48) view, and
12 ms against 1.2 ms for a 1536x128x3x3 weight. Every reduction in the model and the
optimizer is therefore taken over the last axis of a 2-D view.
"""
from mindspore import ops


def mean_hw(x, keep_dims=False):
    """Mean of an NCHW tensor over H and W: (N, C) or, with keep_dims, (N, C, 1, 1)."""
    n, c = x.shape[0], x.shape[1]
    m = ops.mean(x.reshape(n * c, -1), 1)
    return m.reshape(n, c, 1, 1) if keep_dims else m.reshape(n, c)


def rowwise(x):
    """The (shape[0], -1) view of x: one row per output unit / channel."""
    return x.reshape(x.shape[0], -1)
