"""DeepMind's model forms (ws_form "deepmind", gelu_form "tanh") next to timm's, in every form the
layers take: MindSpore operators, the CPU operator forms, the fused C++ kernels, the folded export
network and its ONNX graph.

The references are NumPy transcriptions of DeepMind's nfnets/base.py (WSConv2D.standardize_weight:
(w - mean) * gain * rsqrt(max(fan_in * var, 1e-4)); nonlinearities['gelu']: jax.nn.gelu's default,
0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))) and of timm's ScaledStdConv2d, in float64; JAX is
not installed here, so the formulas are the strongest reference that runs. ONNX Runtime (real)
runs the exported graphs.
"""
import mindspore as ms
import numpy as np
import pytest

from live_weights import live_nano
from src.deploy.export import create_deploy_network, export_network
from src.deploy.fold import FoldedConv2d, fold_weight_standardization
from src.models.layers import GammaAct, ScaledStdConv2d, apply_fast_forms, cpu_kernels
from src.models.layers.activations import ScaledTanhGELU
from src.models.layers.config import FastForms
from src.models.layers.std_conv import WeightStandardization

GAMMA = 1.7015043497085571


def numpy_standardize(weight, gain, form):
    """w_hat in float64: timm's (w - mean) / sqrt(var + 1e-5) * gain / sqrt(fan_in), or DeepMind's
    (w - mean) * gain * rsqrt(max(fan_in * var, 1e-4)) (nfnets/base.py, written as there)."""
    w = weight.astype(np.float64).reshape(weight.shape[0], -1)
    fan_in = w.shape[1]
    mean = w.mean(axis=1, keepdims=True)
    var = w.var(axis=1, keepdims=True)
    g = gain.astype(np.float64).reshape(-1, 1)
    if form == "deepmind":
        scale = 1.0 / np.sqrt(np.maximum(var * fan_in, 1e-4)) * g
        return (w * scale - mean * scale).reshape(weight.shape)
    return ((w - mean) / np.sqrt(var + 1e-5) * g / np.sqrt(fan_in)).reshape(weight.shape)


def numpy_tanh_gelu(x):
    x = x.astype(np.float64)
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def _weights(rng, shape=(6, 4, 3, 3)):
    weight = rng.standard_normal(shape).astype(np.float32) + 0.2
    weight[0] = 0.3 + rng.standard_normal(shape[1:]).astype(np.float32) * 1e-4  # fan_in * var < 1e-4: the floor
    gain = rng.uniform(0.5, 1.5, (shape[0], 1, 1, 1)).astype(np.float32)
    return weight, gain


class _Loss(ms.nn.Cell):
    def __init__(self, standardize):
        super().__init__()
        self.standardize = standardize

    def construct(self, w, g, up):
        return (self.standardize(w, g) * up).sum()


def _standardize_and_grads(cell, weight, gain, up):
    loss = _Loss(cell)
    out = cell(ms.Tensor(weight), ms.Tensor(gain)).asnumpy()
    dw, dg = ms.grad(loss, grad_position=(0, 1))(ms.Tensor(weight), ms.Tensor(gain), ms.Tensor(up))
    return out, dw.asnumpy(), dg.asnumpy()


