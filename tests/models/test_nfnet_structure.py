"""Parameter names, shapes and counts equal timm's; NF bookkeeping; train-mode gradients."""
import math

import mindspore as ms
import numpy as np
import pytest
from mindspore.nn.utils import no_init_parameters

from src.models import MODEL_CFGS, create_model, list_models
from src.models.nfnet import drop_path_rates

def _reference_shapes():
    """(name, shape) of timm's dm_nfnet_f0 parameters, in timm's order (no weights: device="meta")."""
    import timm

    return [(n, tuple(p.shape)) for n, p in timm.create_model("dm_nfnet_f0", device="meta").named_parameters()]


def _shapes(network):
    return [(name, tuple(p.shape)) for name, p in network.parameters_and_names()]


def test_dm_nfnet_f0_names_and_shapes_equal_timm_in_order():
    with no_init_parameters():
        net = create_model("dm_nfnet_f0")
    ours, ref = _shapes(net), _reference_shapes()
    assert len(ref) == 233
    assert ours == ref
    assert sum(math.prod(s) for _, s in ours) == 71_489_284


@pytest.mark.parametrize("name", [f"dm_nfnet_f{i}" for i in range(7)])
def test_parameter_count_equals_timm(name):
    timm = pytest.importorskip("timm")
    reference = timm.create_model(name, device="meta")
    with no_init_parameters():
        net = create_model(name)
    ref = {n: tuple(p.shape) for n, p in reference.named_parameters()}
    ours = dict(_shapes(net))
    assert ours == ref
    assert sum(math.prod(s) for s in ours.values()) == sum(p.numel() for p in reference.parameters())


def test_registry_lists_f0_to_f6_and_nano():
    assert set(list_models()) == {f"dm_nfnet_f{i}" for i in range(7)} | {"dm_nfnet_nano"}
    with pytest.raises(ValueError, match="unknown model 'nfnet_f0'"):
        create_model("nfnet_f0")


def test_beta_and_alpha_follow_expected_variance_bookkeeping():
    timm = pytest.importorskip("timm")
    reference = timm.create_model("dm_nfnet_f0", device="meta")
    with no_init_parameters():
        net = create_model("dm_nfnet_f0")
    ours = [(b.alpha, b.beta) for stage in net.stages for b in stage]
    ref = [(b.alpha, b.beta) for stage in reference.stages for b in stage]
    assert np.allclose(ours, ref, rtol=1e-12)
    # stage 0 starts at unit variance; each stage's first block resets it to 1 + alpha^2
    assert np.allclose([beta for _, beta in ours[:4]], [1.0, 1.04 ** -0.5, 1.04 ** -0.5, 1.08 ** -0.5])


def test_drop_path_rates_deepmind_and_timm_forms():
    dm = drop_path_rates(0.25, (1, 2, 6, 3), "deepmind")
    assert dm == pytest.approx([0.25 * i / 12 for i in range(12)])
    tm = drop_path_rates(0.25, (1, 2, 6, 3), "timm")
    assert tm == pytest.approx(np.linspace(0, 0.25, 12).tolist())
    with no_init_parameters():
        net = create_model("dm_nfnet_f0", drop_path_rate=0.25)
    rates = [1 - b.drop_path.keep_prob if hasattr(b.drop_path, "keep_prob") else 0.0
             for stage in net.stages for b in stage]
    assert rates == pytest.approx(dm, abs=1e-7)


@pytest.mark.parametrize("mode, scale", [("deepmind", False), ("timm", True)])
def test_drop_path_drops_whole_samples_and_rescales_only_in_timm_mode(mode, scale):
    from src.models.layers import DropPath

    ms.set_seed(0)
    layer = DropPath(0.5, scale_by_keep=scale)
    layer.set_train(True)
    x = np.ones((256, 2, 3, 3), np.float32)
    out = layer(ms.Tensor(x)).asnumpy()
    per_sample = out.reshape(256, -1)
    kept_value = 2.0 if scale else 1.0
    assert set(np.unique(per_sample).tolist()) <= {0.0, kept_value}
    assert (per_sample.min(axis=1) == per_sample.max(axis=1)).all()  # whole samples
    assert 0.35 < (per_sample[:, 0] > 0).mean() < 0.65
    layer.set_train(False)
    assert np.array_equal(layer(ms.Tensor(x)).asnumpy(), x)


