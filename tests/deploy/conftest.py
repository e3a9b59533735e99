"""Fixtures of the deployment tests: a randomized dm_nfnet_nano checkpoint and a tiny image folder."""
import pytest

from deploy_helpers import DIGITS_CONFIG, NUM_CLASSES, random_weights, save_checkpoint, write_image_folder


@pytest.fixture(scope="session")
def nano_weights():
    from src.models import create_model

    network = create_model("dm_nfnet_nano", num_classes=NUM_CLASSES)
    return {"raw": random_weights(network, seed=1), "ema": random_weights(network, seed=2)}


@pytest.fixture(scope="session")
def nano_ckpt(tmp_path_factory, nano_weights):
    """A raw-weights-only checkpoint (what a run without EMA writes)."""
    return save_checkpoint(tmp_path_factory.mktemp("ckpt") / "nano.ckpt", ("", nano_weights["raw"]))


@pytest.fixture(scope="session")
def nano_ema_ckpt(tmp_path_factory, nano_weights):
    """Raw weights plus different EMA weights under 'ema.'."""
    return save_checkpoint(tmp_path_factory.mktemp("ckpt_ema") / "nano_ema.ckpt",
                           ("", nano_weights["raw"]), ("ema.", nano_weights["ema"]))


@pytest.fixture(scope="session")
def image_folder(tmp_path_factory):
    """20 images in 10 class folders."""
    return write_image_folder(tmp_path_factory.mktemp("val") / "val")


@pytest.fixture(scope="session")
def digits_cfg():
    from src.config import load_config

    return load_config(DIGITS_CONFIG, {"device_target": "CPU"})
