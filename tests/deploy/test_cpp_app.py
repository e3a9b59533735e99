"""ascend310_infer/: type-checked against MindSpore's real C++ API headers, and its MindSpore-free part run.

No MindSpore (Lite) C++ library exists on this machine, so the app cannot be linked here. Instead:
- every source compiles with `g++ -std=c++17 -fsyntax-only` against the public headers in
  ../shared/mindspore-cxx-api (the include/api that MindSpore and MindSpore Lite install), once
  per build flavour (Lite: NFNET_MINDSPORE_LITE defined; full MindSpore: not), with -Werror on the
  app's own code (the headers come in through -isystem, so their warnings do not count);
- a wrong MindSpore call makes that check fail (so it bites);
- the helpers main.cc uses for files (inc/utils.h) are compiled with tests/deploy/cpp/io_check.cc
  into a program that runs on real preprocess.py output, and its results are compared with NumPy
  and scored by postprocess.py.
"""
import glob
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from deploy_helpers import DIGITS_CONFIG, NUM_CLASSES, ROOT, run_python
from src.deploy.binio import read_labels, read_tensor
from src.accuracy import correct_topk

APP_DIR = os.path.join(ROOT, "ascend310_infer")
SOURCES = sorted(glob.glob(os.path.join(APP_DIR, "src", "*.cc")))


def find_cxx_api():
    """../shared/mindspore-cxx-api beside the repository (or, in a git worktree, beside its main checkout)."""
    roots = [ROOT]
    try:
        common = subprocess.run(["git", "rev-parse", "--path-format=absolute", "--git-common-dir"], cwd=ROOT,
                                capture_output=True, text=True, timeout=10).stdout.strip()
        if common:
            roots.append(os.path.dirname(common))
    except (OSError, subprocess.SubprocessError):
        pass
    candidates = [os.path.normpath(os.path.join(root, "..", "shared", "mindspore-cxx-api")) for root in roots]
    return next((c for c in candidates if os.path.isfile(os.path.join(c, "include", "api", "model.h"))), candidates[0])


CXX_API = find_cxx_api()
IO_CHECK = os.path.join(ROOT, "tests", "deploy", "cpp", "io_check.cc")
FLAVOURS = {"lite": ["-DNFNET_MINDSPORE_LITE"], "full": []}
GXX = shutil.which("g++")

needs_gxx = pytest.mark.skipif(GXX is None, reason="g++ is not installed (Debian package g++)")
# "outside the repository: " marks a skip tests/conftest.py lets a CI run keep (UNAVOIDABLE_SKIPS)
needs_api = pytest.mark.skipif(
    not os.path.isfile(os.path.join(CXX_API, "include", "api", "model.h")),
    reason=f"outside the repository: MindSpore's C++ API headers are not at {CXX_API} (../shared/mindspore-cxx-api relative to the "
           f"repository: include/api/*.h of a MindSpore or MindSpore Lite install)")


def syntax_check(source, flavour, extra=()):
    """g++ -fsyntax-only of one source against the real headers; returns the CompletedProcess."""
    command = [GXX, "-std=c++17", "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-I", APP_DIR,
               "-isystem", CXX_API, *FLAVOURS[flavour], *extra, source]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


@needs_gxx
@needs_api
@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
@pytest.mark.parametrize("source", SOURCES, ids=os.path.basename)
def test_every_source_type_checks_against_the_mindspore_api(source, flavour):
    assert len(SOURCES) == 3
    result = syntax_check(source, flavour)
    assert result.returncode == 0, result.stderr


def mutated_main(tmp_path, old, new):
    with open(os.path.join(APP_DIR, "src", "main.cc"), encoding="utf-8") as f:
        text = f.read()
    assert text.count(old) == 1, old
    path = tmp_path / "main.cc"
    path.write_text(text.replace(old, new), encoding="utf-8")
    return str(path)


@needs_gxx
@needs_api
@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
@pytest.mark.parametrize("old, new, message", [
    ("model->Build(path, mindspore::ModelType::kMindIR, context)", "model->Build(path, context)",
     "no matching function"),
    ("ascend->SetPrecisionMode(options.precision_mode)", "ascend->SetPrecisionMode(options.device_id)",
     "SetPrecisionMode"),
    ("output.ElementNum()", "output.ElementCount()", "ElementCount"),
    ("mindspore::kLiteNotSupport", "mindspore::kLiteUnsupported", "kLiteUnsupported"),
], ids=["build_signature", "precision_mode_type", "tensor_method", "status_code"])
def test_a_wrong_mindspore_call_fails_the_type_check(tmp_path, flavour, old, new, message):
    """The check bites: each mutation of a MindSpore call in main.cc is a compile error naming it."""
    result = syntax_check(mutated_main(tmp_path, old, new), flavour)
    assert result.returncode != 0
    assert "error" in result.stderr and message in result.stderr, result.stderr


