"""Helpers for the train-step tests: small deterministic networks, data and comparisons."""
import numpy as np
import pytest
import mindspore
from mindspore import Tensor, nn


class TinyConvNet(nn.Cell):
    """conv 3x3 -> mean over H, W -> head.fc: enough for properties that do not need NFNet."""

    def __init__(self, num_classes=5):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, pad_mode="same", has_bias=True, weight_init="normal")
        self.head = nn.Dense(4, num_classes)

    def construct(self, x):
        return self.head(self.conv(x).mean(axis=(2, 3)))


def tiny_net(seed=0, num_classes=5):
    mindspore.set_seed(seed)
    return TinyConvNet(num_classes)


def nano_net(seed=0, num_classes=10):
    """dm_nfnet_nano without dropout or stochastic depth (deterministic), every parameter random
    (tests/models/live_weights.py: skipinit gains non-zero, so the residual branches contribute)."""
    from live_weights import live_nano

    return live_nano(seed, num_classes=num_classes, drop_rate=0.0, drop_path_rate=0.0, fast_forms=True)


def images_and_labels(n, size=64, num_classes=10, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 3, size, size)).astype(np.float32)
    y = rng.integers(0, num_classes, n).astype(np.int32)
    return x, y


def weights(cell):
    """name -> numpy copy of every Parameter of `cell` (checkpoint names)."""
    return {p.name: p.asnumpy().copy() for p in cell.get_parameters()}


def max_rel_diff(a, b, names=None):
    """max over tensors of max|a - b| / max|b| (the scale of each tensor), and the worst name."""
    worst, worst_name = 0.0, None
    for name in names or b:
        scale = float(np.abs(b[name]).max())
        diff = float(np.abs(a[name].astype(np.float64) - b[name]).max())
        rel = diff / scale if scale > 0 else diff
        if rel > worst:
            worst, worst_name = rel, name
    return worst, worst_name


@pytest.fixture(autouse=True)
def _pynative_by_default():
    """Each test starts in PyNative mode; tests that need Graph mode ask for it."""
    mindspore.set_context(mode=mindspore.PYNATIVE_MODE)
    yield
    mindspore.set_context(mode=mindspore.PYNATIVE_MODE)


@pytest.fixture(params=["pynative", "graph"])
def mode(request):
    """Run the test in both execution modes."""
    mindspore.set_context(mode=mindspore.GRAPH_MODE if request.param == "graph"
                          else mindspore.PYNATIVE_MODE)
    return request.param
