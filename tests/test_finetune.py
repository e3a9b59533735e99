"""Fine-tuning, told: --max_steps, what train.log says about the pretrained weights, the README's F0 example.

Real processes on the tiny digits copy (tests/conftest.py); the resume check uses the reliability tests'
small deterministic run (TINY) and tolerance. The F0 example converts a timm
F0 (random weights: nothing is downloaded), fine-tunes it to the 10 digit classes at 64x64
for 3 steps on CPU and evaluates it with no config: the checkpoint carries the rest.
"""
import json
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "reliability"))
from reliability_helpers import TINY, assert_same_training_state, checkpoint_values  # noqa: E402
NANO = os.path.join(ROOT, "src", "configs", "dm_nfnet_nano_digits.yaml")
F0 = os.path.join(ROOT, "src", "configs", "dm_nfnet_f0.yaml")


def run(*args, timeout=900):
    result = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def read_log(run_dir):
    with open(os.path.join(run_dir, "train.log"), encoding="utf-8") as f:
        return f.read()


@pytest.mark.timeout(1200)
def test_max_steps_stops_mid_epoch_and_resume_auto_ends_as_the_uninterrupted_run(tiny_digits, tmp_path):
    """--max_steps 3 of 2 epochs x 7 steps: the mid-epoch checkpoint of a SIGTERM (epoch 1, 3 steps into
    it), exit 0; --resume auto runs steps 4-7 of epoch 1, then epoch 2, and ends with the uninterrupted
    run's training state (tests/reliability's tolerance, 1e-6). metrics.csv records epoch 1 once, its loss
    (the straight run's, 1e-5) and images (56) over all 7 steps; the cut run draws its 3 steps."""
    from src.data.data_settings import read_checkpoint_settings
    from src.run.checkpointing import read_checkpoint_meta
    from src.run.metrics_log import STEP_COLUMNS, read_metrics

    straight, out = str(tmp_path / "straight"), str(tmp_path / "run")
    args = ["train.py", "--config", NANO, "--device_target", "CPU", "--data_path", tiny_digits, *TINY]
    run(*args, "--output_dir", straight)
    run(*args, "--output_dir", out, "--max_steps", "3")
    first = os.path.join(out, "dm_nfnet_nano-1_3.ckpt")
    assert sorted(f for f in os.listdir(out) if f.endswith(".ckpt")) == ["dm_nfnet_nano-1_3.ckpt"]
    meta = read_checkpoint_meta(first)
    assert (meta["epoch_num"], meta["epoch_step"], meta["step_num"]) == (0, 3, 3)
    stopped = read_log(out)
    assert (f"stopped at --max_steps 3 after epoch 1 step 3/7: saved {first}; continue with --resume auto "
            "(and a larger --max_steps, or none)") in stopped
    assert "eval epoch" not in stopped and "saved" not in stopped.split("stopped at")[0]  # the cut epoch: no more
    record = read_checkpoint_settings(first)
    assert record["classes"] == [str(d) for d in range(10)] and record["test_input_size"] == 64

    again = run(*args, "--output_dir", out, "--max_steps", "3", "--resume", "auto")  # the limit is reached already
    assert "nothing to do: the run is at step 3 already, --max_steps 3" in again.stdout
    assert sorted(f for f in os.listdir(out) if f.endswith(".ckpt")) == ["dm_nfnet_nano-1_3.ckpt"]

    # the cut epoch has no metrics.csv row yet; its 3 steps are in metrics_steps.csv and drawn
    assert not os.path.exists(os.path.join(out, "metrics.csv"))
    assert [r["step"] for r in read_metrics(os.path.join(out, "metrics_steps.csv"), STEP_COLUMNS)] == [1, 2, 3]
    with open(os.path.join(out, "curves.png"), "rb") as f:
        assert f.read(4) == b"\x89PNG"
    assert "could not draw" not in stopped

    run(*args, "--output_dir", out, "--resume", "auto")
    log = read_log(out)[len(stopped):]
    assert f"resumed from {first}: epoch 0 + 3 step(s) of epoch 1, step 3" in log
    steps = re.findall(r"epoch (\d)/2 step (\d)/7 ", log)
    assert steps == [("1", str(s)) for s in range(4, 8)] + [("2", str(s)) for s in range(1, 8)]
    final = "dm_nfnet_nano-2_14.ckpt"
    assert_same_training_state(checkpoint_values(os.path.join(straight, final)),
                               checkpoint_values(os.path.join(out, final)))
    # issue 27: the resumed epoch once in metrics.csv, its loss and images over all 7 steps, as the straight run's
    expected, resumed = (read_metrics(os.path.join(d, "metrics.csv")) for d in (straight, out))
    with open(os.path.join(out, "metrics.csv"), encoding="utf-8") as f:
        assert [line.split(",")[0] for line in f.read().splitlines()] == ["epoch", "1", "2"]
    assert [r["images"] for r in resumed] == [r["images"] for r in expected] == [56, 56]
    assert [r["train_loss"] for r in resumed] == pytest.approx([r["train_loss"] for r in expected], rel=1e-5)
    assert [r["lr"] for r in resumed] == pytest.approx([r["lr"] for r in expected], rel=1e-6)
    average = re.search(r"epoch 1/2 average loss (\S+) over 7 steps", log)
    assert average and float(average.group(1)) == pytest.approx(resumed[0]["train_loss"], abs=1e-4)
    assert [r["step"] for r in read_metrics(os.path.join(out, "metrics_steps.csv"), STEP_COLUMNS)] == \
        list(range(1, 15))


