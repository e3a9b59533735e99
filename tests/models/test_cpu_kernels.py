"""The fused CPU kernels compute what the MindSpore-operator forms and the float64 formulas do."""
from functools import partial

import mindspore as ms
import numpy as np
import pytest
from mindspore import ops

from src.deploy.export import create_deploy_network
from src.models.layers import GammaAct, ScaledStdConv2d, apply_fast_forms, cpu_kernels
from src.models.layers.activations import PreActivation, ScaledGELU
from src.models.layers.conv2d_same import Conv2dSame, Im2ColConv2dSame
from src.models.layers.pooling import AvgPool2x2Same
from src.models.layers.rowwise import MulRows, MulRowsAdd, SqueezeHW, mul_rows
from src.models.layers.squeeze_excite import DenseAct
from src.models.layers.std_conv import WeightStandardization

from live_weights import live_nano


@pytest.fixture(autouse=True)
def _kernels_built(fused_kernels):
    """Every test here needs the library (fails in CI without it, skips elsewhere)."""


def test_fused_gelu_is_elementwise_on_any_shape_and_scales_the_incoming_gradient():
    rng = np.random.default_rng(0)
    x = ms.Tensor(rng.standard_normal((2, 3, 5, 7)).astype(np.float32))
    dout = ms.Tensor(rng.standard_normal((2, 3, 5, 7)).astype(np.float32))
    fused, operators = cpu_kernels.FusedScaledGELU(1.3), ScaledGELU(1.3)
    # measured (max abs differences of unit-scale values): 2.4e-7, 9.5e-7
    np.testing.assert_allclose(fused(x).asnumpy(), operators(x).asnumpy(), rtol=0, atol=1e-6)
    vjp_fused = ms.vjp(fused, x)[1](dout)[0].asnumpy()
    vjp_ops = ms.vjp(operators, x)[1](dout)[0].asnumpy()
    np.testing.assert_allclose(vjp_fused, vjp_ops, rtol=0, atol=5e-6)


class _StandardizedWeightLoss(ms.nn.Cell):
    """sum(w_hat * up): its gradients are the backward of the standardization applied to `up`."""

    def __init__(self, conv):
        super().__init__()
        self.conv = conv

    def construct(self, up):
        return (self.conv.standardized_weight() * up).sum()


def _standardization_and_grads(conv, up):
    net = _StandardizedWeightLoss(conv)
    grads = ops.GradOperation(get_by_list=True)(net, ms.ParameterTuple([conv.weight, conv.gain]))(up)
    return conv.standardized_weight().asnumpy(), [g.asnumpy() for g in grads]


def test_fused_weight_standardization_matches_float64_and_operator_form():
    rng = np.random.default_rng(1)
    conv = ScaledStdConv2d(64, 96, 3, groups=2, gamma=1.7, eps=1e-5)
    apply_fast_forms(conv)
    assert isinstance(conv.standardize, cpu_kernels.FusedWeightStandardization)
    w = (rng.standard_normal(conv.weight.shape) * 0.1 + 0.05).astype(np.float32)
    gain = rng.standard_normal(conv.gain.shape).astype(np.float32)
    conv.weight.set_data(ms.Tensor(w))
    conv.gain.set_data(ms.Tensor(gain))
    up = rng.standard_normal(conv.weight.shape).astype(np.float32)
    w_fused, (dw_fused, dgain_fused) = _standardization_and_grads(conv, ms.Tensor(up))
    conv.standardize = WeightStandardization(conv.scale, conv.eps)  # the plain (operator) form
    w_ops, (dw_ops, dgain_ops) = _standardization_and_grads(conv, ms.Tensor(up))

    # float64: w_hat = (w - mu) / sqrt(var + eps) * gain * gamma / sqrt(fan_in); its vector-Jacobian product
    rows, u = w.reshape(96, -1).astype(np.float64), up.reshape(96, -1).astype(np.float64)
    s = gain.reshape(96, 1).astype(np.float64) * 1.7 / np.sqrt(32 * 9)
    rstd = 1 / np.sqrt(rows.var(1, keepdims=True) + 1e-5)
    xhat = (rows - rows.mean(1, keepdims=True)) * rstd
    g = u * s
    dw_ref = rstd * (g - g.mean(1, keepdims=True) - xhat * (g * xhat).mean(1, keepdims=True))
    dgain_ref = (u * xhat).sum(1) * 1.7 / np.sqrt(32 * 9)
    # measured max abs differences: 7.5e-8, 1.1e-6, 3.5e-7 (float64); 1.2e-7, 1.4e-6, 9.5e-7 (operators)
    np.testing.assert_allclose(w_fused.reshape(96, -1), xhat * s, rtol=0, atol=5e-7)
    np.testing.assert_allclose(dw_fused.reshape(96, -1), dw_ref, rtol=0, atol=1e-5)
    np.testing.assert_allclose(dgain_fused.reshape(96), dgain_ref, rtol=0, atol=3e-6)
    np.testing.assert_allclose(w_fused, w_ops, rtol=0, atol=1e-6)
    np.testing.assert_allclose(dw_fused, dw_ops, rtol=0, atol=1e-5)
    np.testing.assert_allclose(dgain_fused, dgain_ops, rtol=0, atol=5e-6)


