"""Shell scripts and the C++ app: argument checks, shellcheck, and the 310 flow on a fake MindSpore API.

The C++ app is built with CMake against tests/deploy/fake_mindspore, a header-only stand-in
for MindSpore's C++ API whose "model" returns the first 10 input values of each row as
logits; that checks the app's file handling, its error exits and the 310 script's plumbing
without MindSpore's C++ libraries (the real build needs the Ascend/GPU MindSpore package).
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from deploy_helpers import NUM_CLASSES, ROOT
from src.deploy.binio import read_labels, read_tensor
from src.deploy.metrics import correct_topk

RUN_SCRIPTS = [os.path.join(ROOT, "scripts", name) for name in ("run_infer_310.sh", "run_infer_cpu.sh")]
BUILD_SCRIPT = os.path.join(ROOT, "ascend310_infer", "build.sh")
FAKE_API = os.path.join(ROOT, "tests", "deploy", "fake_mindspore")


def bash(script, *args, cwd=None, env=None, timeout=120):
    full_env = dict(os.environ, PYTHON=sys.executable, **(env or {}))
    return subprocess.run(["bash", script, *map(str, args)], cwd=cwd, env=full_env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("script", RUN_SCRIPTS, ids=os.path.basename)
@pytest.mark.parametrize("args", [(), ("a.mindir",), ("a.mindir", "digits"), ("a", "b", "c", "0", "extra")],
                         ids=["0_args", "1_arg", "2_args", "5_args"])
def test_wrong_argument_count_prints_usage_and_fails(script, args, tmp_path):
    result = bash(script, *args, cwd=tmp_path)
    assert result.returncode == 1
    assert "Usage: bash" in result.stderr and "[MINDIR_PATH] [DATASET_NAME] [DATASET_PATH]" in result.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("script", RUN_SCRIPTS, ids=os.path.basename)
def test_missing_paths_bad_names_and_ids_are_refused(script, tmp_path, image_folder):
    mindir = tmp_path / "net.mindir"
    mindir.write_bytes(b"x")
    cases = [
        ((tmp_path / "missing.mindir", "digits", image_folder), "MINDIR_PATH not found"),
        ((mindir, "digits", tmp_path / "missing"), "DATASET_PATH not found"),
        ((mindir, "cifar", image_folder), "DATASET_NAME must be imagenet or digits"),
        ((mindir, "digits", image_folder, "one"), "DEVICE_ID must be a non-negative integer"),
    ]
    for args, message in cases:
        result = bash(script, *args, cwd=tmp_path)
        assert result.returncode == 1 and message in result.stderr, (args, result.stderr)
    assert sorted(os.listdir(tmp_path)) == ["net.mindir"]


def test_shellcheck_passes_on_every_script():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (Debian package 'shellcheck'; `make test` installs it)")
    result = subprocess.run(["shellcheck", *RUN_SCRIPTS, BUILD_SCRIPT], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_build_stops_with_a_clear_message_without_mindspore(tmp_path):
    result = bash(BUILD_SCRIPT, env={"MINDSPORE_PATH": str(tmp_path / "nowhere"), "BUILD_DIR": str(tmp_path / "b")})
    assert result.returncode == 1
    assert f"error: MINDSPORE_PATH={tmp_path / 'nowhere'} holds no MindSpore C++ API" in result.stderr
    result = bash(BUILD_SCRIPT, env={"MINDSPORE_PATH": "", "BUILD_DIR": str(tmp_path / "b")})
    assert result.returncode == 1 and "error: MindSpore C++ API not found" in result.stderr  # pip MindSpore 2.x
    assert not os.path.exists(tmp_path / "b")


@pytest.fixture(scope="module")
def fake_app(tmp_path_factory):
    """The app built by build.sh + CMake against the fake API (headers + an empty libmindspore.so)."""
    if not (shutil.which("cmake") and shutil.which("g++") and shutil.which("make")):
        pytest.skip("cmake, make and g++ are needed to build the C++ app")
    root = tmp_path_factory.mktemp("fake_mindspore")
    shutil.copytree(os.path.join(FAKE_API, "include"), root / "include")
    (root / "lib").mkdir()
    (root / "empty.cc").write_text("\n")
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(root / "lib" / "libmindspore.so"), str(root / "empty.cc")],
                   check=True)
    build = root / "build"
    result = bash(BUILD_SCRIPT, env={"MINDSPORE_PATH": str(root), "BUILD_DIR": str(build)}, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "warning" not in result.stdout.lower() + result.stderr.lower()  # -Wall -Wextra clean
    return str(build / "main")


def test_app_prints_usage_on_wrong_arguments(fake_app):
    for args in ([], ["--mindir_path=x"], ["--mindir_path=x", "--input_path=y", "--device_type=TPU"], ["stray"]):
        result = subprocess.run([fake_app, *args], capture_output=True, text=True)
        assert result.returncode == 2 and "usage:" in result.stderr, args


def test_app_reports_failed_status_and_wrong_input_size(fake_app, tmp_path):
    inputs = tmp_path / "images"
    inputs.mkdir()
    np.zeros((1, 3, 8, 8), np.float32).tofile(inputs / "img_00000000.bin")
    result = subprocess.run([fake_app, f"--mindir_path={tmp_path / 'missing.mindir'}", f"--input_path={inputs}"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 1 and "error: loading" in result.stderr and "failed (status" in result.stderr
    (tmp_path / "net.mindir").write_text("2 3 8 8 10")  # the fake model takes batch 2
    result = subprocess.run([fake_app, f"--mindir_path={tmp_path / 'net.mindir'}", f"--input_path={inputs}"],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 1 and "768 bytes, but the model input (2,3,8,8) takes 1536" in result.stderr


@pytest.mark.timeout(300)
def test_310_flow_with_the_app_writes_what_postprocess_scores(fake_app, tmp_path, image_folder):
    mindir = tmp_path / "net.mindir"
    mindir.write_text(f"1 3 64 64 {NUM_CLASSES}")
    result = bash(RUN_SCRIPTS[0], mindir, "digits", image_folder, 0, cwd=tmp_path,
                  env={"INFER_APP": fake_app, "DEVICE_TYPE": "CPU"})
    assert result.returncode == 0, result.stdout + result.stderr
    labels = read_labels(str(tmp_path / "preprocess_Result" / "labels.json"))
    logits, truth = [], []
    for name in sorted(labels):
        image = read_tensor(str(tmp_path / "preprocess_Result" / "images" / f"{name}.bin"), (1, 3 * 64 * 64))
        result_file = str(tmp_path / "result_Files" / f"{name}_0.bin")
        np.testing.assert_array_equal(read_tensor(result_file, (1, NUM_CLASSES)), image[:, :NUM_CLASSES])
        logits.append(image[0, :NUM_CLASSES])
        truth.extend(labels[name])
    with open(tmp_path / "acc.json", encoding="utf-8") as f:
        report = json.load(f)
    assert report["count"] == 20
    assert report["correct_top1"] == correct_topk(np.stack(logits), truth, 1)
    assert "ms per image" in (tmp_path / "time_Result" / "test_perform_static.txt").read_text()
