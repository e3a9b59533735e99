"""Squeeze-and-excitation gating."""
import math

from mindspore import nn, ops
from mindspore.common.initializer import Normal, Zero

from .rowwise import MulRows, MulRowsAdd, SqueezeHW, rowwise


class DenseAct(nn.Cell):
    """act(x @ W.T + b), act "relu" or "sigmoid", for x (N, I) and a 1x1 convolution's (O, I, 1, 1) weight or
    its (O, I) matrix: an SE's fc1 and fc2 as dense layers, a cell so that a backend's fast form can take its
    place (fast_forms.py: one that reads the 4-D weight where it is, without a reshape copy)."""

    def __init__(self, act):
        super().__init__()
        if act not in ("relu", "sigmoid"):
            raise ValueError(f"DenseAct: act must be 'relu' or 'sigmoid', got {act!r}")
        self.act = act

    def construct(self, x, weight, bias):
        y = ops.dense(x, rowwise(weight), bias)
        return ops.relu(y) if self.act == "relu" else ops.sigmoid(y)


class SqueezeExcite(nn.Cell):
    """x * sigmoid(fc2(relu(fc1(mean_hw(x))))) * scale, with plain (not standardized) 1x1 convs.

    `scale` (default 1) is a number, a scalar tensor or one factor per sample (N, 1), multiplied
    into the (N, C) gate: a block's later per-sample and scalar factors cost no pass over x.
    `addend` (x's shape), when given, is added to the result: a block's shortcut, in the same pass.

    Names fc1/fc2 and their shapes follow timm's SEModule so weights move 1:1. The SE
    output is computed in float32 (the gate is sensitive to low precision under AMP).
    """

    def __init__(self, channels, rd_channels):
        super().__init__()
        self.fc1 = nn.Conv2d(channels, rd_channels, 1, has_bias=True,
                             weight_init=Normal(1.0 / math.sqrt(channels)), bias_init=Zero())
        self.fc2 = nn.Conv2d(rd_channels, channels, 1, has_bias=True,
                             weight_init=Normal(1.0 / math.sqrt(rd_channels)), bias_init=Zero())
        self.squeeze = SqueezeHW()
        self.reduce = DenseAct("relu")
        self.expand = DenseAct("sigmoid")
        self.mul_rows = MulRows()
        self.mul_rows_add = MulRowsAdd()

    def construct(self, x, scale=1.0, addend=None):
        # The 1x1 convs on a 1x1 map are dense layers: MindSpore's CPU conv kernel is very
        # slow on 1x1 feature maps (measured: minutes for a train step), a matmul is not.
        s, x = self.squeeze(x)
        s = self.expand(self.reduce(s, self.fc1.weight, self.fc1.bias), self.fc2.weight, self.fc2.bias) * scale
        if addend is None:
            return self.mul_rows(x, s)  # one row per (sample, channel): see rowwise.py
        return self.mul_rows_add(x, s, addend)
