"""ModelArts copies through moxing (src/run/modelarts.py), with a stand-in moxing module.

moxing ships only in ModelArts images. The in-process tests put a recording module into
sys.modules; the end-to-end tests put a stand-in package on the PYTHONPATH of real train.py
and eval.py processes, which maps obs://<path> to $FAKE_OBS/<path> and copies with shutil.
"""
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import types

import pytest

from src.errors import UserError
from src.run.modelarts import modelarts_io

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "src", "configs", "dm_nfnet_nano_digits.yaml")
FAKE_MOXING_FILE = '''"""Stand-in for moxing.file (tests/run/test_modelarts.py): obs://<path> is $FAKE_OBS/<path>."""
import os
import shutil


def _local(url):
    return os.path.join(os.environ["FAKE_OBS"], url[len("obs://"):]) if url.startswith("obs://") else url


def copy_parallel(src_url, dst_url):
    shutil.copytree(_local(src_url), _local(dst_url), dirs_exist_ok=True)


def copy(src_url, dst_url):
    os.makedirs(os.path.dirname(_local(dst_url)), exist_ok=True)
    shutil.copy2(_local(src_url), _local(dst_url))
'''
MISSING = ("error: enable_modelarts is set but the 'moxing' package is not installed (it ships with ModelArts "
           "images): run on ModelArts or set enable_modelarts false")


def test_missing_moxing_is_one_line_naming_the_package_and_the_setting(tmp_path):
    if importlib.util.find_spec("moxing") is not None:
        pytest.skip("moxing is installed here")
    with pytest.raises(UserError) as err:
        with modelarts_io(True, "obs://bucket/data", "obs://bucket/out", str(tmp_path)):
            pass
    assert f"error: {err.value}" == MISSING


def test_disabled_imports_and_copies_nothing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "moxing", None)  # importing it would raise
    with modelarts_io(False, "obs://bucket/data", "obs://bucket/out", str(tmp_path)) as local:
        assert local is None


def test_both_urls_are_required(tmp_path):
    with pytest.raises(UserError, match="enable_modelarts needs data_url .* and train_url"):
        with modelarts_io(True, "obs://b/data", None, str(tmp_path)):
            pass


def _fake_moxing(monkeypatch):
    calls = []
    fake = types.ModuleType("moxing")
    fake.file = types.SimpleNamespace(copy_parallel=lambda src, dst: calls.append((src, dst)),
                                      copy=lambda src, dst: calls.append(("file", src, dst)))
    monkeypatch.setitem(sys.modules, "moxing", fake)
    return calls


def test_data_is_copied_in_and_results_out_also_after_an_error(tmp_path, monkeypatch):
    calls = _fake_moxing(monkeypatch)
    local, out = str(tmp_path / "cache"), str(tmp_path / "run")
    os.makedirs(out)
    with pytest.raises(RuntimeError):
        with modelarts_io(True, "obs://b/data", "obs://b/out", out, local_dir=local) as data:
            assert data == local and calls == [("obs://b/data", local)]
            raise RuntimeError("training failed")
    assert calls == [("obs://b/data", local), (out, "obs://b/out")]


def test_a_results_file_goes_into_train_url_and_a_missing_one_is_skipped(tmp_path, monkeypatch):
    calls = _fake_moxing(monkeypatch)
    metrics = tmp_path / "metrics.json"
    with modelarts_io(True, "obs://b/data", "obs://b/out/", str(metrics), local_dir=str(tmp_path / "cache")):
        pass  # failed before writing it: nothing to send
    metrics.write_text("{}")
    with modelarts_io(True, "obs://b/data", "obs://b/out/", str(metrics), local_dir=str(tmp_path / "cache")):
        pass
    assert calls[-1] == ("file", str(metrics), "obs://b/out/metrics.json") and len(calls) == 3


def test_other_processes_wait_for_the_copier_and_only_rank_0_copies_out(tmp_path, monkeypatch):
    calls = _fake_moxing(monkeypatch)
    local = str(tmp_path / "cache")
    monkeypatch.chdir(tmp_path)
    os.makedirs("run")
    with pytest.raises(UserError, match="was not copied to"):
        with modelarts_io(True, "obs://b/data", "obs://b/out", "run", local_dir=local, is_copier=False,
                          timeout=0):
            pass
    with modelarts_io(True, "obs://b/data", "obs://b/out", "run", local_dir=local):
        pass
    with modelarts_io(True, "obs://b/data", "obs://b/out", "run", local_dir=local, is_copier=False,
                      is_main=False) as data:
        assert data == local
    assert calls == [("obs://b/data", local), ("run", "obs://b/out")]


