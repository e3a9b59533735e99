"""Scaled weight-standardized convolution (Brock et al. 2021, eq. 5; timm's ScaledStdConv2dSame).

Two forms of the same standardization, which differ only in where eps enters (`ws_form`):

    timm      w_hat = (w - mean) / sqrt(var + eps) * gain * gamma / sqrt(fan_in)     eps 1e-5
    deepmind  w_hat = (w - mean) * gain * gamma * rsqrt(max(fan_in * var, eps))     eps 1e-4

timm's is what its converted dm_nfnet_* weights are evaluated with; DeepMind's is nfnets/base.py
WSConv2D.standardize_weight, what DeepMind's own weights were trained with. With F0's weights the
two give logits 3 % apart (issue 26), so the form belongs to the weights.
"""
import math

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common.initializer import Normal, Zero, initializer

from .conv2d_same import Conv2dSame
from .rowwise import mul_rows, rowwise


WS_FORMS = ("timm", "deepmind")
WS_EPS = {"timm": 1e-5, "deepmind": 1e-4}  # timm's NFNets; DeepMind's WSConv2D


def check_ws_form(form):
    if form not in WS_FORMS:
        raise ValueError(f"unknown ws_form {form!r}; allowed: {list(WS_FORMS)}")
    return form


class WeightStandardization(nn.Cell):
    """(weight, gain) -> standardized weight in float32, from MindSpore operators.

    A cell of its own so that mixed precision can keep it in float32 (trainers/amp.py): inside
    a float16 cell MindSpore casts the inputs of every operator to float16, so casting the
    weight to float32 within ScaledStdConv2d.construct would be undone by the next operator.
    """

    def __init__(self, scale, eps, form="timm", fan_in=1):
        super().__init__()
        self.scale = scale
        self.eps = eps
        self.form = check_ws_form(form)
        self.fan_in = int(fan_in)
        self.gamma = scale * math.sqrt(self.fan_in)  # scale is gamma / sqrt(fan_in)

    def construct(self, weight, gain):
        w = rowwise(weight.astype(ms.float32))  # (out, in*k*k): see rowwise.py
        centered = w - ops.broadcast_to(ops.mean(w, 1, keep_dims=True), w.shape)
        var = ops.mean(centered * centered, 1, keep_dims=True)
        gain = gain.astype(ms.float32).reshape(-1, 1)
        if self.form == "deepmind":
            factor = ops.rsqrt(ops.maximum(var * self.fan_in, self.eps)) * (gain * self.gamma)
        else:
            factor = ops.rsqrt(var + self.eps) * (gain * self.scale)
        return mul_rows(centered, factor).reshape(weight.shape)


class ScaledStdConv2d(nn.Cell):
    """Conv2d whose weight is standardized per output channel on every call:

        w_hat = (w - mean(w)) / sqrt(var(w) + eps) * gain * gamma / sqrt(fan_in)

    with mean/var over (in, kh, kw) and the population variance, exactly timm's form
    (eps 1e-5 for NFNets), or DeepMind's (ws_form="deepmind", eps None: 1e-4; module docstring). Padding is TensorFlow SAME (`pad_mode='same'`): asymmetric
    (0 before, 1 after) for a 3x3 stride-2 conv on an even input, as DeepMind's weights
    expect. Parameters: weight (out, in/groups, k, k), bias (out,), gain (out, 1, 1, 1),
    named and shaped like timm's so checkpoints move 1:1.
    """

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, groups=1,
                 gamma=1.0, eps=None, gain_init=1.0, ws_form="timm"):
        super().__init__()
        check_ws_form(ws_form)
        eps = WS_EPS[ws_form] if eps is None else eps
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"channels {in_channels}->{out_channels} not divisible by groups={groups}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.groups = groups
        self.eps = eps
        self.ws_form = ws_form
        fan_in = in_channels // groups * kernel_size * kernel_size
        self.scale = gamma / math.sqrt(fan_in)
        shape = (out_channels, in_channels // groups, kernel_size, kernel_size)
        # timm: kaiming_normal_(mode='fan_in', nonlinearity='linear') -> std 1/sqrt(fan_in)
        self.weight = Parameter(initializer(Normal(1.0 / math.sqrt(fan_in)), shape, ms.float32), name="weight")
        self.bias = Parameter(initializer(Zero(), (out_channels,), ms.float32), name="bias")
        self.gain = Parameter(Tensor(np.full((out_channels, 1, 1, 1), gain_init, np.float32)), name="gain")
        # parameter-free cells, so a backend's fast forms can take their place (fast_forms.py)
        self.standardize = WeightStandardization(self.scale, eps, ws_form, fan_in)
        self.conv = Conv2dSame(kernel_size, stride, groups)

    @property
    def conv_impl(self):
        """"native" (the plain form), "matmul" (im2col, the CPU operators' form) or "fused" (the fused CPU kernel)."""
        return self.conv.impl

    def standardized_weight(self):
        """The weight the convolution actually uses (float32, whatever the AMP level)."""
        return self.standardize(self.weight, self.gain)

    def construct(self, x):
        return self.conv(x, self.standardized_weight().astype(x.dtype), self.bias.astype(x.dtype))

    def extend_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, groups={self.groups}, eps={self.eps}, ws_form={self.ws_form}")