def test_layers_fall_back_to_operator_forms_without_the_library(operator_forms):
    assert not cpu_kernels.available()
    net = ms.nn.SequentialCell([ScaledStdConv2d(8, 8, 3), GammaAct("gelu")])
    apply_fast_forms(net)
    assert type(net[1]) is ScaledGELU
    assert type(net[0].standardize) is WeightStandardization and type(net[0].conv) is Im2ColConv2dSame


def test_build_without_compiler_names_it(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler-xyz")
    with pytest.raises(RuntimeError, match="no C.. compiler 'no-such-compiler-xyz'"):
        cpu_kernels.build(str(tmp_path))
    assert not list(tmp_path.iterdir())


def test_exported_networks_use_no_fused_kernels():
    net = live_nano(fast_forms=True)  # random weights: every residual branch contributes
    assert any(isinstance(c, cpu_kernels.FusedScaledGELU) for _, c in net.cells_and_names())
    deployed = create_deploy_network(live_nano(), "MINDIR")  # the same weights, built as export.py does
    kinds = {type(c) for _, c in deployed.cells_and_names()}
    assert GammaAct in kinds and Conv2dSame not in kinds  # plain GELU, folded convolutions
    assert not kinds & {cpu_kernels.FusedScaledGELU, cpu_kernels.FusedWeightStandardization,
                        cpu_kernels.FusedConv2dSame, cpu_kernels.FusedMulRows, cpu_kernels.FusedSqueezeHW,
                        cpu_kernels.FusedMulRowsAdd, cpu_kernels.FusedAvgPool2x2Same,
                        cpu_kernels.FusedPreActivation, cpu_kernels.FusedDenseAct}
    # a network built with the fast forms (as the bench's) deploys in the plain forms too
    from_fast = create_deploy_network(net, "MINDIR")
    assert not {type(c) for _, c in from_fast.cells_and_names()} - kinds
    x = ms.Tensor(np.random.default_rng(2).standard_normal((1, 3, 64, 64)).astype(np.float32))
    net.set_train(False)
    want = net(x).asnumpy()
    for exported in (deployed, from_fast):
        relative = np.abs(exported(x).asnumpy() - want).max() / np.abs(want).max()
        print("deployed network against the fused one: relative max |delta logit|", relative)
        assert relative < 2e-6, relative  # measured 2.6e-7


def _chained_and_plain(gelu_form, **kwargs):
    """(nano with its blocks' fused chains, the same weights without them), both in eval mode."""
    chained = live_nano(fast_forms=True, gelu_form=gelu_form, **kwargs)
    plain = live_nano(fast_forms=True, gelu_form=gelu_form, **kwargs)
    for _, cell in plain.cells_and_names():
        if hasattr(cell, "chain_parts"):
            cell.fused_chain = None
    return chained.set_train(False), plain.set_train(False)


def _chain_blocks(network):
    """The network's NF blocks, each with its fused chain (nano's stem, 4 channels wide at first, has none)."""
    from src.models.nfnet import NormFreeBlock

    blocks = [cell for _, cell in network.cells_and_names() if isinstance(cell, NormFreeBlock)]
    assert blocks and all(isinstance(b.fused_chain, cpu_kernels.FusedConvGeluChain) for b in blocks)
    assert network.stem.fused_chain is None
    return blocks


def _weighted_sum_grads(cell, x, dout):
    """The gradients of sum(cell(x) * dout) for every trainable parameter of `cell`."""
    def weighted_sum(images):
        return (cell(images) * dout).sum()

    return ms.grad(weighted_sum, None, cell.trainable_params())(x)


@pytest.mark.parametrize("mode", ["pynative", "graph_mode"])
def test_f0s_stem_as_a_fused_chain_computes_the_separate_cells_floats_and_gradients(mode, request):
    """F0's stem (3 -> 16 -> 32 -> 64 -> 128 channels, 3x3 convolutions with GELUs between) has an NF block's
    main-path shape and runs as one fused chain: the output, in training and at inference, and every gradient
    equal the separate cells' bit for bit (the 3 image channels stay in a plain layout)."""
    if not cpu_kernels.dnnl_available():
        pytest.skip("the fused library was built without oneDNN")
    from src.models.nfnet import Stem

    request.getfixturevalue(mode)
    stems = []
    for chained in (True, False):
        ms.set_seed(0)
        stem = Stem(3, 128, partial(ScaledStdConv2d, eps=1e-5), partial(GammaAct, "gelu"))
        apply_fast_forms(stem)
        assert isinstance(stem.fused_chain, cpu_kernels.FusedConvGeluChain)
        if not chained:
            stem.fused_chain = None
        stems.append(stem)
    x = ms.Tensor(np.random.default_rng(7).standard_normal((2, 3, 32, 32)).astype(np.float32))
    dout = ms.Tensor(np.random.default_rng(8).standard_normal((2, 128, 8, 8)).astype(np.float32))
    outputs, grads = [], []
    for stem in stems:
        stem.set_train(True)
        outputs.append(stem(x).asnumpy())
        grads.append([g.asnumpy() for g in _weighted_sum_grads(stem, x, dout)])
        stem.set_train(False)
        outputs.append(stem(x).asnumpy())
    np.testing.assert_array_equal(outputs[0], outputs[2])
    np.testing.assert_array_equal(outputs[1], outputs[3])
    assert len(grads[0]) == 12 and np.abs(grads[1][0]).max() > 0
    for got, want in zip(*grads):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", ["pynative", "graph_mode"])
@pytest.mark.parametrize("gelu_form", ["exact", "tanh"])
def test_the_blocks_fused_chain_computes_the_separate_cells_floats(gelu_form, mode, request):
    """conv -> GELU -> ... -> conv as one oneDNN kernel (activations kept in oneDNN's blocked layout) gives
    the separate kernels' logits bit for bit."""
    if not cpu_kernels.dnnl_available():
        pytest.skip("the fused library was built without oneDNN")
    request.getfixturevalue(mode)
    chained, plain = _chained_and_plain(gelu_form)
    blocks = _chain_blocks(chained)
    calls = []  # in PyNative, a hook on each block's chain counts its calls (Graph mode compiles the same path)
    for block in blocks if mode == "pynative" else []:
        block.fused_chain.register_forward_hook(lambda cell, _inputs, _out: calls.append(cell))
    for batch in (3, 1):  # a new input shape is a new chain
        x = ms.Tensor(np.random.default_rng(batch).standard_normal((batch, 3, 64, 64)).astype(np.float32))
        want = plain(x).asnumpy()
        np.testing.assert_array_equal(chained(x).asnumpy(), want)
        assert np.abs(want).max() > 0.1  # the random weights' branches reach the logits
    assert len(calls) == (2 * len(blocks) if mode == "pynative" else 0)


def _loss_and_grads(network, x, labels):
    """Cross entropy of `network` in training mode and its gradients for every trainable parameter."""
    loss_fn = ms.nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    network.set_train(True)

    def forward(images, targets):
        return loss_fn(network(images), targets)

    loss, grads = ms.value_and_grad(forward, None, network.trainable_params())(x, labels)
    return loss.asnumpy(), [g.asnumpy() for g in grads]


@pytest.mark.parametrize("mode", ["pynative", "graph_mode"])
@pytest.mark.parametrize("gelu_form, ws_form, standardizes", [("exact", "timm", True), ("tanh", "deepmind", True),
                                                              ("exact", "timm", False), ("tanh", "deepmind", False)])
def test_the_blocks_fused_chain_computes_the_separate_cells_gradients(gelu_form, ws_form, standardizes, mode,
                                                                      request):
    """In training the chain's forward keeps the GELUs' inputs in oneDNN's blocked layout and its backward runs
    the chain in reverse (DnnlConvGeluChainBackward): the loss and every parameter's gradient equal the
    separate cells' bit for bit (measured: 97 of 97 equal, both GELU forms, both modes). The same where the
    chain standardizes the weights itself, straight into oneDNN's layouts and back from its gradient layout
    (DnnlConvGeluChainTrainStd, the training default), in both standardization forms."""
    if not cpu_kernels.dnnl_available():
        pytest.skip("the fused library was built without oneDNN")
    request.getfixturevalue(mode)
    chained, plain = _chained_and_plain(gelu_form, drop_path_rate=0.0, ws_form=ws_form)
    for block in _chain_blocks(chained):
        assert block.fused_chain.standardizes
        if not standardizes:
            block.fused_chain = block.fused_chain.without_standardization()
    x = ms.Tensor(np.random.default_rng(0).standard_normal((3, 3, 64, 64)).astype(np.float32))
    labels = ms.Tensor(np.array([1, 2, 3], np.int32))
    (loss, grads), (want_loss, want_grads) = (_loss_and_grads(net, x, labels) for net in (chained, plain))
    np.testing.assert_array_equal(loss, want_loss)
    names = [p.name for p in plain.trainable_params()]
    for name, got, want in zip(names, grads, want_grads):
        np.testing.assert_array_equal(got, want, err_msg=name)
    chain_weights = [g for name, g in zip(names, want_grads) if name.endswith((".conv1.weight", ".conv2b.weight"))]
    assert chain_weights and min(np.abs(g).max() for g in chain_weights) > 0  # the chain's weights get gradients


def test_no_fused_chain_where_a_blocked_layout_would_be_padded():
    """Channels between the convolutions, or into the first, that are not a multiple of oneDNN's block (16) keep
    the separate cells: the chain's GELU would run over the layout's padding, and the training chain keeps its
    input in the first convolution's layout in an output of the input's size."""
    from src.models.nfnet import NfCfg, NormFreeBlock
    from src.models.layers import ScaledStdConv2d as Conv

    cfg = NfCfg(depths=(1,), channels=(40,), group_size=8)
    block = NormFreeBlock(40, 40, 1, 0.2, 1.0, cfg, Conv, partial(GammaAct, "gelu"), 0.0)  # 24 between
    apply_fast_forms(block)
    assert block.fused_chain is None and block.conv1.out_channels % 16
    cfg = NfCfg(depths=(1,), channels=(64,), group_size=16)
    block = NormFreeBlock(40, 64, 1, 0.2, 1.0, cfg, Conv, partial(GammaAct, "gelu"), 0.0)  # 40 in, 32 between
    apply_fast_forms(block)
    assert block.fused_chain is None and block.conv1.out_channels % 16 == 0
    block = NormFreeBlock(48, 64, 1, 0.2, 1.0, cfg, Conv, partial(GammaAct, "gelu"), 0.0)
    apply_fast_forms(block)
    assert block.fused_chain is not None or not cpu_kernels.dnnl_available()


def test_fused_mul_rows_matches_operator_form_and_its_gradient():
    rng = np.random.default_rng(3)
    rows = ms.Tensor(rng.standard_normal((6, 50)).astype(np.float32))
    factor = ms.Tensor(rng.standard_normal((6, 1)).astype(np.float32))
    dout = ms.Tensor(rng.standard_normal((6, 50)).astype(np.float32))
    fused = cpu_kernels.FusedMulRows()
    np.testing.assert_array_equal(fused(rows, factor).asnumpy(), mul_rows(rows, factor).asnumpy())
    got = ms.vjp(fused, rows, factor)[1](dout)
    want = ms.vjp(mul_rows, rows, factor)[1](dout)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g.asnumpy(), w.asnumpy(), rtol=0, atol=5e-6)  # measured 1.2e-6