# --------------------------------------------------------------------------- train.py and eval.py

@pytest.fixture()
def obs(tmp_path, digits_subset):
    """(environment with the stand-in moxing on PYTHONPATH, fake OBS root holding bucket/digits)."""
    package = tmp_path / "fake_moxing" / "moxing"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from . import file  # noqa: F401\n")
    (package / "file.py").write_text(FAKE_MOXING_FILE)
    root = tmp_path / "obs"
    shutil.copytree(digits_subset(2, 1), root / "bucket" / "digits")  # 20 training, 10 validation images
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(package.parent), ROOT]), FAKE_OBS=str(root))
    return env, root


def assert_same_tree(copy, original, allow_empty=False):
    """Same relative file names and the same bytes in each file."""
    def files(root):
        return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, names in os.walk(root) for f in names)

    assert os.path.isdir(copy) and files(copy) == files(original) and (allow_empty or files(original))
    for name in files(original):
        with open(os.path.join(copy, name), "rb") as a, open(os.path.join(original, name), "rb") as b:
            assert a.read() == b.read(), name


def run(script, *args, env=None, timeout=600):
    return subprocess.run([sys.executable, script, "--config", CONFIG, *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


MODELARTS = ["--enable_modelarts", "true", "--data_url", "obs://bucket/digits"]
TINY = ["--epochs", "1", "--batch_size", "8", "--warmup_length", "0", "--num_parallel_workers", "1",
        "--device_target", "CPU"]


@pytest.mark.timeout(900)
def test_train_and_eval_copy_the_data_in_and_their_results_out(obs, tmp_path):
    env, root = obs
    local, out = tmp_path / "cache" / "data", tmp_path / "run"
    result = run("train.py", *MODELARTS, "--data_path", local, "--train_url", "obs://bucket/train_out",
                 "--output_dir", out, *TINY, env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert sorted(os.listdir(local / "train")) == [str(d) for d in range(10)]  # trained on the local copy
    uploaded = root / "bucket" / "train_out"
    assert {"config.yaml", "train.log", "metrics.csv", "dm_nfnet_nano-1_2.ckpt"} <= set(os.listdir(uploaded))
    assert_same_tree(uploaded, out)

    local_eval = tmp_path / "cache_eval" / "data"
    result = run("eval.py", *MODELARTS, "--data_path", local_eval, "--train_url", "obs://bucket/eval_out",
                 "--checkpoint", out / "dm_nfnet_nano-1_2.ckpt", "--output", tmp_path / "metrics.json",
                 "--batch_size", "8", "--num_parallel_workers", "1", "--device_target", "CPU", env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    sent = (root / "bucket" / "eval_out" / "metrics.json").read_text()
    assert sent == (tmp_path / "metrics.json").read_text()
    metrics = json.loads(sent)
    assert metrics["count"] == 10 and metrics["data"] == str(local_eval / "val")


@pytest.mark.timeout(600)
def test_a_run_that_fails_after_the_copy_still_sends_its_run_directory(obs, tmp_path):
    """A setting refused on the local copy (num_classes 5 of 10 folders) stops before the run directory is
    prepared: nothing written, nothing sent. One refused later (2 batches per epoch, accumulation_step 4) has
    its run directory (marker, config.yaml, train.log) sent."""
    env, root = obs
    local = tmp_path / "cache" / "data"
    args = [*MODELARTS, "--train_url", "obs://bucket/out", "--data_path", local, "--output_dir", tmp_path / "run",
            *TINY]
    for extra, written in ((["--num_classes", "5"], False), (["--accumulation_step", "4"], True)):
        result = run("train.py", *args, *extra, env=env)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
        line = result.stderr.strip().splitlines()[-1]
        assert line.startswith("error: ") and str(local) in line  # checked after the copy, on the local copy
        assert (tmp_path / "run").exists() == written and (root / "bucket" / "out").exists() == written
    assert "train.log" in os.listdir(tmp_path / "run")
    assert_same_tree(root / "bucket" / "out", tmp_path / "run")


@pytest.mark.skipif(importlib.util.find_spec("moxing") is not None, reason="moxing is installed here")
@pytest.mark.parametrize("script", ["train.py", "eval.py"])
def test_without_moxing_the_scripts_stop_with_one_line_and_exit_2(script, tmp_path):
    checkpoint = tmp_path / "any.ckpt"
    checkpoint.write_bytes(b"not read before the error")
    extra = ["--checkpoint", checkpoint] if script == "eval.py" else []
    result = run(script, *MODELARTS, "--train_url", "obs://bucket/out", "--data_path", tmp_path / "absent",
                 *extra, timeout=120)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [MISSING]
