"""Weight-standardization folding gives the eval network's logits with plain convolutions."""
import mindspore as ms
import numpy as np
import pytest

from deploy_helpers import NUM_CLASSES, make_network
from src.deploy.fold import FoldedConv2d, fold_conv, fold_for_cpu_eval, fold_weight_standardization
from src.models.layers import ScaledStdConv2d, apply_fast_forms
from src.models.layers.config import active_forms


def relative_max_error(actual, expected):
    return float(np.abs(actual - expected).max() / np.abs(expected).max())


@pytest.fixture(scope="module")
def nano(nano_weights):
    """The network as train.py / eval.py build it on CPU: with the fast forms (im2col convolutions)."""
    network = make_network("dm_nfnet_nano", nano_weights["raw"], NUM_CLASSES)
    apply_fast_forms(network)
    return network


def numpy_folded_weight(weight, gain, gamma=1.0, eps=1e-5):
    """w_hat = (w - mean(w)) / sqrt(var(w) + eps) * gain * gamma / sqrt(fan_in), in float64 NumPy.

    Written from the paper / timm's ScaledStdConv2d (NFNET_SPEC.md): mean and population
    variance per output channel over (in, kh, kw), eps 1e-5.
    """
    w = weight.astype(np.float64).reshape(weight.shape[0], -1)
    fan_in = w.shape[1]
    mean = w.mean(axis=1, keepdims=True)
    var = ((w - mean) ** 2).mean(axis=1, keepdims=True)
    w_hat = (w - mean) / np.sqrt(var + eps) * gain.astype(np.float64).reshape(-1, 1) * gamma / np.sqrt(fan_in)
    return w_hat.reshape(weight.shape)


def _runs_onednn(network):
    """True when the CPU layers convolve through oneDNN (cpu_kernels.FusedConv2dSame): the folded
    network's im2col convolution then equals them to float32 rounding, not bit for bit."""
    return any(getattr(cell, "use_dnnl", False) for _, cell in network.cells_and_names())


def test_folded_conv_holds_the_standardized_weight_and_bias():
    conv = ScaledStdConv2d(8, 16, 3, stride=2, groups=2)
    apply_fast_forms(conv)  # CPU: the im2col convolution
    rng = np.random.default_rng(0)
    weight = rng.standard_normal(conv.weight.shape).astype(np.float32) + 0.3
    gain = rng.uniform(0.5, 1.5, conv.gain.shape).astype(np.float32)
    conv.weight.set_data(ms.Tensor(weight))
    conv.gain.set_data(ms.Tensor(gain))
    conv.bias.set_data(ms.Tensor(rng.standard_normal(conv.bias.shape).astype(np.float32)))
    expected = numpy_folded_weight(weight, gain)
    x = ms.Tensor(rng.standard_normal((2, 8, 10, 10)).astype(np.float32))  # even size: asymmetric SAME pad
    for conv_impl in ("native", "matmul", *(("fused",) if conv.conv_impl == "fused" else ())):
        folded = fold_conv(conv, conv_impl)
        error = np.abs(folded.weight.asnumpy() - expected).max() / np.abs(expected).max()
        print(f"folded weight vs float64 NumPy formula: {error:.2e}")
        assert error <= 1e-6  # measured 1.1e-7 (float32 rounding)
        np.testing.assert_array_equal(folded.bias.asnumpy(), conv.bias.asnumpy())
        out_error = np.abs(folded(x).asnumpy() - conv(x).asnumpy()).max()
        print(f"folded conv vs ScaledStdConv2d ({conv_impl}): max |d| = {out_error:.2e}")
        if conv_impl == "fused" or (conv_impl == "matmul" and not _runs_onednn(conv)):  # the layer's arithmetic
            assert out_error == 0
        else:
            assert out_error <= 1e-5  # measured 9.5e-7 (|outputs| up to ~10)


