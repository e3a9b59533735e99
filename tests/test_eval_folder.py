"""eval.py on any folder: class folders given directly, labels from the checkpoint's class list, no config."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLASSES = [str(d) for d in range(10)]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A nano digits checkpoint (random weights) carrying the digits' class list and a 64 px eval transform."""
    import mindspore as ms

    from src.config import load_config
    from src.data.data_settings import checkpoint_entry, settings_from_config
    from src.models import create_model
    from src.run.checkpointing import save_checkpoint_atomic

    cfg = load_config(os.path.join(ROOT, "src", "configs", "dm_nfnet_nano_digits.yaml"))
    network = create_model("dm_nfnet_nano", num_classes=10)
    rng = np.random.default_rng(0)
    for name, param in network.parameters_and_names():
        value = rng.uniform(0.5, 1.5, param.shape) if "gain" in name else rng.normal(0, 0.1, param.shape)
        param.set_data(ms.Tensor(value.astype(np.float32)))
    path = str(tmp_path_factory.mktemp("ckpt") / "digits.ckpt")
    save_checkpoint_atomic(network, path, checkpoint_entry(settings_from_config(cfg, CLASSES)))
    return path


def eval_py(*args):
    return subprocess.run([sys.executable, "eval.py", "--device_target", "CPU", "--num_parallel_workers", "1", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


@pytest.mark.timeout(600)
def test_a_folder_of_two_class_folders_is_scored_with_the_checkpoints_labels(checkpoint, tiny_digits, tmp_path):
    import mindspore as ms

    from src.data.transforms import create_eval_transform, load_image
    from src.models import create_model

    folder = tmp_path / "two"
    for digit in ("3", "7"):
        shutil.copytree(os.path.join(tiny_digits, "val", digit), folder / digit)
    result = eval_py("--checkpoint", checkpoint, "--data_path", str(folder), "--output", str(tmp_path / "m.json"))
    assert result.returncode == 0, result.stderr[-3000:]
    with open(tmp_path / "m.json") as f:
        metrics = json.load(f)

    network = create_model("dm_nfnet_nano", num_classes=10, checkpoint_path=checkpoint)
    network.set_train(False)
    transform = create_eval_transform(64, crop_pct=0, crop_mode="pixels")
    correct = 0
    for digit in ("3", "7"):  # label = the folder's position in the checkpoint's classes, not among the two
        files = sorted(os.listdir(folder / digit))
        logits = network(ms.Tensor(np.stack([transform(load_image(str(folder / digit / f))) for f in files])))
        correct += int((logits.asnumpy().argmax(1) == int(digit)).sum())
    assert metrics["count"] == 6 and metrics["correct_top1"] == correct
    assert metrics["data"] == str(folder)


def test_a_class_folder_the_checkpoint_does_not_know_is_named(checkpoint, tiny_digits, tmp_path):
    folder = tmp_path / "odd"
    shutil.copytree(os.path.join(tiny_digits, "val", "3"), folder / "3")
    shutil.copytree(os.path.join(tiny_digits, "val", "4"), folder / "four")
    result = eval_py("--checkpoint", checkpoint, "--data_path", str(folder))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"error: class folders of {folder} that the model does not know: four (its 10 classes: 0, 1, 2, 3, 4")
