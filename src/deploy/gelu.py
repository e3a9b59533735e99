"""Exact (erf) GELU from operators MindSpore 2.10 can export to ONNX.

MindSpore's ONNX exporter has no Erf/Erfc converter, and its GeLU converter emits the
tanh approximation (up to ~5e-4 off the erf form the weights were trained with). So the
ONNX graph computes the normal CDF itself, from Abs, Mul, Add, Div, Exp and Select:

    gelu(x) = x * Phi(x),   Phi(x) = 1 - erfc(z)/2 for x >= 0, erfc(z)/2 for x < 0,
    z = |x| / sqrt(2)

with the complementary error function of z >= 0 in the Chebyshev-fitted form published
in Numerical Recipes (Press et al., 2nd ed., section 6.2, "erfcc"):

    erfc(z) = t * exp(-z^2 + P(t)),   t = 1 / (1 + z/2),

whose relative error is below 1.2e-7 for every z >= 0, i.e. at float32 rounding level,
the same accuracy class as any float32 Erf kernel (which is itself a polynomial fit).
Working through erfc keeps the relative accuracy in the negative tail, where 1 + erf(x)
would cancel. tests/deploy/test_gelu.py measures it against float64 GELU.
"""
import math

import numpy as np
from mindspore import Tensor, nn, ops

from src.models.layers import GammaAct
from src.models.layers.replace import replace_cells

# P(t) = sum_k ERFC_COEFFS[k] * t**k (Numerical Recipes' published constants).
ERFC_COEFFS = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
               0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_TWO = Tensor(np.float32(2.0))


def erfc_nonnegative(z):
    """erfc(z) for a tensor z >= 0, from elementary operators only."""
    # 1 / (1 + z/2) as a tensor-by-tensor Div: a scalar numerator becomes Reciprocal, which the
    # exporter lacks too; a 0-d constant tensor broadcasts, so the graph names no batch size
    t = ops.div(_TWO, z + 2.0)
    poly = ERFC_COEFFS[-1]
    for coeff in reversed(ERFC_COEFFS[:-1]):  # Horner
        poly = poly * t + coeff
    return t * ops.exp(poly - z * z)


def normal_cdf(x):
    """Phi(x) = P(N(0, 1) <= x), accurate in relative terms in both tails."""
    half_tail = 0.5 * erfc_nonnegative(ops.abs(x) * _INV_SQRT2)
    return ops.select(x >= 0, 1.0 - half_tail, half_tail)


class ElementaryGammaGELU(nn.Cell):
    """gelu(x) * gamma with GELU in its exact (erf) form, written without an Erf operator."""

    def __init__(self, gamma):
        super().__init__()
        self.gamma = float(gamma)

    def construct(self, x):
        return x * normal_cdf(x) * self.gamma


def use_elementary_gelu(network):
    """Swap every GELU GammaAct of `network` (in place) for ElementaryGammaGELU; return the count.

    Other activations (ReLU, SiLU) export as they are and stay.
    """
    return replace_cells(network, lambda cell: isinstance(cell, GammaAct) and cell.act_type == "gelu",
                         lambda _name, act: ElementaryGammaGELU(act.gamma))
