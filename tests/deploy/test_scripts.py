"""Shell scripts: argument checks, shellcheck, and build.sh's flavour detection and messages.

The C++ app needs MindSpore's C++ inference library (libmindspore-lite.so or libmindspore.so),
which no package on this machine ships: build.sh is run up to the link, against the real
headers (tests/deploy/test_cpp_app.py type-checks and runs the rest).
"""
import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

from deploy_helpers import ROOT

RUN_SCRIPTS = [os.path.join(ROOT, "scripts", name)
               for name in ("run_infer_310.sh", "run_infer_cpu.sh", "run_infer_onnx.sh")]
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
    model = "ONNX_PATH" if "onnx" in script else "MINDIR_PATH"
    assert "Usage: bash" in result.stderr and f"[{model}] [DATASET_NAME] [DATASET_PATH]" in result.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("script", RUN_SCRIPTS, ids=os.path.basename)
def test_missing_paths_bad_names_and_ids_are_refused(script, tmp_path, image_folder):
    mindir = tmp_path / "net.mindir"
    mindir.write_bytes(b"x")
    cases = [
        ((tmp_path / "missing.mindir", "digits", image_folder),
         ("ONNX_PATH" if "onnx" in script else "MINDIR_PATH") + " not found"),
        ((mindir, "digits", tmp_path / "missing"), "DATASET_PATH not found"),
        ((mindir, "cifar", image_folder), "DATASET_NAME must be imagenet (or imagenet2012) or digits"),
        ((mindir, "digits", image_folder, "one"), "DEVICE_ID must be a non-negative integer"),
    ]
    for args, message in cases:
        result = bash(script, *args, cwd=tmp_path)
        assert result.returncode == 1 and message in result.stderr, (args, result.stderr)
    assert sorted(os.listdir(tmp_path)) == ["net.mindir"]


def test_shellcheck_passes_on_every_script():
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (Debian package shellcheck: sudo make shellcheck)")
    scripts = sorted(glob.glob(os.path.join(ROOT, "scripts", "*.sh"))) + [BUILD_SCRIPT, os.path.join(ROOT, ".ci", "run")]
    assert len(scripts) >= 5
    # -x follows `source scripts/infer_common.sh` (paths relative to the repository root)
    result = subprocess.run(["shellcheck", "-x", *scripts], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_run_infer_310_checks_its_options_before_any_work(tmp_path, image_folder):
    script = RUN_SCRIPTS[0]
    mindir = tmp_path / "net.mindir"
    mindir.write_bytes(b"x")
    cases = [
        (("--precision_mode=fp8", mindir, "digits", image_folder), "error: --precision_mode must be preferred_fp32"),
        (("--device_type", "TPU", mindir, "digits", image_folder), "error: --device_type must be Ascend, Ascend310"),
        (("--batch=2", mindir, "digits", image_folder), "error: unknown option --batch (options: device_type "
                                                        "precision_mode)"),
        (("--precision_mode",), "error: --precision_mode needs a value"),
    ]
    for args, message in cases:
        result = bash(script, *args, cwd=tmp_path)
        assert result.returncode == 1 and message in result.stderr, (args, result.stderr)
    assert sorted(os.listdir(tmp_path)) == ["net.mindir"]


def test_build_stops_with_a_clear_message_without_mindspore(tmp_path):
    result = bash(BUILD_SCRIPT, env={"MINDSPORE_PATH": str(tmp_path / "nowhere"), "LITE_HOME": "",
                                     "BUILD_DIR": str(tmp_path / "b")})
    assert result.returncode == 1
    assert f"error: MINDSPORE_PATH={tmp_path / 'nowhere'} LITE_HOME= hold no MindSpore C++ API" in result.stderr
    result = bash(BUILD_SCRIPT, env={"MINDSPORE_PATH": "", "LITE_HOME": "", "BUILD_DIR": str(tmp_path / "b")})
    assert result.returncode == 1  # pip MindSpore 2.10 ships no C++ API
    assert "error: MindSpore C++ API not found: MindSpore >= 2.4 wheels ship none" in result.stderr
    assert not os.path.exists(tmp_path / "b")


def test_build_refuses_a_compiler_older_than_gcc_7_3(tmp_path):
    old_gcc = tmp_path / "g++-7.2"
    old_gcc.write_text("#!/bin/sh\n[ \"$1\" = -dumpfullversion ] && echo 7.2.0 && exit 0\necho 'g++ 7.2.0'\n")
    old_gcc.chmod(0o755)
    result = bash(BUILD_SCRIPT, env={"CXX": str(old_gcc), "BUILD_DIR": str(tmp_path / "b")})
    assert result.returncode == 1
    assert f"error: {old_gcc} 7.2.0 is too old: the app needs g++ >= 7.3" in result.stderr


@pytest.mark.timeout(300)
@pytest.mark.parametrize("library, flavour, message", [
    ("libmindspore-lite.so", "lite", "MindSpore Lite at {root} (model built from the file)"),
    ("libmindspore.so", "full", "full MindSpore at {root} (model built through GraphCell)"),
])
def test_build_finds_the_flavour_and_compiles_up_to_the_link(tmp_path, library, flavour, message):
    """A root with the real headers and an empty library of the flavour's name: build.sh says which flavour,
    CMake compiles both sources with it and only the link fails, on MindSpore's own symbols."""
    from test_cpp_app import CXX_API

    if shutil.which("cmake") is None or shutil.which("g++") is None:
        pytest.skip("cmake and g++ are needed (Debian packages cmake, g++)")
    if not os.path.isdir(os.path.join(CXX_API, "include", "api")):
        pytest.skip(f"outside the repository: MindSpore's C++ API headers are not at {CXX_API}")
    root = tmp_path / "lite" / "runtime"  # the Lite tarball's layout, found through LITE_HOME=<tarball>
    (root / "lib").mkdir(parents=True)
    os.symlink(os.path.join(CXX_API, "include"), root / "include")
    (tmp_path / "empty.cc").write_text("")
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(root / "lib" / library), str(tmp_path / "empty.cc")],
                   check=True, timeout=60)
    result = bash(BUILD_SCRIPT, env={"MINDSPORE_PATH": "", "LITE_HOME": str(tmp_path / "lite"),
                                     "BUILD_DIR": str(tmp_path / "b")}, timeout=280)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert "MindSpore C++ API: " + message.format(root=root) in output
    assert f"MindSpore C++ API: {flavour}" in output  # CMake's own report
    assert "Building CXX object CMakeFiles/main.dir/src/main.cc.o" in output
    assert "Building CXX object CMakeFiles/main.dir/src/utils.cc.o" in output
    assert "undefined reference to `mindspore::Model::Build" in output, output[-3000:]
    assert not re.search(r"src/(main|mindir_header|utils)\.cc:\d+:\d+: (warning|error)", output)  # none from our code
