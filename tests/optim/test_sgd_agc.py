"""SGD-AGC against a numpy transcription of DeepMind's nfnets/optim.py (SGD_AGC).

The reference works in DeepMind's layout (conv kernels HWIO, dense weights
(in, out), gains (out,)); our tensors are converted to it and back, so the
tests also check that the output unit is transcribed correctly for MindSpore's
OIHW / (out, in) layouts.
"""
import numpy as np
import pytest
import mindspore
from mindspore import Parameter, Tensor, nn, ops
from mindspore.nn.learning_rate_schedule import LearningRateSchedule

from src.optim.optimizer import create_optimizer
from src.optim.sgd_agc import SGDAGC, adaptive_clip_grad, unitwise_norm

CLIPPING, EPS = 0.01, 1e-3


# ---- numpy reference, DeepMind layout -------------------------------------------------

def to_deepmind(x):
    """OIHW conv -> HWIO, (out, in) dense -> (in, out), (out, 1, 1, 1) gain -> (out,)."""
    if x.ndim == 4 and x.shape[1:] == (1, 1, 1):
        return x.reshape(-1)
    if x.ndim == 4:
        return x.transpose(2, 3, 1, 0)
    return x.T if x.ndim == 2 else x


def from_deepmind(x, shape):
    if len(shape) == 4 and shape[1:] == (1, 1, 1):
        return x.reshape(shape)
    if len(shape) == 4:
        return x.transpose(3, 2, 0, 1)
    return x.T if len(shape) == 2 else x


def dm_unitwise_norm(x):
    if np.squeeze(x).ndim <= 1:
        return np.sqrt(np.sum(x ** 2))
    axis = 0 if x.ndim in (2, 3) else (0, 1, 2)
    return np.sqrt(np.sum(x ** 2, axis=axis, keepdims=True))


def dm_clip(grad, param, clipping=CLIPPING, eps=EPS):
    """SGD_AGC.update_param's clipping, applied in DeepMind's layout."""
    g, p = to_deepmind(grad.astype(np.float64)), to_deepmind(param.astype(np.float64))
    max_norm = np.maximum(dm_unitwise_norm(p), eps) * clipping
    grad_norm = dm_unitwise_norm(g)
    clipped = np.where(grad_norm > max_norm, g * (max_norm / np.maximum(grad_norm, 1e-6)), g)
    return from_deepmind(clipped, grad.shape)


def dm_sgd_agc_step(param, grad, buf, lr, weight_decay, clipping, momentum=0.9, nesterov=True):
    """One SGD_AGC step; weight_decay or clipping None means 'not for this parameter'."""
    if clipping is not None:
        grad = dm_clip(grad, param, clipping)
    if weight_decay is not None:
        grad = grad + param * weight_decay
    buf = momentum * buf + grad
    update = grad + momentum * buf if nesterov else buf
    return param - lr * update, buf


# ---- tensors covering every parameter kind ----------------------------------------------

SHAPES = {
    "stages.0.0.conv2.weight": (6, 4, 3, 3),
    "stages.0.0.conv2.gain": (6, 1, 1, 1),
    "stages.0.0.conv2.bias": (6,),
    "stages.0.0.skipinit_gain": (),
    "stages.0.0.attn_last.fc1.weight": (5, 7),
    "head.fc.weight": (3, 5),
    "head.fc.bias": (3,),
}


def _grad_with_unit_ratios(param, ratios, rng):
    """A random gradient whose unit norms are ratios * clipping * max(||p_unit||, eps)."""
    g = rng.standard_normal(param.shape)
    if np.squeeze(param).ndim <= 1:
        target = ratios[0] * CLIPPING * max(np.linalg.norm(param), EPS)
        return g * target / np.linalg.norm(g)
    axes = tuple(range(1, param.ndim))
    p_norm = np.sqrt(np.sum(param ** 2, axis=axes, keepdims=True))
    g_norm = np.sqrt(np.sum(g ** 2, axis=axes, keepdims=True))
    r = np.resize(np.asarray(ratios, np.float64), p_norm.shape[0]).reshape(p_norm.shape)
    return g * r * CLIPPING * np.maximum(p_norm, EPS) / g_norm