@pytest.mark.parametrize("conv_impl", [None, "native", "matmul"], ids=["layer_impl", "native", "matmul"])
@pytest.mark.parametrize("mode", [ms.PYNATIVE_MODE, ms.GRAPH_MODE], ids=["pynative", "graph"])
def test_folded_nano_gives_the_eval_network_logits(nano, mode, conv_impl):
    ms.set_context(mode=mode)
    try:
        folded = fold_weight_standardization(nano, conv_impl)
        x = ms.Tensor(np.random.default_rng(3).standard_normal((4, 3, 64, 64)).astype(np.float32))
        expected, actual = nano(x).asnumpy(), folded(x).asnumpy()
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    error = relative_max_error(actual, expected)
    print(f"folded ({conv_impl or 'layer'} conv) vs eval network (nano, mode {mode}): "
          f"max|d| / max|logit| = {error:.2e}")
    if conv_impl is None or (conv_impl == "matmul" and not _runs_onednn(nano)):  # the layers' own arithmetic
        np.testing.assert_array_equal(actual, expected)
    else:  # oneDNN's convolutions (the CPU layers' fast form) or the native kernel: float32 rounding
        assert error <= 5e-6  # measured 5.7e-7 (PyNative), 4.8e-7 (Graph)


def test_folded_convs_keep_the_layer_implementation_unless_told(nano):
    """The CPU layers' own form is the fused kernel (or im2col without a compiler); folding keeps it, and
    each block's fused main path with it, unless another implementation is named."""
    own = {c.conv_impl for _, c in nano.cells_and_names() if isinstance(c, ScaledStdConv2d)}
    assert own == ({"fused"} if active_forms().fused_kernels else {"matmul"})  # built on the CPU backend
    chains = sum(getattr(c, "fused_chain", None) is not None for _, c in nano.cells_and_names())
    for conv_impl, expected in ((None, own), ("native", {"native"}), ("matmul", {"matmul"})):
        folded = fold_weight_standardization(nano, conv_impl)
        assert {c.conv_impl for _, c in folded.cells_and_names() if isinstance(c, FoldedConv2d)} == expected
        kept = sum(getattr(c, "fused_chain", None) is not None for _, c in folded.cells_and_names())
        assert kept == (chains if expected == {"fused"} else 0)
    if own != {"fused"}:
        with pytest.raises(ValueError, match="conv_impl 'fused' needs the fused CPU convolution"):
            fold_weight_standardization(nano, "fused")


def test_folding_replaces_every_std_conv_and_leaves_the_network_untouched(nano):
    before = {n: p.asnumpy().copy() for n, p in nano.parameters_and_names()}
    folded = fold_weight_standardization(nano)
    cells = [c for _, c in folded.cells_and_names()]
    assert not any(isinstance(c, ScaledStdConv2d) for c in cells)
    std_convs = sum(isinstance(c, ScaledStdConv2d) for _, c in nano.cells_and_names())
    assert sum(isinstance(c, FoldedConv2d) for c in cells) == std_convs
    names = [n for n, _ in folded.parameters_and_names()]
    assert not any(n.endswith(".gain") for n in names)  # gains live inside the folded weights
    assert "stages.0.0.conv2.weight" in names and "stem.conv1.bias" in names
    assert not folded.training
    for name, param in nano.parameters_and_names():
        np.testing.assert_array_equal(param.asnumpy(), before[name])
    assert any(isinstance(c, ScaledStdConv2d) for _, c in nano.cells_and_names())


def test_fold_rejects_a_network_without_std_convs():
    with pytest.raises(ValueError, match="no ScaledStdConv2d"):
        fold_weight_standardization(ms.nn.Dense(3, 2))


def test_eval_py_folds_the_cpu_forms_only(nano, nano_weights):
    """eval.py's network (fold_for_cpu_eval): on the CPU forms folded, with the logits of the unfolded network
    bit for bit in Graph mode; a network in the plain forms (other backends, float16 there) is left as it is."""
    folded = fold_for_cpu_eval(nano)
    assert not any(isinstance(c, ScaledStdConv2d) for _, c in folded.cells_and_names())
    # the squeeze-excite weights as the matrices its dense layers read, under their names
    excite = {p.name: p.asnumpy() for p in nano.get_parameters() if ".attn_last.fc" in p.name}
    flat = {p.name: p.asnumpy() for p in folded.get_parameters() if ".attn_last.fc" in p.name}
    assert excite.keys() == flat.keys() and excite
    for name, value in excite.items():
        np.testing.assert_array_equal(flat[name], value.reshape(value.shape[0], -1) if value.ndim == 4 else value)
    x = ms.Tensor(np.random.default_rng(4).standard_normal((2, 3, 64, 64)).astype(np.float32))
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        np.testing.assert_array_equal(folded(x).asnumpy(), nano(x).asnumpy())
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    plain = make_network("dm_nfnet_nano", nano_weights["raw"], NUM_CLASSES)
    assert fold_for_cpu_eval(plain) is plain
