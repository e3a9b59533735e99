"""preprocess -> CPU inference of the MINDIR -> postprocess counts exactly what eval.py counts."""
import importlib
import json
import os
import subprocess
import sys

import mindspore as ms
import numpy as np
import pytest

from deploy_helpers import (DIGITS_CONFIG, NUM_CLASSES, ROOT, error_lines, export_nano, make_network, run_eval_py,
                            run_python, write_image_folder)
from src.errors import UserError
from src.data.folder import scan_image_folder
from src.data.transforms import create_eval_transform, load_image
from src.deploy.binio import read_tensor
from src.deploy.infer_cpu import run_inference
from src.accuracy import correct_topk

preprocess_script = importlib.import_module("preprocess")


def reference_logits(network, cfg, folder):
    """The eval-mode network over create_eval_transform, in folder order (what eval.py runs)."""
    transform = create_eval_transform(cfg.test_input_size, crop_pct=cfg.crop_pct, crop_mode=cfg.eval_crop_mode,
                                      interpolation=cfg.interpolation)
    samples, _ = scan_image_folder(folder)
    x = np.stack([transform(load_image(path)) for path, _ in samples])
    return network(ms.Tensor(x)).asnumpy(), [label for _, label in samples]


@pytest.fixture(scope="module")
def nano_mindir(tmp_path_factory, nano_ckpt):
    """export.py with default options on this CPU machine: the portable (native Conv2D) MINDIR."""
    return export_nano(tmp_path_factory.mktemp("mindir"), nano_ckpt)


@pytest.fixture(scope="module")
def nano_onnx(tmp_path_factory, nano_ckpt):
    return export_nano(tmp_path_factory.mktemp("onnx"), nano_ckpt, "--file_format", "ONNX", "--dynamic_batch")


@pytest.mark.timeout(300)
# The MINDIR under the seed's dataset name imagenet2012 (the F0 config, 1000 classes): the 10-class model's
# <model>.json gives the class count and transform, so it scores what it scores under "digits" (issue 27).
@pytest.mark.parametrize("script, model, dataset_name", [("run_infer_cpu.sh", "nano_mindir", "imagenet2012"),
                                                         ("run_infer_onnx.sh", "nano_onnx", "digits")])
def test_cpu_flow_counts_exactly_what_eval_py_counts(tmp_path, request, script, model, dataset_name, nano_ckpt,
                                                     nano_weights, image_folder, digits_cfg):
    work = tmp_path / "infer"
    work.mkdir()
    env = dict(os.environ, PYTHON=sys.executable)
    result = subprocess.run(["bash", os.path.join(ROOT, "scripts", script), request.getfixturevalue(model),
                             dataset_name, image_folder], cwd=work, env=env, capture_output=True, text=True,
                            timeout=280)
    assert result.returncode == 0, result.stdout + result.stderr
    with open(work / "acc.json", encoding="utf-8") as f:
        report = json.load(f)

    evaluated = run_eval_py(tmp_path, nano_ckpt, image_folder)
    for key in ("count", "correct_top1", "correct_top5", "top1", "top5"):
        assert report[key] == evaluated[key], key

    # and image by image: the network itself over the eval transform
    network = make_network("dm_nfnet_nano", nano_weights["raw"], NUM_CLASSES)
    expected, labels = reference_logits(network, digits_cfg, image_folder)
    assert report["count"] == len(labels) == 20
    assert report["correct_top1"] == correct_topk(expected, labels, 1)
    assert report["correct_top5"] == correct_topk(expected, labels, 5)
    deployed = np.concatenate([read_tensor(str(work / "result_Files" / f"img_{i:08d}_0.bin"), (1, NUM_CLASSES))
                               for i in range(len(labels))])
    np.testing.assert_array_equal(deployed.argmax(1), expected.argmax(1))
    error = np.abs(deployed - expected).max() / np.abs(expected).max()
    print(f"{script}: max|logit - eval network| / max|logit| = {error:.2e}")
    assert error <= 5e-6  # measured 8.2e-7 (MINDIR), 4.1e-7 (ONNX)
    assert "ms per image" in (work / "time_Result" / "test_perform_static.txt").read_text()
    assert "top-1" in (work / "acc.log").read_text()


@pytest.mark.timeout(300)
def test_a_dataset_with_more_classes_than_the_model_is_refused_before_inference(tmp_path, nano_mindir):
    folder = tmp_path / "twelve"
    write_image_folder(str(folder), classes=12, per_class=1)
    work = tmp_path / "infer"
    work.mkdir()
    result = subprocess.run(["bash", os.path.join(ROOT, "scripts", "run_infer_cpu.sh"), nano_mindir, "digits",
                             folder], cwd=work, env=dict(os.environ, PYTHON=sys.executable), capture_output=True,
                            text=True, timeout=280)
    assert result.returncode != 0
    errors = error_lines(result.stderr)
    assert errors and "12 classes" in errors[0] and f"{nano_mindir} has 10 outputs" in errors[0], result.stderr
    assert not (work / "result_Files").exists()  # no inference ran


def test_inputs_of_another_shape_are_rejected_with_the_fix(tmp_path, nano_mindir, image_folder):
    preprocess_script.main(["--config", DIGITS_CONFIG, "--data_path", image_folder, "--output_path",
                            str(tmp_path / "pre"), "--batch_size", "2"])
    with pytest.raises(UserError, match=r"expected 12288 .*preprocess with --batch_size 1 at test_input_size 64"):
        run_inference(nano_mindir, str(tmp_path / "pre" / "images"), str(tmp_path / "result_Files"), progress=False)


def test_missing_inputs_are_an_error(tmp_path, nano_mindir):
    with pytest.raises(UserError, match="folder not found"):
        run_inference(nano_mindir, str(tmp_path / "nothing"), str(tmp_path / "result_Files"), progress=False)


@pytest.mark.timeout(300)
def test_a_truncated_input_stops_the_runner_before_any_result_is_written(tmp_path, nano_mindir, image_folder):
    """Provokes: one .bin cut short among good ones. The runner exits 2 with one line naming it, having
    written no result (every input is checked before the first runs)."""
    preprocess_script.main(["--config", DIGITS_CONFIG, "--data_path", image_folder, "--output_path",
                            str(tmp_path / "pre")])
    images = tmp_path / "pre" / "images"
    victim = images / sorted(os.listdir(images))[5]
    victim.write_bytes(victim.read_bytes()[:1000])
    result = run_python(["-m", "src.deploy.infer_cpu", "--mindir_path", nano_mindir, "--input_path", str(images),
                         "--result_path", str(tmp_path / "result_Files"), "--time_path", str(tmp_path / "time")])
    assert result.returncode == 2
    assert error_lines(result.stderr) == [
        f"error: {victim}: holds 250 float32 values, expected 12288 for shape (1, 3, 64, 64) (49152 bytes); "
        "the model takes input (1, 3, 64, 64): preprocess with --batch_size 1 at test_input_size 64"]
    assert os.listdir(tmp_path / "result_Files") == []
