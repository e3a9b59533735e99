"""The C++ app (ascend310_infer/) against a real MindSpore Lite runtime on CPU: `make test-lite`.

Real reference: PyPI's mindspore-lite 2.0.0, the only MindSpore Lite a package registry carries (a
CPython 3.7 x86_64 wheel): its C++ runtime (mindspore_lite/lib/libmindspore-extendrt_python.so, with
include/api) and its converter (the Python API, mindspore_lite.Converter). The route it can run is
export.py --file_format ONNX -> Lite's converter -> Lite MINDIR -> scripts/run_infer_310.sh
--device_type=CPU (build.sh against the wheel, the app, postprocess.py). Checked on a random-weight
dm_nfnet_nano over 20 images:
- top-1 / top-5 counts equal eval.py's on the same checkpoint;
- logits agree with the MindSpore route (run_infer_cpu.sh on export.py's MINDIR) within 1e-4, ten
  times the 9.3e-6 measured (logits up to 3.5);
- the app starts with no LD_LIBRARY_PATH (its RPATH covers the runtime's own libraries);
- the MindSpore 2.10 MINDIR, which Lite 2.0.0 cannot read (mind_ir_version 3 > 1), stops the app before
  building with one `error:` line naming both versions and the ONNX route, exit 2, and
  run_infer_310.sh shows that line; a file Lite cannot build is one `error:` line too, never an abort.
Not proved here: an Ascend device, a MindSpore Lite 2.10 package (no registry has one).

The wheel (169 MB) and a Python 3.7 venv holding it (+ numpy, 16 MB) are made once (benchmarks/lite_venv.py) in
$NFNET_LITE_CACHE (default ~/.cache/nfnet-mindspore/lite). Without Python 3.7 or without PyPI the tests
skip with one line saying what is missing; in CI (CI=1) that line stops the run with exit status 2, as
tests/conftest.py does for a missing tool.
"""
import json
import os
import sys

import numpy as np
import pytest

from benchmarks.lite_venv import LITE_VERSION, make_venv, run
from deploy_helpers import NUM_CLASSES, ROOT, export_nano, make_network, run_eval_py
from src.deploy.binio import read_labels, read_tensor

pytestmark = [pytest.mark.lite, pytest.mark.timeout(900)]

LOGIT_TOLERANCE = 1e-4  # 10x the largest |Lite - MindSpore| logit difference measured (9.3e-6)


def missing(reason):
    """Skip for `reason`; in CI, stop the run with it (one line, as tests/conftest.py's missing tools)."""
    if os.environ.get("CI"):
        pytest.exit(f"error: CI is set but make test-lite cannot run here: {reason}", returncode=2)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def lite_python():
    """The interpreter of a Python 3.7 venv holding PyPI's mindspore-lite wheel (made once: benchmarks/lite_venv.py)."""
    python, reason = make_venv()
    if python is None:
        missing(reason)
    return python


@pytest.fixture(scope="module")
def exports(tmp_path_factory, nano_ckpt):
    """export.py's MINDIR and ONNX of the random-weight checkpoint (batch 1, as the scripts preprocess)."""
    directory = tmp_path_factory.mktemp("exports")
    return {"MINDIR": export_nano(directory, nano_ckpt), "ONNX": export_nano(directory, nano_ckpt, "--file_format",
                                                                              "ONNX")}


@pytest.fixture(scope="module")
def lite_mindir(lite_python, exports):
    """The ONNX export through MindSpore Lite's converter (what converter_lite --fmk=ONNX writes)."""
    output = exports["ONNX"][:-len(".onnx")] + "_lite"
    code = ("import sys, mindspore_lite as mslite\n"
            "mslite.Converter().convert(fmk_type=mslite.FmkType.ONNX, model_file=sys.argv[1], output_file=sys.argv[2])")
    result = run([lite_python, "-c", code, exports["ONNX"], output])
    assert result.returncode == 0 and "CONVERT RESULT SUCCESS:0" in result.stdout, result.stdout + result.stderr
    return output + ".mindir"