def test_no_source_needs_filesystem():
    """GCC 7.3 (Ascend toolkits' baseline) has no <filesystem> without -lstdc++fs: POSIX calls instead."""
    for path in SOURCES + glob.glob(os.path.join(APP_DIR, "inc", "*.h")):
        with open(path, encoding="utf-8") as f:
            assert not re.search(r"#include\s*<(experimental/)?filesystem>", f.read()), path


# ----------------------------------------------------------------------------- the file part, executed

@pytest.fixture(scope="module")
def io_check(tmp_path_factory):
    if GXX is None:
        pytest.skip("g++ is not installed (Debian package g++)")
    binary = str(tmp_path_factory.mktemp("io_check") / "io_check")
    result = subprocess.run([GXX, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-I", APP_DIR, IO_CHECK,
                             os.path.join(APP_DIR, "src", "utils.cc"), "-o", binary],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return binary


@pytest.fixture(scope="module")
def preprocessed(tmp_path_factory, image_folder):
    """Real preprocess.py output: 20 images at batch 3 -> 7 files, the last holding 2 images + 1 padding."""
    out = tmp_path_factory.mktemp("pre")
    result = run_python(["preprocess.py", "--config", DIGITS_CONFIG, "--data_path", image_folder,
                         "--output_path", str(out), "--batch_size", "3"])
    assert result.returncode == 0, result.stderr
    return out


def run_io_check(binary, pre, work, *extra):
    args = [binary, f"--mindir_path={IO_CHECK}", f"--input_path={pre / 'images'}",
            f"--result_path={work / 'result_Files'}", f"--time_path={work / 'time_Result'}",
            f"--num_classes={NUM_CLASSES}", "--input_shape=3,3,64,64", *extra]
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


def test_io_program_writes_results_that_postprocess_scores_like_numpy(io_check, preprocessed, tmp_path):
    result = run_io_check(io_check, preprocessed, tmp_path, "--num_images=20")
    assert result.returncode == 0, result.stderr
    labels = read_labels(str(preprocessed / "labels.json"))
    assert len(labels) == 7
    logits, rows = [], []
    stride = 3 * 64 * 64 // NUM_CLASSES
    for name in sorted(labels):
        images = read_tensor(str(preprocessed / "images" / f"{name}.bin"), (3, 3, 64, 64))
        expected = images.reshape(3, -1)[:, ::stride][:, :NUM_CLASSES]  # NumPy's reading of the same file
        written = read_tensor(str(tmp_path / "result_Files" / f"{name}_0.bin"), (3, NUM_CLASSES))
        assert written.tobytes() == expected.tobytes()  # every byte read, placed and written exactly
        logits.append(expected[:len(labels[name])])
        rows += labels[name]
    logits = np.concatenate(logits)
    scored = run_python(["postprocess.py", "--result_path", str(tmp_path / "result_Files"), "--label_path",
                         str(preprocessed / "labels.json"), "--output", str(tmp_path / "acc.json"),
                         "--num_classes", str(NUM_CLASSES)])
    assert scored.returncode == 0, scored.stderr
    report = json.loads((tmp_path / "acc.json").read_text())
    assert report["count"] == 20
    assert report["correct_top1"] == correct_topk(logits, rows, 1)
    assert report["correct_top5"] == correct_topk(logits, rows, 5)
    # 7 files x 10 ms over the 20 real images (the padding row of the last file not counted)
    timing = (tmp_path / "time_Result" / "test_perform_static.txt").read_text()
    assert timing == "NN inference cost average time: 3.500 ms per image (10.000 ms per file, 7 files, 20 images)\n"


def test_without_num_images_every_row_counts(io_check, preprocessed, tmp_path):
    result = run_io_check(io_check, preprocessed, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "3.333 ms per image (10.000 ms per file, 7 files, 21 images)" in result.stdout


@pytest.mark.parametrize("case, extra, message", [
    ("float16_output", ["--output_type=float16"],
     "error: output 0 of batch_00000000 is float16, expected float32 logits"),
    ("class_count", ["--output_elements=6000"],
     "error: output 0 of batch_00000000 has 6000 values, expected 3 x 10 (batch x --num_classes)"),
    ("image_count", ["--num_images=30"], "error: --num_images 30 does not fit 7 files of batch 3 (expected 19 to 21)"),
    ("input_shape", ["--input_shape=1,3,64,64"], "error: {images}/batch_00000000.bin: 147456 bytes, but the model "
     "input (1,3,64,64, float32) takes 49152; preprocess with --batch_size 1 at test_input_size 64"),
    ("device_type", ["--device_type=TPU"], "error: --device_type must be one of Ascend, Ascend310, Ascend310P, "
     "Ascend910, GPU, CPU, got 'TPU'"),
    ("precision_mode", ["--precision_mode=fp8"], "error: --precision_mode must be one of preferred_fp32, "),
])
def test_bad_outputs_and_arguments_are_one_error_line_and_exit_2(io_check, preprocessed, tmp_path, case, extra,
                                                                  message):
    result = run_io_check(io_check, preprocessed, tmp_path, *extra)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(message.format(images=preprocessed / "images")), result.stderr
    assert not (tmp_path / "time_Result" / "test_perform_static.txt").exists()


def test_every_flag_of_the_readme_app_command_is_an_option_of_the_app(io_check):
    from tests.test_readme import readme_commands

    commands = [c for c in readme_commands() if c.startswith("ascend310_infer/out/main ")]
    assert commands
    usage = subprocess.run([io_check, "--help"], capture_output=True, text=True, timeout=30).stderr
    for command in commands:
        for flag, value in re.findall(r"--(\w+)=(\S+)", command):
            assert f"--{flag}=" in usage, flag
            if flag == "device_type":
                assert value in usage, value
            if flag == "precision_mode":
                assert value in usage, value


# ----------------------------------------------------------------------------- the MINDIR header reader

@pytest.fixture(scope="module")
def header_check(tmp_path_factory):
    if GXX is None:
        pytest.skip("g++ is not installed (Debian package g++)")
    binary = str(tmp_path_factory.mktemp("mindir_header_check") / "mindir_header_check")
    result = subprocess.run([GXX, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-I", APP_DIR,
                             os.path.join(ROOT, "tests", "deploy", "cpp", "mindir_header_check.cc"),
                             os.path.join(APP_DIR, "src", "mindir_header.cc"), "-o", binary],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return binary


@pytest.fixture(scope="module")
def nano_mindir(tmp_path_factory, nano_ckpt):
    from deploy_helpers import export_nano

    return export_nano(tmp_path_factory.mktemp("mindir"), nano_ckpt)


def test_the_header_reader_reads_what_mindspores_own_protobuf_reads(header_check, nano_mindir):
    """MindSpore's mind_ir_pb2 (the real ModelProto) is the reference for the three fields the app reads."""
    import mindspore
    from mindspore.train import mind_ir_pb2

    model = mind_ir_pb2.ModelProto()
    with open(nano_mindir, "rb") as f:
        model.ParseFromString(f.read())
    result = subprocess.run([header_check, nano_mindir, "MindSpore Lite 2.0.0"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    producer, version, ir_version, problem = result.stdout.split("\n")[:4]
    assert (producer, version, int(ir_version)) == (model.producer_name, model.model_version, model.mind_ir_version)
    assert (version, int(ir_version)) == (mindspore.__version__, 3)
    assert problem.startswith(f"{nano_mindir} is a MINDIR of mind_ir_version 3 exported by MindSpore "
                              f"{mindspore.__version__}, newer than this runtime (MindSpore Lite 2.0.0)")
    for runtime in (mindspore.__version__, "MindSpore Lite 2.11.0", "of unknown version"):  # can read, or cannot tell
        same = subprocess.run([header_check, nano_mindir, runtime], capture_output=True, text=True, timeout=60)
        assert same.stdout.split("\n")[3] == "", runtime


def test_a_file_that_is_not_a_mindir_is_one_error_line(header_check, nano_mindir, tmp_path):
    with open(nano_mindir, "rb") as f:
        data = f.read()
    cases = {"truncated.mindir": (data[:len(data) // 2], "runs past the end of the file"),
             "text.mindir": (b"not a model\n", "is not a MINDIR"),
             "empty.mindir": (b"", "no producer_name or model_version")}
    for name, (content, message) in cases.items():
        (tmp_path / name).write_bytes(content)
        result = subprocess.run([header_check, str(tmp_path / name), "2.0.0"], capture_output=True, text=True,
                                timeout=60)
        assert result.returncode == 2, name
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: {tmp_path / name} is not a MINDIR"), result.stderr
        assert message in lines[0], (name, lines[0])
