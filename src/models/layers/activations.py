"""Activations scaled by the NF "gamma" that keeps unit variance for N(0, 1) inputs.

GELU comes in two forms (`gelu_form`): "exact", x * Phi(x) with the erf (timm's, PyTorch's
default), and "tanh", 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), jax.nn.gelu's default,
which DeepMind's nfnets/base.py uses. Both share gamma 1.7015 (DeepMind's table).
"""
import math

from mindspore import nn, ops

# gamma = 1 / std(act(z)) for z ~ N(0, 1), as published with the paper (Brock et al. 2021,
# DeepMind nfnets/base.py) and used by timm.
NONLINEARITY_GAMMA = {
    "gelu": 1.7015043497085571,
    "relu": 1.7139588594436646,
    "silu": 1.7881293296813965,
}

GELU_FORMS = ("exact", "tanh")
_APPROXIMATE = {"exact": "none", "tanh": "tanh"}  # ops.gelu's names


def check_gelu_form(form):
    if form not in GELU_FORMS:
        raise ValueError(f"unknown gelu_form {form!r}; allowed: {list(GELU_FORMS)}")
    return form


class GammaAct(nn.Cell):
    """act(x) * gamma, with GELU in its exact (erf) form as in timm, or its tanh form (gelu_form).

    The earlier MindSpore port stored gamma and never applied it; here it is part of the
    activation itself, so no caller can forget it. `scale` is a constant factor folded into gamma:
    an NF block's act(x) * beta as one multiplication (one pass over the activation, not two).
    """

    def __init__(self, act_type="gelu", gamma=None, gelu_form="exact", scale=1.0):
        super().__init__()
        if act_type not in NONLINEARITY_GAMMA:
            raise ValueError(f"unknown activation {act_type!r}; allowed: {sorted(NONLINEARITY_GAMMA)}")
        self.act_type = act_type
        self.gamma = float(NONLINEARITY_GAMMA[act_type] if gamma is None else gamma) * float(scale)
        self.gelu_form = check_gelu_form(gelu_form)
        self.approximate = _APPROXIMATE[gelu_form]

    def construct(self, x):
        if self.act_type == "gelu":
            y = ops.gelu(x, approximate=self.approximate)
        elif self.act_type == "relu":
            y = ops.relu(x)
        else:
            y = ops.silu(x)
        return y * self.gamma


class PreActivation(nn.Cell):
    """An NF block's activated input with its shortcut's input: (act(x), x), or with `shortcut_reads_input`
    False (a transition block, whose shortcut convolves the activated input) (act(x), act(x)).

    One cell, so that a backend's fast form can take its place (fast_forms.py) and sum the two gradients
    inside the activation's backward pass; autodiff adds them in an AddN pass of its own.
    """

    def __init__(self, act, shortcut_reads_input=True):
        super().__init__()
        self.act = act
        self.shortcut_reads_input = shortcut_reads_input

    def construct(self, x):
        y = self.act(x)
        return (y, x) if self.shortcut_reads_input else (y, y)


_SQRT_HALF = 0.7071067811865476  # 1 / sqrt(2)
_INV_SQRT_2PI = 0.3989422804014327  # 1 / sqrt(2 pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_TANH_CUBIC = 0.044715


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


class ScaledTanhGELU(GammaAct):
    """gamma * 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), with a hand-written backward
    that recomputes from x alone (as ScaledGELU): the CPU form of GammaAct("gelu", gelu_form="tanh").

    Computed as gamma * x * sigmoid(2u) (the same function: 0.5 (1 + tanh(u)) = sigmoid(2u)), because
    MindSpore 2.10's CPU Tanh is off by up to 1e-4 (measured at u = -5), its Sigmoid by 1.6e-6.
    """

    def __init__(self, gamma):
        super().__init__("gelu", gamma, "tanh")
        self.sigmoid = ops.Sigmoid()

    def _cdf(self, x):
        return self.sigmoid((x + x * x * x * _TANH_CUBIC) * (2.0 * _SQRT_2_OVER_PI))

    def construct(self, x):
        return x * self._cdf(x) * self.gamma

    def bprop(self, x, out, dout):
        cdf = self._cdf(x)
        du2 = (x * x * (3.0 * _TANH_CUBIC) + 1.0) * (2.0 * _SQRT_2_OVER_PI)  # d(2u)/dx
        return (dout * self.gamma * (cdf + x * cdf * (1.0 - cdf) * du2),)
