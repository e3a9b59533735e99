"""Commands work on the machine they run on: a device_target this MindSpore installation lacks
stops in one line naming the fix, num_parallel_workers above the cores is lowered with a notice,
and the README's F0 commands run on this CPU with the overrides the README shows."""
import os
import re
import shlex
import subprocess
import sys

import pytest

from src.run.context import available_cores, device_available
from test_readme import readme_commands

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_command(prefix):
    """The one README command starting with `prefix`, as an argument list run by this interpreter."""
    found = [c for c in readme_commands() if c.startswith(prefix)]
    assert len(found) == 1, (prefix, found)
    args = shlex.split(found[0])
    assert args[0] == "python"
    return [sys.executable, *args[1:]]


def run(args, timeout=900):
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def test_readme_f0_train_command_stops_on_cpu_naming_device_target():
    if device_available("Ascend"):
        pytest.skip("this MindSpore installation has the Ascend backend")
    result = run(readme_command("python train.py --config src/configs/dm_nfnet_f0.yaml --data_path "
                                "/data/imagenet --device_id 0"), timeout=120)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: device_target Ascend is not available")
    assert "--device_target CPU" in lines[0]


def test_a_device_without_backend_stops_eval_before_reading_data(tmp_path):
    if device_available("GPU"):
        pytest.skip("this MindSpore installation has the GPU backend")
    checkpoint = tmp_path / "w.ckpt"
    checkpoint.write_bytes(b"not read")
    result = run([sys.executable, "eval.py", "--config", "src/configs/dm_nfnet_nano_digits.yaml", "--device_target",
                  "GPU", "--checkpoint", str(checkpoint), "--data_path", str(tmp_path / "missing")], timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith("error: device_target GPU is not available"), result.stderr


@pytest.mark.timeout(1500)
def test_readme_f0_cpu_commands_train_and_evaluate(digits_subset, tmp_path):
    """The README's F0 train command for a CPU machine, then its eval command with --device_target CPU,
    on 10 digits images per split: the config's 16 workers are lowered to the cores with a notice.
    Added to keep it short: the class count, 1 epoch and 64-pixel images."""
    data = digits_subset(1, 1)
    out = tmp_path / "f0"
    short = ["--num_classes", "10", "--epochs", "1", "--warmup_length", "0", "--input_size", "64",
             "--test_input_size", "64", "--output_dir", str(out)]
    train = readme_command("python train.py --config src/configs/dm_nfnet_f0.yaml --data_path /data/imagenet "
                           "--device_target CPU")
    train = [data if a == "/data/imagenet" else a for a in train]
    result = run(train + short)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    cores = available_cores()
    if cores < 16:
        assert f"num_parallel_workers 16 lowered to {cores}, the cores of this machine" in result.stdout
    assert "Traceback" not in result.stderr
    best = out / "dm_nfnet_f0_best.ckpt"
    assert best.is_file()

    evaluate = readme_command("python eval.py --config src/configs/dm_nfnet_f0.yaml")
    evaluate = [data if a == "/data/imagenet" else str(best) if a.endswith("_best.ckpt") else a for a in evaluate]
    result = run(evaluate + ["--device_target", "CPU", "--num_classes", "10", "--test_input_size", "64",
                             "--output", str(tmp_path / "eval.json")])
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert re.search(r"top1 [\d.]+, top5 [\d.]+, loss [\d.]+ on 10 images", result.stdout), result.stdout


@pytest.mark.timeout(600)
@pytest.mark.parametrize("script", ["eval.py", "predict.py"])
def test_inference_without_device_target_runs_on_what_this_mindspore_has(script, tmp_path):
    """The F0 config's device_target is Ascend; eval.py and predict.py without --device_target fall back to
    this installation's device with a notice (a checkpoint trained elsewhere is no reason to refuse), and go on
    to their next check (eval: the missing dataset; predict: the checkpoint, which is not one); train.py keeps
    refusing (the test above)."""
    if device_available("Ascend"):
        pytest.skip("this MindSpore installation has the Ascend backend")
    checkpoint = tmp_path / "w.ckpt"
    checkpoint.write_bytes(b"not read")
    missing = str(tmp_path / "missing")
    if script == "eval.py":
        args, culprit = ["--data_path", missing], missing
    else:
        from PIL import Image

        Image.new("RGB", (8, 8)).save(tmp_path / "a.png")
        args, culprit = [str(tmp_path / "a.png")], str(checkpoint)
    result = run([sys.executable, script, "--config", "src/configs/dm_nfnet_f0.yaml", "--checkpoint",
                  str(checkpoint), *args], timeout=580)
    assert result.returncode == 2, result.stdout + result.stderr
    fallback = "device_target Ascend is not available in this MindSpore installation; running on CPU"
    assert fallback in result.stdout + result.stderr
    assert "is not available in this MindSpore installation (" not in result.stderr  # not the refusal
    assert "lowered to" not in result.stdout + result.stderr  # the defaults' 16 workers fit the cores silently
    assert culprit in result.stderr.strip().splitlines()[-1], result.stderr


@pytest.mark.timeout(300)
def test_a_python_without_mindspore_gets_one_line_naming_the_venv(digits_subset, tmp_path):
    """Provokes: train.py run by a Python that has no MindSpore (the README's commands outside .venv). A
    `mindspore` package that raises as a missing one does stands for it, first on the path."""
    fake = tmp_path / "site" / "mindspore"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'mindspore'\", name='mindspore')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path / "site"))
    result = subprocess.run([sys.executable, "train.py", "--config", "src/configs/dm_nfnet_nano_digits.yaml",
                             "--data_path", digits_subset(1, 1), "--output_dir", str(tmp_path / "out")], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=280)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"error: mindspore is not installed for {sys.executable}: run the command inside the project's venv")