def make_case(seed=0):
    """Params and gradients: conv and dense units alternate clipped (x3) / kept (x0.5)."""
    rng = np.random.default_rng(seed)
    params, grads = {}, {}
    ratios = {"stages.0.0.conv2.gain": [0.5], "stages.0.0.conv2.bias": [3.0],
              "stages.0.0.skipinit_gain": [2.0], "head.fc.bias": [0.5]}
    for name, shape in SHAPES.items():
        p = rng.standard_normal(shape)
        if name.endswith("skipinit_gain"):
            p = np.zeros(shape)  # zero init: the eps floor decides
        params[name] = p.astype(np.float32)
        g = _grad_with_unit_ratios(p, ratios.get(name, [3.0, 0.5]), rng)
        grads[name] = g.astype(np.float32)
    return params, grads


def to_ms(arrays):
    return [Parameter(Tensor(a.copy()), name=n) for n, a in arrays.items()]


# ---- unitwise norm and clipping ----------------------------------------------------------

def test_unitwise_norm_is_per_output_unit_for_weights_and_whole_tensor_for_gains_and_biases():
    params, _ = make_case()
    for name, p in params.items():
        ours = unitwise_norm(Tensor(p)).asnumpy()
        vector_like = np.squeeze(p).ndim <= 1
        unit_shape = () if vector_like else (p.shape[0],) + (1,) * (p.ndim - 1)
        assert ours.shape == unit_shape, name
        # compare element by element after broadcasting each norm over its own layout
        dm = to_deepmind(p.astype(np.float64))
        ref = from_deepmind(np.broadcast_to(dm_unitwise_norm(dm), dm.shape), p.shape)
        np.testing.assert_allclose(np.broadcast_to(ours, p.shape), ref, rtol=1e-6, err_msg=name)


def test_agc_clips_exactly_the_units_deepmind_clips():
    params, grads = make_case()
    n_clipped = n_kept = 0
    for name in SHAPES:
        ours = adaptive_clip_grad(Tensor(grads[name]), Tensor(params[name]), CLIPPING, EPS)
        ours = ours.asnumpy()
        ref = dm_clip(grads[name], params[name])
        # measured: max abs diff 3.4e-9 on gradients of order 1e-3 (max rel 1.7e-7)
        np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-7, err_msg=name)
        changed = np.abs(ref - grads[name]) > 1e-7
        n_clipped += int(changed.any())
        n_kept += int((~changed).any())
    assert n_clipped >= 5 and n_kept >= 4  # both branches of the where() are exercised


def test_zero_initialised_skipinit_gain_is_clipped_to_clipping_times_eps():
    params, grads = make_case()
    name = "stages.0.0.skipinit_gain"
    ours = adaptive_clip_grad(Tensor(grads[name]), Tensor(params[name]), CLIPPING, EPS).asnumpy()
    assert abs(abs(float(ours)) - CLIPPING * EPS) < 1e-10


# ---- the optimizer ----------------------------------------------------------------------

LRS = [0.1, 0.05, 0.02]
WD = 1e-2  # large enough to matter in the comparison


def _reference_run(params, grads_per_step, nesterov=True, loss_scale=1.0):
    groups = {n: (None if ("gain" in n or "bias" in n) else WD,
                  None if n == "head.fc.weight" else CLIPPING) for n in params}
    p = {n: a.astype(np.float64) for n, a in params.items()}
    buf = {n: np.zeros_like(a) for n, a in p.items()}
    for lr, grads in zip(LRS, grads_per_step):
        for n in p:
            wd, clip = groups[n]
            p[n], buf[n] = dm_sgd_agc_step(p[n], grads[n] / loss_scale, buf[n], lr, wd, clip,
                                           nesterov=nesterov)
    return p, buf


def _run_ours(params, grads_per_step, nesterov=True, loss_scale=1.0):
    ms_params = to_ms(params)
    opt = SGDAGC(ms_params, learning_rate=LRS, momentum=0.9, weight_decay=WD, nesterov=nesterov,
                 clipping=CLIPPING, eps=EPS, loss_scale=loss_scale)
    for grads in grads_per_step:
        opt(tuple(Tensor(grads[n]) for n in params))
    return opt


def _three_steps_of_gradients():
    params, g0 = make_case(0)
    return params, [g0, make_case(1)[1], make_case(2)[1]]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", ["pynative", "graph_mode"])
