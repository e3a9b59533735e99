"""Shell scripts: argument checks, shellcheck, and build.sh's message without MindSpore's C++ API.

The C++ app itself needs MindSpore's C++ inference API (include/api, libmindspore), which
the pip package used here does not ship; it is not built or run in these tests.
"""
import glob
import os
import shutil
import subprocess
import sys

import pytest

from deploy_helpers import ROOT

RUN_SCRIPTS = [os.path.join(ROOT, "scripts", name) for name in ("run_infer_310.sh", "run_infer_cpu.sh")]
BUILD_SCRIPT = os.path.join(ROOT, "ascend310_infer", "build.sh")


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
    scripts = sorted(glob.glob(os.path.join(ROOT, "scripts", "*.sh"))) + [BUILD_SCRIPT, os.path.join(ROOT, ".ci", "run")]
    assert len(scripts) >= 5
    # -x follows `source scripts/infer_common.sh` (paths relative to the repository root)
    result = subprocess.run(["shellcheck", "-x", *scripts], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_build_stops_with_a_clear_message_without_mindspore(tmp_path):
    result = bash(BUILD_SCRIPT, env={"MINDSPORE_PATH": str(tmp_path / "nowhere"), "BUILD_DIR": str(tmp_path / "b")})
    assert result.returncode == 1
    assert f"error: MINDSPORE_PATH={tmp_path / 'nowhere'} holds no MindSpore C++ API" in result.stderr
    result = bash(BUILD_SCRIPT, env={"MINDSPORE_PATH": "", "BUILD_DIR": str(tmp_path / "b")})
    assert result.returncode == 1 and "error: MindSpore C++ API not found" in result.stderr  # pip MindSpore 2.x
    assert not os.path.exists(tmp_path / "b")
