"""Quiet runs: train.py, eval.py and export.py (MINDIR and ONNX) on the nano model raise no warning
from this repository's code, and MindSpore logs no deprecation about a call of ours. Run with
`-W default` so that DeprecationWarnings show (pytest.ini ignores them in-process)."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "src", "configs", "dm_nfnet_nano_digits.yaml")
PYTHON_WARNING = re.compile(r"^(?P<file>\S+?):\d+: (?P<kind>\w*Warning): (?P<text>.*)$", re.M)
MINDSPORE_WARNING = re.compile(r"^\[WARNING\] ME\(.*$", re.M)


def run(script, *args):
    env = dict(os.environ, PYTHONWARNINGS="default")
    result = subprocess.run([sys.executable, "-W", "default", script, "--config", CONFIG, *map(str, args)], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


def own_warnings(output):
    """Python warnings raised from a file of this repository, and MindSpore's logged deprecations."""
    ours = [m[0] for m in PYTHON_WARNING.finditer(output) if os.path.abspath(m["file"]).startswith(ROOT + os.sep)
            and os.sep + ".venv" + os.sep not in m["file"]]
    return ours + [line for line in MINDSPORE_WARNING.findall(output) if "deprecated" in line]


@pytest.mark.timeout(1200)
def test_train_eval_export_raise_no_warning_from_our_code(digits_subset, tmp_path):
    data = digits_subset(3, 1)
    out = tmp_path / "run"
    # drop_path_rate > 0: stochastic depth draws its masks (it used the deprecated UniformReal)
    train = run("train.py", "--data_path", data, "--output_dir", out, "--epochs", "1", "--warmup_length", "0",
                "--batch_size", "8", "--drop_path_rate", "0.2", "--num_parallel_workers", "1")
    assert own_warnings(train) == []
    assert not PYTHON_WARNING.search(train) and not MINDSPORE_WARNING.search(train), train[-3000:]  # console
    # MindSpore's logged warnings go to train.log: none of them a deprecation our calls cause
    assert not re.search(r"mindspore warning: .*deprecated", (out / "train.log").read_text())
    best = out / "dm_nfnet_nano_best.ckpt"
    outputs = {"eval": run("eval.py", "--data_path", data, "--checkpoint", best, "--output", tmp_path / "m.json")}
    for fmt in ("MINDIR", "ONNX"):
        outputs[fmt] = run("export.py", "--checkpoint", best, "--file_format", fmt, "--file_name",
                           tmp_path / "nano", "--device_target", "CPU")
    for name, output in outputs.items():
        assert own_warnings(output) == [], (name, output[-3000:])
        assert not MINDSPORE_WARNING.search(output), (name, output[-3000:])


def test_mindspore_warnings_go_to_the_log_not_the_console(tmp_path):
    """A warning MindSpore logs and one raised inside its package reach the run log only; ours stay."""
    script = tmp_path / "probe.py"
    script.write_text(
        "import sys, warnings\n"
        f"sys.path.insert(0, {ROOT!r})\n"
        "from src.run.framework_warnings import divert_framework_warnings\n"
        "from src.run.logger import RunLogger\n"
        f"log = RunLogger({str(tmp_path / 'train.log')!r})\n"
        "divert_framework_warnings(log.to_file)\n"
        "import mindspore\n"
        "mindspore.log.warning('a warning of MindSpore')\n"
        "from mindspore.train import serialization\n"
        "serialization._wait_async_thread_save_ckpt()  # MindSpore 2.10: Thread.getName() is deprecated\n"
        "warnings.warn('a warning of ours', UserWarning)\n"
        "log.close()\n")
    result = subprocess.run([sys.executable, "-W", "default", str(script)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert "a warning of MindSpore" not in result.stderr and "getName" not in result.stderr
    assert "a warning of ours" in result.stderr
    log = (tmp_path / "train.log").read_text()
    assert "mindspore warning: a warning of MindSpore" in log
    assert "DeprecationWarning: getName() is deprecated" in log