@pytest.mark.parametrize("mode", ["deepmind", "timm"])
def test_a_training_block_drops_whole_residual_branches_through_its_folded_gate(mode):
    """The block multiplies its stochastic-depth mask into the SE gate (nfnet.py): a dropped sample
    leaves the block as its shortcut, a kept one as in eval mode (timm mode: the branch / keep_prob)."""
    ms.set_seed(0)
    net = create_model("dm_nfnet_nano", drop_path_rate=0.6, drop_path_mode=mode)
    block = net.stages[-1][-1]
    keep = block.drop_path.keep_prob
    x = ms.Tensor(np.random.default_rng(0).standard_normal((32, 256, 4, 4)).astype(np.float32))
    block.set_train(False)
    block.skipinit_gain.set_data(ms.Tensor(0.0, ms.float32))
    shortcut = block(x).asnumpy()
    block.skipinit_gain.set_data(ms.Tensor(1.0, ms.float32))
    branch = block(x).asnumpy() - shortcut
    block.set_train(True)
    out = block(x).asnumpy()
    kept_branch = branch / keep if mode == "timm" else branch
    dropped = [np.array_equal(out[n], shortcut[n]) for n in range(32)]
    for n in range(32):
        if not dropped[n]:
            np.testing.assert_allclose(out[n], shortcut[n] + kept_branch[n], rtol=1e-5, atol=1e-5)
    assert np.abs(branch).max() > 0.1 and 0 < sum(dropped) < 32, (keep, sum(dropped))


def test_default_architecture_constants():
    cfg = MODEL_CFGS["dm_nfnet_f0"]
    assert (cfg.depths, cfg.channels, cfg.alpha, cfg.attn_gain, cfg.std_conv_eps) == \
        ((1, 2, 6, 3), (256, 512, 1536, 1536), 0.2, 2.0, 1e-5)
    from src.models.layers import NONLINEARITY_GAMMA
    assert NONLINEARITY_GAMMA["gelu"] == 1.7015043497085571


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", [ms.PYNATIVE_MODE, ms.GRAPH_MODE], ids=["pynative", "graph"])
def test_nano_train_mode_forward_backward_gives_finite_gradients_for_every_parameter(mode):
    ms.set_context(mode=mode)
    try:
        ms.set_seed(0)
        net = create_model("dm_nfnet_nano", num_classes=10, drop_rate=0.2, drop_path_rate=0.2, fast_forms=True)
        # non-zero skipinit gains so every residual branch receives a gradient
        for name, p in net.parameters_and_names():
            if name.endswith("skipinit_gain"):
                p.set_data(ms.Tensor(0.5, ms.float32))
        net.set_train(True)
        loss_fn = ms.nn.CrossEntropyLoss()

        def forward(x, y):
            return loss_fn(net(x), y)

        grad_fn = ms.value_and_grad(forward, None, net.trainable_params())
        rng = np.random.default_rng(0)
        x = ms.Tensor(rng.standard_normal((4, 3, 64, 64)).astype(np.float32))
        y = ms.Tensor(rng.integers(0, 10, 4).astype(np.int32))
        loss, grads = grad_fn(x, y)
        assert np.isfinite(loss.asnumpy())
        names = [p.name for p in net.trainable_params()]
        # 25 WS convs (4 stem, 5 per block, final) x 3 + 4 SE x 4 + 4 skipinit gains + head weight and bias
        assert len(grads) == len(names) == 25 * 3 + 16 + 4 + 2
        for name, g in zip(names, grads):
            g = g.asnumpy()
            assert np.isfinite(g).all(), name
            assert np.abs(g).sum() > 0, f"zero gradient for {name}"
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("size", [64, 65, 77, 128])
def test_nano_eval_accepts_any_input_size_from_64(size):
    net = create_model("dm_nfnet_nano", num_classes=10)
    net.set_train(False)
    out = net(ms.Tensor(np.zeros((1, 3, size, size), np.float32)))
    assert out.shape == (1, 10)
