"""A converted timm F0 is preprocessed and evaluated with timm's eval transform (resize 284, crop 256), no config.

Real processes: convert_weights, preprocess.py and eval.py, each given only the checkpoint
and a folder of class folders; the tensors are compared with timm's own transform and the
eval loss with timm's network on those tensors.
"""
import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

torch = pytest.importorskip("torch")
timm = pytest.importorskip("timm")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIZES = [(300, 400), (517, 333), (284, 284), (640, 480)]  # (width, height): portrait, landscape, square


def run(*args, timeout=900):
    result = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


def image_folder(root):
    rng = np.random.default_rng(0)
    for i, (w, h) in enumerate(SIZES):
        cls = root / ("a" if i < 2 else "b")
        cls.mkdir(parents=True, exist_ok=True)
        smooth = rng.integers(0, 256, (h // 16 + 1, w // 16 + 1, 3), dtype=np.uint8)
        img = Image.fromarray(smooth).resize((w, h), Image.Resampling.BILINEAR)  # photo-like gradients
        img.save(cls / f"img{i}.png")
    return root


@pytest.fixture(scope="module")
def converted_f0(tmp_path_factory):
    from timm_reference import export_timm, randomize_  # tests/models/timm_reference.py

    tmp = tmp_path_factory.mktemp("f0")
    # two classes, so that a folder of two class folders is a whole evaluation set
    model = randomize_(timm.create_model("dm_nfnet_f0", pretrained=False, num_classes=2), seed=1)
    _, ckpt = export_timm(model, tmp, "dm_nfnet_f0")
    return model, ckpt


def timm_eval_tensors(model, folder):
    config = timm.data.resolve_data_config({}, model=model, use_test_size=True)
    transform = timm.data.create_transform(**config)
    assert (config["input_size"], config["crop_pct"], config["crop_mode"]) == ((3, 256, 256), 0.9, "squash")
    paths = sorted(glob.glob(str(folder / "*" / "*.png")))
    return paths, torch.stack([transform(Image.open(p).convert("RGB")) for p in paths])


@pytest.mark.timeout(1200)
def test_preprocess_and_eval_of_a_converted_f0_use_timms_transform(converted_f0, tmp_path):
    model, ckpt = converted_f0
    folder = image_folder(tmp_path / "images")
    paths, expected = timm_eval_tensors(model, folder)

    out = tmp_path / "pre"
    result = run("preprocess.py", "--checkpoint", ckpt, "--data_path", str(folder), "--output_path", str(out))
    assert "crop_pct 0.9, eval_crop_mode squash" in result.stdout  # test_input_size 256 is the default too
    with open(out / "sources.json") as f:
        sources = json.load(f)
    for name, (source,) in sorted(sources.items()):
        ours = np.fromfile(out / "images" / f"{name}.bin", dtype="<f4").reshape(1, 3, 256, 256)
        theirs = expected[paths.index(str(folder / source))].numpy()
        np.testing.assert_allclose(ours[0], theirs, rtol=0, atol=1e-6)  # the same 284 -> 256 pixels

    metrics_path = tmp_path / "eval.json"
    result = run("eval.py", "--checkpoint", ckpt, "--data_path", str(folder), "--device_target", "CPU",
                 "--eval_batch_size", "4", "--num_parallel_workers", "1", "--output", str(metrics_path))
    assert "resize 284x284, center crop 256, bicubic" in result.stdout
    with open(metrics_path) as f:
        metrics = json.load(f)
    assert metrics["transform"] == {"test_input_size": 256, "crop_pct": 0.9, "eval_crop_mode": "squash",
                                    "interpolation": "bicubic"}
    assert metrics["count"] == len(SIZES)
    labels = torch.tensor([0 if os.sep + "a" + os.sep in p else 1 for p in paths])
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(model.eval()(expected), labels).item()
    assert metrics["loss"] == pytest.approx(loss, rel=1e-4)


def test_the_command_line_overrides_the_checkpoints_settings(converted_f0, tmp_path):
    _, ckpt = converted_f0
    folder = image_folder(tmp_path / "images")
    out = tmp_path / "pre"
    run("preprocess.py", "--checkpoint", ckpt, "--data_path", str(folder), "--output_path", str(out),
        "--test_input_size", "224", "--eval_crop_mode", "pixels", "--crop_pct", "32")
    first = sorted(os.listdir(out / "images"))[0]
    assert os.path.getsize(out / "images" / first) == 4 * 3 * 224 * 224
