"""The mixed-precision cases, run in a process of their own by test_amp.py (not collected by `pytest`).

Applying mindspore.amp to a network changes state that outlives it in the process (later
float32 trainings in the same process lost precision and hit null device pointers).
Networks have random weights (tests/models/live_weights.py): every residual branch contributes.
"""
import numpy as np
import pytest
import mindspore
from mindspore import Tensor

from src.models.layers import FastForms, ScaledStdConv2d, SqueezeExcite, apply_fast_forms
from src.trainers.amp import apply_mixed_precision
from live_weights import live_nano

from .conftest import images_and_labels


def nano():
    return live_nano(seed=0, drop_rate=0.0, drop_path_rate=0.0)


def _precision(network):
    """cell type name -> set of flags ("fp16"/"fp32"/"bf16") set on cells of that type."""
    found = {}
    for _, cell in network.cells_and_names():
        flags = {k for k, v in cell.get_flags().items() if k in ("fp16", "fp32", "bf16") and v}
        found.setdefault(type(cell).__name__, set()).update(flags)
    return found


@pytest.mark.timeout(200)
@pytest.mark.parametrize("level,dtype,flag", [("O2", mindspore.float16, "fp16"),
                                              ("O3", mindspore.bfloat16, "bf16")])
def test_o2_o3_network_is_low_precision_except_squeeze_excite_and_keeps_parameter_names(level, dtype, flag):
    net = nano()
    names = [p.name for p in net.get_parameters()]
    amp_net = apply_mixed_precision(net, level, dtype)  # what prepare_amp does on GPU/Ascend
    precision = _precision(amp_net)
    assert precision[ScaledStdConv2d.__name__] == {flag}
    assert precision["Dense"] == {flag}
    assert precision[SqueezeExcite.__name__] == {"fp32"}
    assert precision["Conv2d"] == {"fp32"}  # the SE's fc1/fc2, the only plain convs
    assert [p.name for p in amp_net.get_parameters()] == names
    assert all(p.dtype == mindspore.float32 for p in amp_net.get_parameters())


@pytest.mark.timeout(200)
def test_o2_network_runs_on_cpu_with_float32_logits_close_to_the_float32_network():
    # Only a forward pass: MindSpore 2.10 has float16 CPU kernels for it. The plain forms (native
    # convolutions), as on GPU/Ascend where O2 runs.
    reference = nano()
    amp_net = apply_mixed_precision(nano(), "O2", mindspore.float16)
    x, _ = images_and_labels(2)
    expected = reference(Tensor(x)).asnumpy()
    logits = amp_net(Tensor(x))
    assert logits.dtype == mindspore.float32
    relative = np.abs(logits.asnumpy() - expected).max() / np.abs(expected).max()
    print("O2 logits: relative max |delta| against float32", relative)
    assert 1e-4 < relative < 1e-2  # measured 3.2e-3 (float16 rounding); float32 would be ~1e-7


def _standardize(weight, gain, conv):
    """ScaledStdConv2d's weight standardization in float64."""
    rows = weight.reshape(weight.shape[0], -1).astype(np.float64)
    centered = rows - rows.mean(1, keepdims=True)
    rstd = 1 / np.sqrt((centered * centered).mean(1, keepdims=True) + conv.eps)
    return (centered * rstd * gain.reshape(-1, 1) * conv.scale).reshape(weight.shape)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("kernels", ["fused_kernels", "operator_forms"])
def test_o2_standardizes_the_weights_in_float32(kernels, request):
    """What each convolution of an O2 network uses is the float64 standardization of the float32 weight,
    rounded once to float16: the standardization itself ran in float32 (GPU/Ascend take the operator form)."""
    request.getfixturevalue(kernels)
    net = nano()  # native convolutions, as on GPU/Ascend
    if kernels == "fused_kernels":  # the fused standardization (float32 whatever the network's precision)
        apply_fast_forms(net, FastForms(fused_kernels=True))
    used = {}
    for name, cell in net.cells_and_names():
        if isinstance(cell, ScaledStdConv2d):
            def record(cell=cell, name=name, standardize=cell.standardized_weight):
                used[name] = standardize()
                return used[name]
            cell.standardized_weight = record
    x, _ = images_and_labels(1)
    apply_mixed_precision(net, "O2", mindspore.float16)(Tensor(x))
    assert len(used) == 25
    exact = total = 0
    cells = dict(net.cells_and_names())
    for name, w_hat in used.items():
        assert w_hat.dtype == mindspore.float16, name
        conv = cells[name]
        want = _standardize(conv.weight.asnumpy(), conv.gain.asnumpy(), conv).astype(np.float16)
        got = w_hat.asnumpy()
        ulps = np.abs(got.view(np.int16).astype(np.int32) - want.view(np.int16).astype(np.int32))
        assert ulps.max() <= 1, (name, ulps.max())
        exact, total = exact + int((ulps == 0).sum()), total + got.size
    # measured: 99.99 % equal to the correctly rounded value, the rest 1 ulp apart; standardizing in
    # float16 (the operator form inside the float16 convolution cell): 40 % equal, up to 32765 ulps
    assert exact / total > 0.999
