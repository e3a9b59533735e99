"""Eval-mode logits equal timm's on the same (randomized, converted) weights."""
import mindspore as ms
import numpy as np
import pytest
import torch

from src.models import create_model

# max |delta logit| / max |logit|; measured: F0 <= 8.3e-7 (192, 256, 97; both modes), nano <= 9.7e-7
# (fused kernels and operator forms, both modes)
TOLERANCE = 5e-6


def max_rel_diff(ours, ref):
    return float(np.abs(ours - ref).max() / np.abs(ref).max())


def _compare(reference, ckpt, arch, sizes, mode, batch=2, num_classes=1000):
    ms.set_context(mode=mode)
    try:
        net = create_model(arch, num_classes=num_classes, checkpoint_path=ckpt, fast_forms=True)
        net.set_train(False)
        diffs = {}
        rng = np.random.default_rng(0)
        for size in sizes:
            x = rng.standard_normal((batch, 3, size, size)).astype(np.float32)
            with torch.no_grad():
                ref = reference(torch.from_numpy(x)).numpy()
            ours = net(ms.Tensor(x)).asnumpy()
            assert ours.shape == ref.shape
            diffs[size] = max_rel_diff(ours, ref)
        return diffs
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("mode", [ms.PYNATIVE_MODE, ms.GRAPH_MODE], ids=["pynative", "graph"])
def test_dm_nfnet_f0_logits_match_timm(f0_reference, mode):
    model, ckpt = f0_reference
    diffs = _compare(model, ckpt, "dm_nfnet_f0", sizes=(192, 256, 97), mode=mode)
    print("dm_nfnet_f0 relative max |delta logit|:", diffs)
    assert max(diffs.values()) <= TOLERANCE, diffs


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kernels", ["fused_kernels", "operator_forms"])
@pytest.mark.parametrize("mode", [ms.PYNATIVE_MODE, ms.GRAPH_MODE], ids=["pynative", "graph"])
def test_dm_nfnet_nano_logits_match_timm_nfcfg(nano_reference, mode, kernels, request):
    """With the fused CPU kernels (the CPU default) and with the MindSpore-operator forms."""
    request.getfixturevalue(kernels)
    model, ckpt = nano_reference
    # graph mode compiles once per input shape: two sizes there (one odd: asymmetric SAME padding), four eagerly
    sizes = (65, 96) if mode == ms.GRAPH_MODE else (64, 65, 96, 131)
    diffs = _compare(model, ckpt, "dm_nfnet_nano", sizes=sizes, mode=mode, batch=3, num_classes=10)
    print("dm_nfnet_nano", kernels, "relative max |delta logit|:", diffs)
    assert max(diffs.values()) <= TOLERANCE, diffs


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kernels", ["fused_kernels", "operator_forms"])
def test_dm_nfnet_nano_gradients_match_timm_autograd(nano_reference, kernels, request, graph_mode):
    """Every parameter's gradient of sum(logits * cotangent) equals PyTorch's autograd through timm,
    with the fused CPU kernels' hand-written backwards and with the operator forms."""
    request.getfixturevalue(kernels)
    model, ckpt = nano_reference
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 3, 67, 64)).astype(np.float32)  # odd height: asymmetric SAME padding
    cot = rng.standard_normal((3, 10)).astype(np.float32)
    model.zero_grad()
    (model(torch.from_numpy(x)) * torch.from_numpy(cot)).sum().backward()
    ref = {name: p.grad.numpy() for name, p in model.named_parameters()}

    net = create_model("dm_nfnet_nano", num_classes=10, checkpoint_path=ckpt, fast_forms=True)
    net.set_train(True)  # no dropout / stochastic depth configured: deterministic
    params = net.trainable_params()

    def loss(images, cotangent):
        return (net(images) * cotangent).sum()

    grads = ms.grad(loss, None, params)(ms.Tensor(x), ms.Tensor(cot))
    assert sorted(p.name for p in params) == sorted(ref)
    worst = {p.name: max_rel_diff(g.asnumpy().reshape(ref[p.name].shape), ref[p.name])
             for p, g in zip(params, grads)}
    print(kernels, "largest relative gradient differences:", sorted(worst.items(), key=lambda kv: -kv[1])[:3])
    # measured: 4.6e-6 (fused), 4.4e-6 (operators); 2.0e-5 with an earlier draw of the random weights
    assert max(worst.values()) <= 5e-5, worst