def test_fused_squeeze_mean_and_channel_scale_match_operator_forms_on_nchw_without_reshapes():
    # the SE's squeeze (N, C) and its gate on the 4-D tensor itself, forward and gradients
    rng = np.random.default_rng(4)
    x = ms.Tensor(rng.standard_normal((3, 5, 7, 9)).astype(np.float32) + 0.5)
    gate = ms.Tensor(rng.standard_normal((3, 5)).astype(np.float32))
    dmean = ms.Tensor(rng.standard_normal((3, 5)).astype(np.float32))
    dout = ms.Tensor(rng.standard_normal((3, 5, 7, 9)).astype(np.float32))
    plain_mean, plain_mul = SqueezeHW(), MulRows()
    fused_mean, fused_mul = cpu_kernels.FusedSqueezeHW(), cpu_kernels.FusedMulRows()
    (got, passed), (want, _) = fused_mean(x), plain_mean(x)
    assert got.shape == want.shape == (3, 5)
    np.testing.assert_array_equal(passed.asnumpy(), x.asnumpy())
    np.testing.assert_allclose(got.asnumpy(), want.asnumpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(got.asnumpy(), x.asnumpy().astype(np.float64).mean((2, 3)), rtol=0, atol=1e-6)
    # the mean's gradient dmean / (H * W) (the operator form's division) plus x's gradient from the gate,
    # as autodiff adds them
    grads = (dmean, dout)
    np.testing.assert_array_equal(ms.vjp(fused_mean, x)[1](grads)[0].asnumpy(),
                                  ms.vjp(plain_mean, x)[1](grads)[0].asnumpy())
    np.testing.assert_array_equal(fused_mul(x, gate).asnumpy(), plain_mul(x, gate).asnumpy())
    for g, w in zip(ms.vjp(fused_mul, x, gate)[1](dout), ms.vjp(plain_mul, x, gate)[1](dout)):
        assert g.shape == w.shape
        np.testing.assert_allclose(g.asnumpy(), w.asnumpy(), rtol=0, atol=5e-6)


def test_fused_gate_and_shortcut_compute_the_operator_forms_floats():
    # an NF block's SE gate times its branch plus the shortcut, in one pass: the same floats as the
    # Mul then Add (the product is rounded before the sum); gradients as MulRows' and dout for the addend
    rng = np.random.default_rng(5)
    x, addend, dout = (ms.Tensor(rng.standard_normal((3, 5, 7, 9)).astype(np.float32)) for _ in range(3))
    gate = ms.Tensor(rng.standard_normal((3, 5)).astype(np.float32))
    plain, fused = MulRowsAdd(), cpu_kernels.FusedMulRowsAdd()
    np.testing.assert_array_equal(fused(x, gate, addend).asnumpy(), plain(x, gate, addend).asnumpy())
    got, want = ms.vjp(fused, x, gate, addend)[1](dout), ms.vjp(plain, x, gate, addend)[1](dout)
    np.testing.assert_array_equal(got[0].asnumpy(), want[0].asnumpy())
    np.testing.assert_allclose(got[1].asnumpy(), want[1].asnumpy(), rtol=0, atol=5e-6)
    np.testing.assert_array_equal(got[2].asnumpy(), dout.asnumpy())


@pytest.mark.parametrize("gelu_form", ["exact", "tanh"])
@pytest.mark.parametrize("shortcut_reads_input", [True, False])
def test_fused_pre_activation_sums_the_shortcuts_gradient_as_autodiff_does(gelu_form, shortcut_reads_input):
    # an NF block's first GELU and its shortcut's input: the same floats as the fused GELU, and as its
    # backward with autodiff's AddN of the two gradients before it (transition) or after it (identity)
    rng = np.random.default_rng(7)
    x, dy, dshortcut = (ms.Tensor(rng.standard_normal((2, 3, 5, 7)).astype(np.float32) * 2) for _ in range(3))
    fused = cpu_kernels.FusedPreActivation(1.3, gelu_form, shortcut_reads_input)
    plain = PreActivation(cpu_kernels.FusedScaledGELU(1.3, gelu_form), shortcut_reads_input)
    for got, want in zip(fused(x), plain(x)):
        np.testing.assert_array_equal(got.asnumpy(), want.asnumpy())
    got = ms.vjp(fused, x)[1]((dy, dshortcut))[0].asnumpy()
    want = ms.vjp(plain, x)[1]((dy, dshortcut))[0].asnumpy()
    np.testing.assert_array_equal(got, want)


def _dense_act_float64(act, x, weight, bias, dy):
    """act(x W^T + b) and its gradients in float64: (y, dx, dW in W's shape, db)."""
    x, w, b, dy = (np.asarray(t, np.float64) for t in (x, weight.reshape(weight.shape[0], -1), bias, dy))
    y = x @ w.T + b
    if act == "relu":
        y, dz = np.maximum(y, 0), dy * (y > 0)
    else:
        y = 1 / (1 + np.exp(-y))
        dz = dy * y * (1 - y)
    return y, dz @ w, (dz.T @ x).reshape(weight.shape), dz.sum(0)


@pytest.mark.parametrize("act", ["relu", "sigmoid"])
@pytest.mark.parametrize("n, fan_in, fan_out", [(1, 40, 24), (3, 70, 33), (8, 96, 48), (9, 300, 520)])
def test_fused_se_dense_layer_matches_float64_and_the_operator_form_on_the_4d_weight(act, n, fan_in, fan_out):
    # an SE's fc1 (ReLU) / fc2 (sigmoid) on its (O, I, 1, 1) parameter: batches below, at and past the
    # kernel's four samples per pass, a fan-in past its 256-column block
    rng = np.random.default_rng(8)
    x = rng.standard_normal((n, fan_in)).astype(np.float32)
    weight = (rng.standard_normal((fan_out, fan_in, 1, 1)) / np.sqrt(fan_in)).astype(np.float32)
    bias, dy = rng.standard_normal(fan_out).astype(np.float32) * 0.3, rng.standard_normal((n, fan_out)).astype(np.float32)
    args = [ms.Tensor(t) for t in (x, weight, bias)]
    plain, fused = DenseAct(act), cpu_kernels.FusedDenseAct(act)
    exact = _dense_act_float64(act, x, weight, bias, dy)
    got = [fused(*args), *ms.vjp(fused, *args)[1](ms.Tensor(dy))]
    want = [plain(*args), *ms.vjp(plain, *args)[1](ms.Tensor(dy))]
    for name, g, w, e in zip(("y", "dx", "dW", "db"), got, want, exact):
        assert g.shape == w.shape == e.shape, name
        scale = np.abs(e).max()
        for other in (w.asnumpy(), e):  # measured <= 9.1e-7 of the scale against either
            assert np.abs(g.asnumpy() - other).max() <= 5e-6 * scale, name
    # the folded network's (O, I) matrix (deploy/fold.py): the same kernel, the same floats
    flat = ms.Tensor(weight.reshape(fan_out, fan_in))
    np.testing.assert_array_equal(fused(args[0], flat, args[2]).asnumpy(), got[0].asnumpy())


def test_se_dense_layer_names_an_unknown_activation():
    with pytest.raises(ValueError, match="'gelu'"):
        DenseAct("gelu")


def _avg_pool_2x2_ceil_valid(x):
    """timm's AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False) in float64."""
    n, c, h, w = x.shape
    out = np.zeros((n, c, (h + 1) // 2, (w + 1) // 2))
    for oy in range(out.shape[2]):
        for ox in range(out.shape[3]):
            out[:, :, oy, ox] = x[:, :, 2 * oy:2 * oy + 2, 2 * ox:2 * ox + 2].astype(np.float64).mean((2, 3))
    return out


@pytest.mark.parametrize("hw", [(6, 8), (7, 5), (1, 3)])
def test_fused_shortcut_pool_matches_the_operator_form_on_even_and_odd_sizes(hw):
    rng = np.random.default_rng(6)
    x = ms.Tensor(rng.standard_normal((2, 3, *hw)).astype(np.float32))
    plain, fused = AvgPool2x2Same(), cpu_kernels.FusedAvgPool2x2Same()
    got, want = fused(x).asnumpy(), plain(x).asnumpy()
    assert got.shape == want.shape == (2, 3, (hw[0] + 1) // 2, (hw[1] + 1) // 2)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    np.testing.assert_allclose(got, _avg_pool_2x2_ceil_valid(x.asnumpy()), rtol=0, atol=1e-6)
    dout = ms.Tensor(rng.standard_normal(want.shape).astype(np.float32))
    # each pixel's gradient is its window's over the window's count (a power of two): exact
    np.testing.assert_array_equal(ms.vjp(fused, x)[1](dout)[0].asnumpy(), ms.vjp(plain, x)[1](dout)[0].asnumpy())


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_all_finite_kernel_finds_one_bad_value_anywhere_in_any_block(bad):
    # 200,001 elements: three 65,536-element blocks (the kernel's chunks) and a ragged tail
    kernel = cpu_kernels.all_finite_op()
    x = np.random.default_rng(0).standard_normal(200_001).astype(np.float32)
    x[7] = np.finfo(np.float32).max  # huge but finite: still finite
    assert kernel(ms.Tensor(x)).asnumpy().tolist() == [1.0]
    assert kernel(ms.Tensor(x.reshape(1, 200_001)[:, :1])).asnumpy().tolist() == [1.0]
    for position in (0, 65_535, 65_536, 200_000):
        y = x.copy()
        y[position] = bad
        assert kernel(ms.Tensor(y)).asnumpy().tolist() == [0.0], position


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_all_finite_multi_kernel_checks_every_tensor_in_one_launch(bad):
    """AllFiniteMulti over 40 tensors of mixed shapes (one of 200,001 elements: blocks and a ragged
    tail): 1 when all are finite, 0 when any one element of any tensor is not; real MindSpore on CPU."""
    kernel = cpu_kernels.all_finite_multi_op()
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((3 + i % 4,) * (1 + i % 3)).astype(np.float32) for i in range(39)]
    arrays.insert(20, rng.standard_normal(200_001).astype(np.float32))
    arrays[3].flat[0] = np.finfo(np.float32).max  # huge but finite
    assert kernel(*map(ms.Tensor, arrays)).asnumpy().tolist() == [1.0]
    for index, position in ((0, 0), (20, 65_536), (20, 200_000), (39, -1)):
        bad_arrays = [a.copy() for a in arrays]
        bad_arrays[index].flat[position] = bad
        assert kernel(*map(ms.Tensor, bad_arrays)).asnumpy().tolist() == [0.0], (index, position)