@pytest.mark.parametrize("kernels", ["fused_kernels", "operator_forms"])
def test_three_sgd_agc_steps_match_numpy_deepmind_sgd_agc(mode, kernels, request):
    request.getfixturevalue(kernels)
    request.getfixturevalue(mode)
    params, grads = _three_steps_of_gradients()
    opt = _run_ours(params, grads)
    assert (opt.update_kernel is not None) == (kernels == "fused_kernels")  # in place, cpu_kernels.cc
    ref_p, ref_buf = _reference_run(params, grads)
    for p, m in zip(opt.parameters, opt.moments):
        # measured: max abs diff 1.7e-7 on params of order 1, 8e-9 on the buffers
        np.testing.assert_allclose(p.asnumpy(), ref_p[p.name], rtol=1e-5, atol=1e-6, err_msg=p.name)
        np.testing.assert_allclose(m.asnumpy(), ref_buf[p.name], rtol=1e-5, atol=1e-6,
                                   err_msg=m.name)
    assert int(opt.global_step.asnumpy()[0]) == 3


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kernels", ["fused_kernels", "operator_forms"])
def test_plain_momentum_when_nesterov_is_false_matches_numpy(kernels, request):
    request.getfixturevalue(kernels)
    params, grads = _three_steps_of_gradients()
    opt = _run_ours(params, grads, nesterov=False)
    ref_p, _ = _reference_run(params, grads, nesterov=False)
    for p in opt.parameters:
        np.testing.assert_allclose(p.asnumpy(), ref_p[p.name], rtol=1e-5, atol=1e-6, err_msg=p.name)


class _HalvingLR(LearningRateSchedule):
    """0.1 * 0.5 ** step as a MindSpore schedule."""

    def construct(self, global_step):
        return 0.1 * ops.pow(0.5, ops.cast(global_step, mindspore.float32))


@pytest.mark.timeout(120)
def test_float_list_and_learning_rate_schedule_give_the_same_steps():
    params, grads = _three_steps_of_gradients()
    results = []
    for lr in ([0.1, 0.05, 0.025], np.array([0.1, 0.05, 0.025], np.float32), _HalvingLR()):
        opt = SGDAGC(to_ms(params), learning_rate=lr, weight_decay=WD)
        for step in grads:
            opt(tuple(Tensor(step[n]) for n in params))
        results.append([p.asnumpy() for p in opt.parameters])
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    opt = SGDAGC(to_ms(params), learning_rate=0.1)
    opt(tuple(Tensor(g) for g in grads[0].values()))
    np.testing.assert_allclose(opt.get_lr().asnumpy(), 0.1)


@pytest.mark.timeout(120)
def test_fixed_loss_scale_is_divided_out_before_clipping():
    params, grads = _three_steps_of_gradients()
    scaled = [{n: np.asarray(g * 1024.0, np.float32) for n, g in step.items()} for step in grads]
    opt = _run_ours(params, scaled, loss_scale=1024.0)
    ref_p, _ = _reference_run(params, grads)
    for p in opt.parameters:
        np.testing.assert_allclose(p.asnumpy(), ref_p[p.name], rtol=1e-5, atol=1e-6, err_msg=p.name)


@pytest.mark.timeout(120)
def test_parameter_groups_no_decay_on_gains_and_biases_and_unclipped_classifier_weight():
    params, _ = make_case()
    opt = SGDAGC(to_ms(params), learning_rate=0.1, weight_decay=WD, clipping=CLIPPING)
    flags = {p.name: (d, c) for p, d, c in zip(opt.parameters, opt.decay_flags, opt.clip_flags)}
    assert flags == {
        "stages.0.0.conv2.weight": (True, True),
        "stages.0.0.conv2.gain": (False, True),
        "stages.0.0.conv2.bias": (False, True),
        "stages.0.0.skipinit_gain": (False, True),
        "stages.0.0.attn_last.fc1.weight": (True, True),  # SE weights are decayed and clipped
        "head.fc.weight": (True, False),
        "head.fc.bias": (False, True),
    }
    # Numbers: a huge gradient moves head.fc.weight by lr * g (Nesterov, first step:
    # (1 + m) * g), while head.fc.bias is clipped; with zero gradients only decayed
    # parameters move.
    big = {n: np.full(s, 100.0, np.float32) for n, s in SHAPES.items()}
    opt(tuple(Tensor(big[n]) for n in SHAPES))
    after = {p.name: p.asnumpy() for p in opt.parameters}
    fc_w = params["head.fc.weight"]
    unclipped_step = 0.1 * 1.9 * (100.0 + WD * fc_w)
    # measured: max abs diff 1.9e-6 on values of order 19
    np.testing.assert_allclose(after["head.fc.weight"], fc_w - unclipped_step, rtol=1e-6, atol=1e-5)
    bias_step = np.linalg.norm(after["head.fc.bias"] - params["head.fc.bias"])
    expected = 0.1 * 1.9 * CLIPPING * np.linalg.norm(params["head.fc.bias"])
    assert abs(bias_step - expected) < 1e-6

    opt = SGDAGC(to_ms(params), learning_rate=0.1, weight_decay=WD, clipping=CLIPPING)
    opt(tuple(Tensor(np.zeros(s, np.float32)) for s in SHAPES.values()))
    for p in opt.parameters:
        moved = np.abs(p.asnumpy() - params[p.name]).max()
        assert (moved > 0) == ("gain" not in p.name and "bias" not in p.name), p.name


