"""Squeeze-and-excitation gating."""
import math

import mindspore as ms
from mindspore import nn, ops
from mindspore.common.initializer import Normal, Zero

from . import cpu_kernels
from .rowwise import mean_hw, rowwise, scale_channels


class SqueezeExcite(nn.Cell):
    """x * sigmoid(fc2(relu(fc1(mean_hw(x))))), with plain (not standardized) 1x1 convs.

    Names fc1/fc2 and their shapes follow timm's SEModule so weights move 1:1. The SE
    output is computed in float32 (the gate is sensitive to low precision under AMP).
    """

    def __init__(self, channels, rd_channels):
        super().__init__()
        self.fc1 = nn.Conv2d(channels, rd_channels, 1, has_bias=True,
                             weight_init=Normal(1.0 / math.sqrt(channels)), bias_init=Zero())
        self.fc2 = nn.Conv2d(rd_channels, channels, 1, has_bias=True,
                             weight_init=Normal(1.0 / math.sqrt(rd_channels)), bias_init=Zero())
        self.fused_mul_rows = cpu_kernels.FusedMulRows() if cpu_kernels.available() else None  # CPU

    def construct(self, x):
        # The 1x1 convs on a 1x1 map are dense layers: MindSpore's CPU conv kernel is very
        # slow on 1x1 feature maps (measured: minutes for a train step), a matmul is not.
        s = ops.relu(ops.dense(mean_hw(x), rowwise(self.fc1.weight), self.fc1.bias))
        s = ops.sigmoid(ops.dense(s, rowwise(self.fc2.weight), self.fc2.bias))
        if self.fused_mul_rows is not None and x.dtype == s.dtype == ms.float32:
            n, c = x.shape[0], x.shape[1]
            return self.fused_mul_rows(x.reshape(n * c, -1), s.reshape(n * c, 1)).reshape(x.shape)
        return scale_channels(x, s)