def run_script(script, model, work, image_folder, extra_env=None, *options):
    """scripts/<script> [options] <model> digits <image_folder> from `work`, without LD_LIBRARY_PATH."""
    work.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LITE_HOME", "MINDSPORE_PATH")}
    env.update(PYTHON=sys.executable, **(extra_env or {}))
    return run(["bash", os.path.join(ROOT, "scripts", script), *options, model, "digits", image_folder], cwd=work,
               env=env, timeout=900)


@pytest.fixture(scope="module")
def lite_run(tmp_path_factory, lite_python, lite_mindir, image_folder):
    """run_infer_310.sh --device_type=CPU on the Lite MINDIR, building the app against the wheel."""
    work = tmp_path_factory.mktemp("lite")
    env = {"LITE_PYTHON": lite_python, "BUILD_DIR": str(work / "build")}
    result = run_script("run_infer_310.sh", lite_mindir, work, image_folder, env, "--device_type=CPU")
    assert result.returncode == 0, result.stdout + result.stderr
    return work


@pytest.fixture(scope="module")
def mindspore_run(tmp_path_factory, exports, image_folder):
    """The MindSpore route: run_infer_cpu.sh on export.py's MINDIR (same preprocess.py files, same scoring)."""
    work = tmp_path_factory.mktemp("mindspore")
    result = run_script("run_infer_cpu.sh", exports["MINDIR"], work, image_folder)
    assert result.returncode == 0, result.stdout + result.stderr
    return work


def read_logits(work):
    labels = read_labels(str(work / "preprocess_Result" / "labels.json"))
    return {name: read_tensor(str(work / "result_Files" / f"{name}_0.bin"), (1, NUM_CLASSES)) for name in labels}


def test_build_sh_finds_the_wheel_and_builds_without_a_warning(lite_run):
    log = (lite_run / "build.log").read_text()
    assert "MindSpore C++ API: MindSpore Lite Python wheel at " in log
    assert f"MindSpore (Lite) version: {LITE_VERSION}" in log
    assert "warning" not in log.lower(), log
    dynamic = run(["readelf", "-d", str(lite_run / "build" / "main")]).stdout
    assert "(RPATH)" in dynamic and "mindspore_lite/lib" in dynamic  # DT_RPATH: libdnnl.so.2 found without env


def test_the_app_on_lite_counts_what_eval_py_counts(lite_run, nano_ckpt, image_folder, tmp_path):
    with open(lite_run / "acc.json", encoding="utf-8") as f:
        report = json.load(f)
    evaluated = run_eval_py(tmp_path, nano_ckpt, image_folder)
    assert report["count"] == evaluated["count"] == 20
    for key in ("correct_top1", "correct_top5", "top1", "top5"):
        assert report[key] == evaluated[key], key
    infer_log = (lite_run / "infer.log").read_text()
    assert f"MINDIR: MindSpore {LITE_VERSION}, mind_ir_version 1; runtime: MindSpore Lite {LITE_VERSION}" in infer_log


def test_the_app_on_lite_agrees_with_the_mindspore_route(lite_run, mindspore_run):
    lite, mindspore = read_logits(lite_run), read_logits(mindspore_run)
    assert sorted(lite) == sorted(mindspore) and len(lite) == 20
    difference = max(float(np.abs(lite[name] - mindspore[name]).max()) for name in lite)
    scale = max(float(np.abs(mindspore[name]).max()) for name in mindspore)
    print(f"max |Lite - MindSpore| logit difference: {difference:.3g} (logits up to {scale:.3g})")
    assert scale > 0.1  # the logits are not all near zero, so the bound means something
    assert difference <= LOGIT_TOLERANCE


def run_app(app, model, pre, work):
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    return run([str(app), f"--mindir_path={model}", f"--input_path={pre}", f"--result_path={work / 'result_Files'}",
                f"--time_path={work / 'time_Result'}", "--device_type=CPU", f"--num_classes={NUM_CLASSES}"], env=env,
               timeout=300)