@pytest.mark.parametrize("form", ["timm", "deepmind"])
def test_weight_standardization_forms_match_numpy_and_the_fused_kernel(form, fused_kernels):
    rng = np.random.default_rng(0)
    weight, gain = _weights(rng)
    up = rng.standard_normal(weight.shape).astype(np.float32)
    conv = ScaledStdConv2d(4, 6, 3, ws_form=form)
    assert conv.eps == {"timm": 1e-5, "deepmind": 1e-4}[form]
    plain = conv.standardize
    fused = cpu_kernels.FusedWeightStandardization(plain.scale, plain.eps, plain.form, plain.fan_in)
    expected = numpy_standardize(weight, gain, form)
    out_plain, dw_plain, dg_plain = _standardize_and_grads(plain, weight, gain, up)
    out_fused, dw_fused, dg_fused = _standardize_and_grads(fused, weight, gain, up)
    scale = np.abs(expected).max()
    errors = (np.abs(out_plain - expected).max() / scale, np.abs(out_fused - expected).max() / scale)
    print(f"{form}: |operators - NumPy| {errors[0]:.1e}, |fused - NumPy| {errors[1]:.1e} (relative)")
    assert max(errors) <= 5e-6  # measured 1.4e-6 / 2.6e-6 (operators), 2.8e-7 / 5.3e-7 (fused): float32 centering
    if form == "deepmind":  # row 0 is floored: w_hat = (w - mean) * gain * 100, not unit variance
        w0 = weight[0].astype(np.float64)
        np.testing.assert_allclose(expected[0], (w0 - w0.mean()) * gain[0] * 100.0, rtol=1e-9)
    np.testing.assert_allclose(dw_fused, dw_plain, rtol=1e-4, atol=1e-4 * np.abs(dw_plain).max())
    # row 0 (w ~ 0.3 +- 1e-4) loses ~3 digits to float32 centering in the operator form; the kernel centers in float64
    np.testing.assert_allclose(dg_fused, dg_plain, rtol=1e-4, atol=1e-4 * np.abs(dg_plain).max())


def test_weight_standardization_forms_differ_where_eps_matters():
    """The two forms agree on well-scaled rows and differ only through eps (its size and place)."""
    rng = np.random.default_rng(1)
    weight, gain = _weights(rng)
    timm, dm = (WeightStandardization(1 / 6.0, eps, form, 36)(ms.Tensor(weight), ms.Tensor(gain)).asnumpy()
                for eps, form in ((1e-5, "timm"), (1e-4, "deepmind")))
    rel = np.abs(timm[1:] - dm[1:]).max() / np.abs(dm[1:]).max()
    assert rel < 1e-4, rel  # rows with var ~ 1: eps is negligible in both
    # the floored row (fan_in 36): timm 1 / sqrt(1e-5) / 6 = 53 against DeepMind 1 / sqrt(1e-4) = 100
    assert 1.8 < np.abs(dm[0]).max() / np.abs(timm[0]).max() < 2.0


@pytest.mark.parametrize("kind", ["plain", "operators", "fused"])
def test_tanh_gelu_forms_match_jax_formula_and_its_derivative(kind, request):
    if kind == "fused":
        request.getfixturevalue("fused_kernels")
    x = np.linspace(-8, 8, 4001, dtype=np.float32).reshape(1, 1, 1, -1)
    act = {"plain": lambda: GammaAct("gelu", GAMMA, "tanh"), "operators": lambda: ScaledTanhGELU(GAMMA),
           "fused": lambda: cpu_kernels.FusedScaledGELU(GAMMA, "tanh")}[kind]()
    y = act(ms.Tensor(x)).asnumpy().astype(np.float64)
    expected = numpy_tanh_gelu(x) * GAMMA
    h = 1e-6
    slope = (numpy_tanh_gelu(x.astype(np.float64) + h) - numpy_tanh_gelu(x.astype(np.float64) - h)) / (2 * h) * GAMMA
    grad = ms.grad(lambda t: act(t).sum())(ms.Tensor(x)).asnumpy()
    exact = GammaAct("gelu", GAMMA)(ms.Tensor(x)).asnumpy().astype(np.float64)
    print(f"{kind}: |tanh GELU - formula| {np.abs(y - expected).max():.1e}, gradient "
          f"{np.abs(grad - slope).max():.1e}; tanh vs exact form {np.abs(y - exact).max():.1e}")
    assert np.abs(y - expected).max() <= 5e-6 * np.abs(expected).max()
    assert np.abs(grad - slope).max() <= 2e-5
    assert np.abs(y - exact).max() > 1e-4  # the two forms are different functions


def _dm_nano():
    return live_nano(seed=3, ws_form="deepmind", gelu_form="tanh").set_train(False)