@pytest.mark.timeout(120)
def test_custom_group_patterns_replace_the_defaults():
    params, _ = make_case()
    opt = SGDAGC(to_ms(params), learning_rate=0.1, weight_decay=WD, no_decay_keys=("skipinit",),
                 agc_exclude=("head.fc",))
    flags = {p.name: (d, c) for p, d, c in zip(opt.parameters, opt.decay_flags, opt.clip_flags)}
    assert flags["stages.0.0.conv2.gain"] == (True, True)
    assert flags["stages.0.0.skipinit_gain"] == (False, True)
    assert flags["head.fc.bias"] == (True, False)  # timm's choice: both head tensors unclipped
    assert SGDAGC(to_ms(params), 0.1, clipping=None).clip_flags == (False,) * len(SHAPES)


@pytest.mark.timeout(120)
def test_momentum_buffers_and_step_are_checkpointed_and_resume_identically(tmp_path):
    params, grads = _three_steps_of_gradients()
    straight = _run_ours(params, grads)

    first = _run_ours(params, grads[:1])
    ckpt = str(tmp_path / "opt.ckpt")
    mindspore.save_checkpoint(first, ckpt)
    saved = mindspore.load_checkpoint(ckpt)
    assert "global_step" in saved and "momentum.stages.0.0.conv2.weight" in saved
    resumed_params = to_ms(params)
    resumed = SGDAGC(resumed_params, learning_rate=LRS, weight_decay=WD, clipping=CLIPPING)
    mindspore.load_param_into_net(resumed, saved)
    for step in grads[1:]:
        resumed(tuple(Tensor(step[n]) for n in params))
    for a, b in zip(straight.parameters, resumed.parameters):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())


# ---- timm ------------------------------------------------------------------------------

def test_clipping_matches_timm_adaptive_clip_grad_for_conv_and_linear_weights():
    torch = pytest.importorskip("torch")
    from timm.utils.agc import adaptive_clip_grad as timm_agc

    params, grads = make_case()
    for name in ("stages.0.0.conv2.weight", "stages.0.0.attn_last.fc1.weight"):
        p = torch.nn.Parameter(torch.from_numpy(params[name].copy()))
        p.grad = torch.from_numpy(grads[name].copy())
        timm_agc([p], clip_factor=CLIPPING, eps=EPS)
        ours = adaptive_clip_grad(Tensor(grads[name]), Tensor(params[name]), CLIPPING, EPS)
        # measured: identical (max abs diff 0)
        np.testing.assert_allclose(ours.asnumpy(), p.grad.numpy(), rtol=1e-5, atol=1e-7,
                                   err_msg=name)


