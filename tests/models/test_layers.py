"""The CPU-specific layer implementations equal MindSpore's built-ins and the exact formulas."""
from math import erf, exp, pi, sqrt

import mindspore as ms
import numpy as np
import pytest
from mindspore import ops

from src.models.layers.activations import NONLINEARITY_GAMMA, ScaledGELU
from src.models.layers.conv2d_same import Conv2dSameMatmul, conv2d_same
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


@pytest.mark.parametrize("n, c, h, w, o, k, stride, groups", [
    (2, 8, 16, 16, 8, 3, 1, 1), (2, 8, 16, 16, 8, 3, 2, 1), (2, 8, 17, 15, 8, 3, 2, 2),
    (3, 16, 9, 9, 32, 3, 2, 4), (2, 6, 8, 8, 12, 1, 1, 1), (2, 6, 7, 7, 12, 1, 2, 3), (1, 4, 5, 6, 4, 3, 1, 4),
])
def test_matmul_conv_cell_backward_equals_native_kernel(n, c, h, w, o, k, stride, groups):
    """Conv2dSameMatmul's hand-written backward (transposed conv) against the native kernel's autodiff."""
    rng = np.random.default_rng(1)
    x = ms.Tensor(rng.standard_normal((n, c, h, w)).astype(np.float32))
    wt = ms.Tensor(rng.standard_normal((o, c // groups, k, k)).astype(np.float32))
    cot = ms.Tensor(rng.standard_normal((n, o, -(-h // stride), -(-w // stride))).astype(np.float32))
    cell = Conv2dSameMatmul(stride, groups)
    ours = ms.grad(lambda a, b: (cell(a, b) * cot).sum(), grad_position=(0, 1))(x, wt)
    ref = ms.grad(lambda a, b: (conv2d_same(a, b, None, stride, groups, "native") * cot).sum(),
                  grad_position=(0, 1))(x, wt)
    # measured: <= 3.3e-7 relative
    for got, want in zip(ours, ref):
        assert np.abs(got.asnumpy() - want.asnumpy()).max() <= 1e-5 * np.abs(want.asnumpy()).max()


def test_rowwise_pool_and_channel_scale_equal_broadcasting_forms():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    s = rng.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(mean_hw(ms.Tensor(x)).asnumpy(), x.mean((2, 3)), rtol=1e-6, atol=1e-7)
    assert mean_hw(ms.Tensor(x), keep_dims=True).shape == (2, 3, 1, 1)
    np.testing.assert_array_equal(scale_channels(ms.Tensor(x), ms.Tensor(s)).asnumpy(), x * s[:, :, None, None])