def app_errors(result):
    assert "terminate" not in result.stderr and "Aborted" not in result.stderr, result.stderr
    return [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("error:")]


def test_a_mindspore_2_10_mindir_is_named_with_the_lite_it_needs(lite_run, exports, tmp_path):
    result = run_app(lite_run / "build" / "main", exports["MINDIR"], lite_run / "preprocess_Result" / "images",
                     tmp_path)
    assert result.returncode == 2
    errors = app_errors(result)
    import mindspore

    assert errors == [
        f"error: {exports['MINDIR']} is a MINDIR of mind_ir_version 3 exported by MindSpore {mindspore.__version__}, "
        f"newer than this runtime (MindSpore Lite {LITE_VERSION}), which cannot read it: run it on MindSpore Lite "
        f"{mindspore.__version__} or newer (MindSpore Lite reads the MINDIRs of its own release and older), or "
        "export ONNX (export.py --file_format ONNX) and convert it with this runtime's converter_lite "
        "(--fmk=ONNX --saveType=MINDIR; docs/deployment.md)"], result.stderr
    assert not (tmp_path / "result_Files").exists() or not os.listdir(tmp_path / "result_Files")


def test_run_infer_310_shows_the_apps_error_line(lite_run, exports, image_folder, tmp_path):
    result = run_script("run_infer_310.sh", exports["MINDIR"], tmp_path / "work", image_folder,
                        {"INFER_APP": str(lite_run / "build" / "main")}, "--device_type=CPU")
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 2, result.stderr
    assert errors[0].startswith(f"error: {exports['MINDIR']} is a MINDIR of mind_ir_version 3 exported by MindSpore ")
    assert errors[1] == f"error: inference failed, see {tmp_path / 'work' / 'infer.log'}"


def test_a_file_lite_cannot_build_is_one_error_line_not_an_abort(lite_run, exports, tmp_path):
    """The ONNX file given as a MINDIR: a protobuf the header check lets through, which Model::Build rejects."""
    result = run_app(lite_run / "build" / "main", exports["ONNX"], lite_run / "preprocess_Result" / "images", tmp_path)
    assert result.returncode == 2
    errors = app_errors(result)
    assert len(errors) == 1, result.stdout + result.stderr
    assert errors[0].startswith(f"error: building {exports['ONNX']} on CPU 0 failed: "), errors


def test_the_lite_cpu_route_gives_the_eval_networks_logits(lite_python, exports, nano_weights, tmp_path):
    """benchmarks/lite_cpu.py, the bench's lite_ours route: export.py's ONNX -> Lite 2.0.0's converter (fusion on,
    float32, batch fixed) -> Lite's CPU runtime on 2 threads, against the eval network on the same random images."""
    import mindspore as ms

    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64), dtype=np.float32)  # the digits config's 64 px
    np.save(tmp_path / "x_b1.npy", x)
    result = run([lite_python, os.path.join(ROOT, "benchmarks", "lite_cpu.py"), "--onnx", exports["ONNX"], "--inputs",
                  str(tmp_path), "--threads", "2", "--warmup", "0", "--steps", "1", "--json-out",
                  str(tmp_path / "lite.json")])
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads((tmp_path / "lite.json").read_text())["lite_version"] == LITE_VERSION
    expected = make_network("dm_nfnet_nano", nano_weights["raw"], NUM_CLASSES)(ms.Tensor(x)).asnumpy()
    lite = np.load(tmp_path / "logits_b1.npy")
    difference, scale = float(np.abs(lite - expected).max()), float(np.abs(expected).max())
    print(f"max |Lite CPU - eval network| logit difference: {difference:.3g} (logits up to {scale:.3g})")
    assert lite.shape == expected.shape == (1, NUM_CLASSES)
    assert scale > 0.1 and difference <= LOGIT_TOLERANCE
    assert not os.path.exists(tmp_path / "lite_b1.mindir")  # the converted model is removed after its run