@pytest.mark.timeout(600)
def test_network_forms_logit_difference_and_fast_forms_follow_the_option(fused_kernels):
    """Same weights, both forms: the logits differ (measured), and each form's CPU fast forms
    (operator and fused) give its own plain network's logits."""
    x = ms.Tensor(np.random.default_rng(0).standard_normal((2, 3, 64, 64)).astype(np.float32))
    logits = {}
    for ws, gelu in (("timm", "exact"), ("deepmind", "exact"), ("timm", "tanh"), ("deepmind", "tanh")):
        net = live_nano(seed=3, ws_form=ws, gelu_form=gelu).set_train(False)
        logits[ws, gelu] = net(x).asnumpy()
        if (ws, gelu) in (("timm", "exact"), ("deepmind", "tanh")):
            for forms in (FastForms(cpu_operators=True), FastForms(cpu_operators=True, fused_kernels=True)):
                fast = live_nano(seed=3, ws_form=ws, gelu_form=gelu).set_train(False)
                apply_fast_forms(fast, forms)
                kinds = {type(c).__name__ for _, c in fast.cells_and_names()}
                assert ("ScaledTanhGELU" in kinds or "FusedScaledGELU" in kinds) if gelu == "tanh" else True
                err = np.abs(fast(x).asnumpy() - logits[ws, gelu]).max() / np.abs(logits[ws, gelu]).max()
                assert err <= 1e-5, (ws, gelu, forms, err)
    base = logits["timm", "exact"]
    scale = np.abs(base).max()
    for key, value in logits.items():
        print(f"logits {key} vs (timm, exact): max |diff| / max |logit| = {np.abs(value - base).max() / scale:.2e}")
    assert np.abs(logits["deepmind", "tanh"] - base).max() > 1e-6 * scale


def test_folding_is_exact_for_each_form():
    """The folded layers hold exactly the weights the network computes (its standardized_weight),
    which equal the NumPy formula of the layer's form; the folded network gives the same logits."""
    x = ms.Tensor(np.random.default_rng(0).standard_normal((2, 3, 64, 64)).astype(np.float32))
    for ws, gelu in (("timm", "exact"), ("deepmind", "tanh")):
        net = live_nano(seed=3, ws_form=ws, gelu_form=gelu).set_train(False)
        convs = {n: c for n, c in net.cells_and_names() if isinstance(c, ScaledStdConv2d)}
        folded = fold_weight_standardization(net, "native")
        cells = dict(folded.cells_and_names())
        worst = 0.0
        for name, conv in convs.items():
            assert isinstance(cells[name], FoldedConv2d)
            w_hat = cells[name].weight.asnumpy()
            np.testing.assert_array_equal(w_hat, conv.standardized_weight().asnumpy())
            expected = numpy_standardize(conv.weight.asnumpy(), conv.gain.asnumpy(), ws)
            worst = max(worst, np.abs(w_hat - expected).max() / np.abs(expected).max())
        out = net(x).asnumpy()
        diff = np.abs(folded(x).asnumpy() - out).max() / np.abs(out).max()
        print(f"{ws}/{gelu}: folded weights vs NumPy {worst:.1e}; folded logits vs network {diff:.1e}")
        assert worst <= 2e-6 and diff <= 1e-5


@pytest.mark.timeout(600)
def test_onnx_export_computes_each_gelu_form(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from src.deploy.onnx_proto import read_model

    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    for ws, gelu in (("timm", "exact"), ("deepmind", "tanh")):
        net = live_nano(seed=3, ws_form=ws, gelu_form=gelu).set_train(False)
        path = export_network(create_deploy_network(net, "ONNX"), "ONNX", str(tmp_path / f"{ws}_{gelu}"), 1, 64)
        ops = [n.op_type for n in read_model(path).graph.node]
        assert ("Erf" in ops) == (gelu == "exact") and ("Tanh" in ops) == (gelu == "tanh"), ops
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        onnx_out = session.run(None, {session.get_inputs()[0].name: x})[0]
        out = net(ms.Tensor(x)).asnumpy()
        diff = np.abs(onnx_out - out).max() / np.abs(out).max()
        print(f"ONNX Runtime vs MindSpore, {ws}/{gelu}: {diff:.1e}")
        assert diff <= 1e-5
