"""Activations scaled by the NF "gamma" that keeps unit variance for N(0, 1) inputs."""
from mindspore import nn, ops

# gamma = 1 / std(act(z)) for z ~ N(0, 1), as published with the paper (Brock et al. 2021,
# DeepMind nfnets/base.py) and used by timm.
NONLINEARITY_GAMMA = {
    "gelu": 1.7015043497085571,
    "relu": 1.7139588594436646,
    "silu": 1.7881293296813965,
}


class GammaAct(nn.Cell):
    """act(x) * gamma, with GELU in its exact (erf) form as in timm.

    The earlier MindSpore port stored gamma and never applied it; here it is part of the
    activation itself, so no caller can forget it.
    """

    def __init__(self, act_type="gelu", gamma=None):
        super().__init__()
        if act_type not in NONLINEARITY_GAMMA:
            raise ValueError(f"unknown activation {act_type!r}; allowed: {sorted(NONLINEARITY_GAMMA)}")
        self.act_type = act_type
        self.gamma = float(NONLINEARITY_GAMMA[act_type] if gamma is None else gamma)

    def construct(self, x):
        if self.act_type == "gelu":
            y = ops.gelu(x, approximate="none")
        elif self.act_type == "relu":
            y = ops.relu(x)
        else:
            y = ops.silu(x)
        return y * self.gamma


_SQRT_HALF = 0.7071067811865476  # 1 / sqrt(2)
_INV_SQRT_2PI = 0.3989422804014327  # 1 / sqrt(2 pi)


class ScaledGELU(GammaAct):
    """gamma * x * Phi(x) (exact, erf-based GELU) with a hand-written backward: the CPU form of
    GammaAct("gelu"), swapped in by fast_forms.py.

    MindSpore 2.10's CPU GELU and its gradient run as a chain of elementwise kernels that
    each keep an output-sized buffer: measured on 8x128x48x48, 60 ms and 11 tensors of
    memory per activation (forward + backward) against 43 ms and 2 here, where the
    backward recomputes gamma * (Phi(x) + x * phi(x)) from x alone. Equal to the built-in
    to float32 rounding (tests/models/test_layers.py).
    """

    def __init__(self, gamma):
        super().__init__("gelu", gamma)
        self.erf = ops.Erf()
        self.exp = ops.Exp()

    def construct(self, x):
        return x * (self.erf(x * _SQRT_HALF) + 1.0) * (0.5 * self.gamma)

    def bprop(self, x, out, dout):
        cdf = (self.erf(x * _SQRT_HALF) + 1.0) * 0.5
        pdf = self.exp(x * x * -0.5) * _INV_SQRT_2PI
        return (dout * self.gamma * (cdf + x * pdf),)
