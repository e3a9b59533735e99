"""predict.py in real processes: a folder searched recursively, a list, JSON and CSV, checkpoint = MINDIR = ONNX.

The checkpoint carries its data settings (three named classes, a squash eval transform at
64 px), so no command here names a config: predict.py and export.py take them from it.
"""
import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLASSES = ["cat", "dog", "eel"]


def run(*args, timeout=600):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def ok(*args, **kwargs):
    result = run(*args, **kwargs)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    import mindspore as ms

    from src.config import load_config
    from src.data.data_settings import checkpoint_entry, settings_from_config
    from src.models import create_model
    from src.run.checkpointing import save_checkpoint_atomic

    cfg = load_config(overrides={"arch": "dm_nfnet_nano", "num_classes": 3,
                                 "test_input_size": 64, "eval_crop_mode": "squash", "crop_pct": 0.875})
    network = create_model("dm_nfnet_nano", num_classes=3)
    rng = np.random.default_rng(0)
    for name, param in network.parameters_and_names():  # every branch contributes, logits differ per image
        shape = param.shape
        value = rng.uniform(0.5, 1.5, shape) if "gain" in name else rng.normal(0, 0.1, shape)
        param.set_data(ms.Tensor(value.astype(np.float32)))
    path = str(tmp_path_factory.mktemp("ckpt") / "nano.ckpt")
    save_checkpoint_atomic(network, path, checkpoint_entry(settings_from_config(cfg, CLASSES)))
    return path


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(1)
    for rel, size in (("a.png", (80, 100)), ("sub/b.jpg", (120, 70)), ("sub/deeper/c.png", (64, 64)),
                      (".hidden/x.png", (64, 64))):
        os.makedirs(root / os.path.dirname(rel), exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(root / rel)
    (root / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    (root / "notes.txt").write_text("not an image")
    return root


def expected_topk(checkpoint, paths, k):
    """Top-k of the checkpoint's network on the eval transform it carries, computed here."""
    import mindspore as ms

    from src.data.transforms import create_eval_transform, load_image
    from src.models import create_model

    network = create_model("dm_nfnet_nano", num_classes=3, checkpoint_path=checkpoint)
    network.set_train(False)
    transform = create_eval_transform(64, crop_pct=0.875, crop_mode="squash")
    logits = network(ms.Tensor(np.stack([transform(load_image(str(p))) for p in paths]))).asnumpy()
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs /= probs.sum(1, keepdims=True)
    order = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(probs, order, axis=1)


@pytest.mark.timeout(600)
def test_a_folder_is_searched_recursively_and_unreadable_images_are_listed(checkpoint, images, tmp_path):
    out = tmp_path / "preds.json"
    result = ok("predict.py", "--checkpoint", checkpoint, str(images), "--device_target", "CPU", "--topk", "2",
                "--batch_size", "2", "--output", str(out))
    with open(out) as f:
        report = json.load(f)
    readable = [images / "a.png", images / "sub" / "b.jpg", images / "sub" / "deeper" / "c.png"]
    assert [p["path"] for p in report["predictions"]] == [str(p) for p in readable]
    assert report["unreadable"] == [str(images / "bad.png")] and report["count"] == 3
    assert report["transform"].startswith("resize 73x73, center crop 64, bicubic")  # floor(64 / 0.875)
    with open(tmp_path / "preds_bad_files.txt") as f:
        assert f.read() == f"{images / 'bad.png'}\n"
    assert f"skipped 1 unreadable image(s), listed in {tmp_path / 'preds_bad_files.txt'}" in result.stderr
    order, probs = expected_topk(checkpoint, readable, 2)
    for item, classes, p in zip(report["predictions"], order, probs):
        assert [e["index"] for e in item["topk"]] == list(classes)
        assert [e["label"] for e in item["topk"]] == [CLASSES[c] for c in classes]
        np.testing.assert_allclose([e["probability"] for e in item["topk"]], p, rtol=1e-5)


@pytest.mark.timeout(900)
def test_exported_mindir_and_onnx_predict_what_the_checkpoint_does(checkpoint, images, tmp_path):
    listing = tmp_path / "list.txt"
    listing.write_text(f"# two of them\n{images / 'sub' / 'b.jpg'}\n{images / 'a.png'}\n")
    reference = tmp_path / "ckpt.csv"
    ok("predict.py", "--checkpoint", checkpoint, str(listing), "--device_target", "CPU", "--output", str(reference))
    with open(reference, newline="") as f:
        expected = list(csv.DictReader(f))
    assert [row["path"] for row in expected] == [str(images / "sub" / "b.jpg"), str(images / "a.png")]
    assert list(expected[0])[:4] == ["path", "label_1", "probability_1", "index_1"] and len(expected[0]) == 1 + 3 * 3
    for fmt in ("MINDIR", "ONNX"):
        model = tmp_path / f"nano.{fmt.lower()}"
        ok("export.py", "--checkpoint", checkpoint, "--device_target", "CPU", "--file_format", fmt,
           "--file_name", str(tmp_path / "nano"))
        assert os.path.isfile(str(model) + ".json")  # the data settings travel with the model
        out = tmp_path / f"{fmt}.csv"
        ok("predict.py", "--model", str(model), str(listing), "--device_target", "CPU", "--output", str(out))
        with open(out, newline="") as f:
            rows = list(csv.DictReader(f))
        assert [r["path"] for r in rows] == [r["path"] for r in expected]
        for row, want in zip(rows, expected):
            for r in (1, 2, 3):
                assert (row[f"label_{r}"], row[f"index_{r}"]) == (want[f"label_{r}"], want[f"index_{r}"]), fmt
                assert float(row[f"probability_{r}"]) == pytest.approx(float(want[f"probability_{r}"]), abs=2e-6)


@pytest.mark.parametrize("case", ["missing input", "both sources", "checkpoint as model", "topk 0", "txt output",
                                  "not an image"])
def test_mistakes_end_in_one_error_line_before_any_work(case, checkpoint, images, tmp_path):
    args = {
        "missing input": ["--checkpoint", checkpoint, str(tmp_path / "nope.png")],
        "both sources": ["--checkpoint", checkpoint, "--model", checkpoint, str(images)],
        "checkpoint as model": ["--model", checkpoint, str(images)],
        "topk 0": ["--checkpoint", checkpoint, "--topk", "0", str(images)],
        "txt output": ["--checkpoint", checkpoint, str(images), "--output", str(tmp_path / "p.txt")],
        "not an image": ["--checkpoint", checkpoint, str(images / "x.dat")],
    }[case]
    if case == "not an image":
        (images / "x.dat").write_bytes(b"data")
    expected = {
        "missing input": f"error: input not found: {tmp_path / 'nope.png'}",
        "both sources": "error: command line: argument --model: not allowed with argument --checkpoint",
        "checkpoint as model": f"error: --model {checkpoint}: expected an exported .mindir or .onnx file",
        "topk 0": "error: command line: --topk must be >= 1, got 0",
        "txt output": f"error: --output {tmp_path / 'p.txt'}: name a .json or .csv file, or give --format json|csv",
        "not an image": f"error: {images / 'x.dat'}: not an image",
    }[case]
    result = run("predict.py", *args, "--device_target", "CPU", timeout=120)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and lines[0].startswith(expected), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert not os.path.exists(tmp_path / "p.txt")