def test_timm_clips_4d_gains_per_element_where_deepmind_and_we_use_the_whole_tensor():
    """timm's unitwise_norm treats only ndim <= 1 as one unit, so its (out, 1, 1, 1)
    gains are clipped element by element; squeezing first (DeepMind) clips them as one
    vector. On this gain the two disagree."""
    torch = pytest.importorskip("torch")
    from timm.utils.agc import adaptive_clip_grad as timm_agc

    gain = np.array([1.0, 0.01, 2.0, 0.5], np.float32).reshape(4, 1, 1, 1)
    grad = np.array([0.001, 0.005, 0.001, 0.001], np.float32).reshape(4, 1, 1, 1)
    p = torch.nn.Parameter(torch.from_numpy(gain.copy()))
    p.grad = torch.from_numpy(grad.copy())
    timm_agc([p], clip_factor=CLIPPING, eps=EPS)
    ours = adaptive_clip_grad(Tensor(grad), Tensor(gain), CLIPPING, EPS).asnumpy()
    np.testing.assert_allclose(ours, dm_clip(grad, gain), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(ours, grad, atol=1e-9)  # whole-vector norm: not clipped
    # timm clips the second element to 0.01 * 0.01 = 1e-4 (from 5e-3)
    np.testing.assert_allclose(p.grad.numpy().reshape(-1), [0.001, 1e-4, 0.001, 0.001], rtol=1e-5)


# ---- Model.train and the factory ---------------------------------------------------------

class _Head(nn.Cell):
    def __init__(self):
        super().__init__()
        self.fc = nn.Dense(4, 3, weight_init="normal", bias_init="zeros")

    def construct(self, x):
        return self.fc(x)


class _TinyNet(nn.Cell):
    """conv -> gain -> mean -> head.fc, with DeepMind-style parameter names."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, pad_mode="same", has_bias=True, weight_init="normal")
        self.gain = Parameter(Tensor(np.ones((4, 1, 1, 1), np.float32)), name="gain")
        self.head = _Head()

    def construct(self, x):
        return self.head((self.conv(x) * self.gain.reshape(1, 4, 1, 1)).mean(axis=(2, 3)))


def _tiny_net_and_data():
    mindspore.set_seed(0)
    net = _TinyNet()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 2, 5, 5)).astype(np.float32)
    y = rng.integers(0, 3, 8).astype(np.int32)
    return net, x, y


@pytest.mark.timeout(120)
def test_model_train_with_fixed_loss_scale_matches_numpy_sgd_agc(pynative):
    from mindspore.train import FixedLossScaleManager, Model
    import mindspore.dataset as ds

    net, x, y = _tiny_net_and_data()
    init = {p.name: p.asnumpy().copy() for p in net.trainable_params()}
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")

    # Reference: true gradients from value_and_grad, numpy DeepMind update.
    ref_net = _TinyNet()
    for p in ref_net.trainable_params():
        p.set_data(Tensor(init[p.name]))
    weights = ref_net.trainable_params()
    grad_fn = mindspore.value_and_grad(lambda a, b: loss_fn(ref_net(a), b), None, weights)
    ref = {n: a.astype(np.float64) for n, a in init.items()}
    buf = {n: np.zeros_like(a) for n, a in ref.items()}
    for step, lr in enumerate(LRS[:2]):
        batch = slice(4 * step, 4 * step + 4)
        _, grads = grad_fn(Tensor(x[batch]), Tensor(y[batch]))
        for p, g in zip(weights, grads):
            n = p.name
            wd = None if ("gain" in n or "bias" in n) else WD
            clip = None if n == "head.fc.weight" else CLIPPING
            ref[n], buf[n] = dm_sgd_agc_step(ref[n], g.asnumpy().astype(np.float64), buf[n], lr,
                                             wd, clip)
            p.set_data(Tensor(ref[n].astype(np.float32)))

    opt = create_optimizer(net, "sgd_agc", lr=np.array(LRS, np.float32), weight_decay=WD,
                           clipping=CLIPPING, loss_scale=128.0)
    model = Model(net, loss_fn=loss_fn, optimizer=opt,
                  loss_scale_manager=FixedLossScaleManager(128.0, drop_overflow_update=False))
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(4)
    model.train(1, data, dataset_sink_mode=False)
    for p in net.trainable_params():
        # measured: max abs diff 2.3e-8
        np.testing.assert_allclose(p.asnumpy(), ref[p.name], rtol=1e-5, atol=1e-6, err_msg=p.name)
    assert int(opt.global_step.asnumpy()[0]) == 2


def test_create_optimizer_rejects_unknown_name():
    net, _, _ = _tiny_net_and_data()
    with pytest.raises(ValueError, match="sgd_agc, momentum, adamw"):
        create_optimizer(net, "lamb", lr=0.1)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["momentum", "adamw"])
def test_create_optimizer_momentum_and_adamw_do_not_decay_gains_and_biases(name):
    net, _, _ = _tiny_net_and_data()
    before = {p.name: p.asnumpy().copy() for p in net.trainable_params()}
    opt = create_optimizer(net, name, lr=0.1, weight_decay=0.5)
    assert isinstance(opt, nn.Optimizer)
    opt(tuple(ops.zeros_like(p) for p in opt.parameters))
    for p in opt.parameters:
        moved = float(np.abs(p.asnumpy() - before[p.name]).max())
        assert (moved > 0) == ("gain" not in p.name and "bias" not in p.name), (p.name, moved)
