"""Fixtures: timm reference networks with every parameter randomized, converted to MindSpore checkpoints."""
import pytest

from timm_reference import export_timm, randomize_, timm, timm_nano


@pytest.fixture(scope="module")
def f0_reference(tmp_path_factory):
    model = randomize_(timm.create_model("dm_nfnet_f0", pretrained=False), seed=0)
    _, ckpt = export_timm(model, tmp_path_factory.mktemp("f0"), "dm_nfnet_f0")
    return model, ckpt


@pytest.fixture(scope="module")
def nano_reference(tmp_path_factory):
    model = randomize_(timm_nano(), seed=1)
    _, ckpt = export_timm(model, tmp_path_factory.mktemp("nano"), "dm_nfnet_nano")
    return model, ckpt
