"""Helpers of the deployment tests (checkpoints, image folders, exports, eval.py, subprocesses)."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DIGITS_CONFIG = os.path.join(ROOT, "src", "configs", "dm_nfnet_nano_digits.yaml")
F0_CONFIG = os.path.join(ROOT, "src", "configs", "dm_nfnet_f0.yaml")
NUM_CLASSES = 10  # the digits config's class count


def random_weights(network, seed):
    """name -> float32 array for every parameter, all of them contributing to the output.

    skipinit_gain starts at 0 (every residual branch off) and gains at 1; random values
    make each branch, gain and bias count, so a folding mistake anywhere shows.
    """
    from live_weights import random_value  # tests/models, on the path (tests/conftest.py)

    rng = np.random.default_rng(seed)
    return {name: random_value(name, param.shape, rng) for name, param in network.parameters_and_names()}


def save_checkpoint(path, *weight_sets):
    """Save (prefix, weights) pairs into one MindSpore checkpoint."""
    import mindspore as ms

    entries = [{"name": prefix + name, "data": ms.Tensor(value)}
               for prefix, weights in weight_sets for name, value in weights.items()]
    ms.save_checkpoint(entries, str(path))
    return str(path)


def make_network(arch, weights, num_classes):
    """An eval-mode network of `arch` holding `weights`."""
    import mindspore as ms

    from src.models import create_model

    network = create_model(arch, num_classes=num_classes)
    for name, param in network.parameters_and_names():
        param.set_data(ms.Tensor(weights[name]))
    network.set_train(False)
    return network


def write_image_folder(root, classes=NUM_CLASSES, per_class=2, seed=0):
    """root/c<k>/im<i>.<ext>: small images of varied sizes, aspect ratios, formats and modes."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    modes = [("RGB", "jpg"), ("L", "png"), ("RGBA", "png"), ("RGB", "bmp")]
    for c in range(classes):
        folder = os.path.join(root, f"c{c}")
        os.makedirs(folder, exist_ok=True)
        for i in range(per_class):
            mode, ext = modes[(c + i) % len(modes)]
            height, width = 40 + 9 * i + c, 90 - 5 * c
            channels = {"RGB": 3, "L": 1, "RGBA": 4}[mode]
            pixels = rng.integers(0, 256, (height, width, channels), dtype=np.uint8)
            pixels[..., 0] = np.clip(pixels[..., 0].astype(int) // 4 + 25 * c, 0, 255)  # some class signal
            Image.fromarray(pixels.squeeze(-1) if channels == 1 else pixels, mode).save(
                os.path.join(folder, f"im{i}.{ext}"))
    return str(root)


def run_python(args, cwd=None, env=None, timeout=300):
    """Run `python <args>` from the repository's interpreter; returns the CompletedProcess."""
    full_env = dict(os.environ, PYTHONPATH=ROOT, **(env or {}))
    return subprocess.run([sys.executable, *args], cwd=cwd or ROOT, env=full_env, capture_output=True,
                          text=True, timeout=timeout)


def export_nano(directory, checkpoint, *extra):
    """export.py of a dm_nfnet_nano checkpoint into <directory>/nano.mindir (or .onnx with --file_format ONNX)."""
    import importlib

    file_name = str(directory / "nano")
    importlib.import_module("export").main(["--config", DIGITS_CONFIG, "--device_target", "CPU", "--checkpoint",
                                            checkpoint, "--file_name", file_name, *extra])
    return file_name + (".onnx" if "ONNX" in extra else ".mindir")


def run_eval_py(tmp_path, checkpoint, image_folder):
    """eval.py's JSON report for `checkpoint` on `image_folder` (copied to <root>/val)."""
    root = tmp_path / "dataset"
    shutil.copytree(image_folder, root / "val")
    output = tmp_path / "eval.json"
    result = run_python(["eval.py", "--config", DIGITS_CONFIG, "--device_target", "CPU", "--checkpoint", checkpoint,
                         "--data_path", str(root), "--output", str(output)])
    assert result.returncode == 0, result.stdout + result.stderr
    with open(output, encoding="utf-8") as f:
        return json.load(f)


def error_lines(stderr):
    """The stderr lines that are not MindSpore's [WARNING] log lines."""
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith("[WARNING]")]

