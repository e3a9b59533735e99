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
