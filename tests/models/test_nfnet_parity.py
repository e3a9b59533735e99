"""Eval-mode logits equal timm's on the same (randomized, converted) weights."""
import mindspore as ms
import numpy as np
import pytest
import torch

from src.models import create_model

TOLERANCE = 1e-4  # max |delta logit| / max |logit|


def max_rel_diff(ours, ref):
    return float(np.abs(ours - ref).max() / np.abs(ref).max())


def _compare(reference, ckpt, arch, sizes, mode, batch=2, num_classes=1000):
    ms.set_context(mode=mode)
    try:
        net = create_model(arch, num_classes=num_classes, checkpoint_path=ckpt)
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
@pytest.mark.parametrize("mode", [ms.PYNATIVE_MODE, ms.GRAPH_MODE], ids=["pynative", "graph"])
def test_dm_nfnet_nano_logits_match_timm_nfcfg(nano_reference, mode):
    model, ckpt = nano_reference
    diffs = _compare(model, ckpt, "dm_nfnet_nano", sizes=(64, 65, 96, 131), mode=mode, batch=3, num_classes=10)
    print("dm_nfnet_nano relative max |delta logit|:", diffs)
    assert max(diffs.values()) <= TOLERANCE, diffs