def test_max_steps_below_one_is_a_one_line_error(tmp_path):
    result = subprocess.run([sys.executable, "train.py", "--config", NANO, "--max_steps", "0", "--output_dir",
                             str(tmp_path / "run")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip() == "error: command line: --max_steps must be >= 1, got 0"
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_fine_tuning_a_converted_timm_f0_to_ten_classes_then_evaluating_it(tiny_digits, tmp_path):
    """The README's fine-tune example, as written there (paths aside)."""
    timm = pytest.importorskip("timm")
    from safetensors.torch import save_file

    model = timm.create_model("dm_nfnet_f0", pretrained=False)  # stands in for timm's dm_nfnet_f0.dm_in1k
    weights = str(tmp_path / "model.safetensors")
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, weights)
    ckpt = str(tmp_path / "dm_nfnet_f0.ckpt")
    result = run("-m", "tools.convert_weights", weights, ckpt)
    assert "resize 284x284, center crop 256, bicubic" in result.stdout

    out = str(tmp_path / "f0_digits")
    run("train.py", "--config", F0, "--device_target", "CPU", "--pretrained", ckpt, "--finetune", "true",
        "--num_classes", "10", "--data_path", tiny_digits, "--input_size", "64", "--test_input_size", "64",
        "--eval_crop_mode", "pixels", "--crop_pct", "0", "--amp_level", "O0", "--batch_size", "8",
        "--num_parallel_workers", "2", "--epochs", "1", "--warmup_length", "0", "--max_steps", "3",
        "--log_interval", "1", "--eval_while_train", "false", "--output_dir", out, timeout=1500)
    log = read_log(out)
    assert f"pretrained weights: loaded 231 of the network's 233 tensors from {ckpt}" in log
    assert ("re-initialized 2 tensors (finetune): the checkpoint's classifier has 1000 classes, this run 10: "
            "head.fc.bias (1000,) -> (10,), head.fc.weight (1000, 3072) -> (10, 3072)") in log
    assert len(re.findall(r"epoch 1/1 step \d/7 loss [\d.]+", log)) == 3
    tuned = os.path.join(out, "dm_nfnet_f0-1_3.ckpt")

    result = run("eval.py", "--checkpoint", tuned, "--data_path", os.path.join(tiny_digits, "val"),
                 "--device_target", "CPU", "--eval_batch_size", "32", "--output", str(tmp_path / "eval.json"))
    assert "resize 64x64, center crop 64, bicubic" in result.stdout
    with open(tmp_path / "eval.json") as f:
        metrics = json.load(f)
    assert metrics["arch"] == "dm_nfnet_f0" and metrics["count"] == 30 and metrics["weights"] == "ema"
    assert 0.0 <= metrics["top1"] <= 1.0 and metrics["loss"] > 0
