"""The CPU-specific layer implementations equal MindSpore's built-ins and the exact formulas."""
from math import erf, exp, pi, sqrt

import mindspore as ms
import numpy as np
from mindspore import ops

from src.models.layers.activations import NONLINEARITY_GAMMA, ScaledGELU
from src.models.layers.rowwise import mean_hw, scale_channels


def test_scaled_gelu_forward_and_gradient_match_float64_erf_formula():
    gamma = NONLINEARITY_GAMMA["gelu"]
    xs = np.linspace(-8, 8, 2001).astype(np.float32)
    ref = np.array([0.5 * v * (1 + erf(v / sqrt(2))) for v in xs.astype(np.float64)]) * gamma
    ref_grad = np.array([0.5 * (1 + erf(v / sqrt(2))) + v * exp(-v * v / 2) / sqrt(2 * pi)
                         for v in xs.astype(np.float64)]) * gamma
    act = ScaledGELU(gamma)
    y = act(ms.Tensor(xs)).asnumpy()
    grad = ms.grad(act)(ms.Tensor(xs)).asnumpy()
    builtin_grad = ms.grad(lambda t: ops.gelu(t, approximate="none") * gamma)(ms.Tensor(xs)).asnumpy()
    # measured: 1.1e-6 / 1.2e-6 max abs error (float32 erf), like the built-in's
    assert np.abs(y - ref).max() < 5e-6
    assert np.abs(grad - ref_grad).max() < 5e-6
    assert np.abs(grad - builtin_grad).max() < 5e-6


def test_rowwise_pool_and_channel_scale_equal_broadcasting_forms():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    s = rng.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(mean_hw(ms.Tensor(x)).asnumpy(), x.mean((2, 3)), rtol=1e-6, atol=1e-7)
    assert mean_hw(ms.Tensor(x), keep_dims=True).shape == (2, 3, 1, 1)
    np.testing.assert_array_equal(scale_channels(ms.Tensor(x), ms.Tensor(s)).asnumpy(), x * s[:, :, None, None])
