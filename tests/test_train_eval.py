"""train.py and eval.py end to end on a tiny digits subset: real processes, real files.

Interruption and resume (kill -9, --resume auto): tests/reliability/test_interruption.py.
"""
import csv
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "src", "configs", "dm_nfnet_nano_digits.yaml")
# deterministic and small: no dropout/stochastic depth (their random streams restart on resume),
# one worker, batch 8 of 60 training images
TINY = ["--batch_size", "8", "--epochs", "2", "--warmup_length", "0", "--drop_rate", "0", "--drop_path_rate", "0",
        "--num_parallel_workers", "1", "--log_interval", "5", "--base_lr", "1.6", "--seed", "3"]


def run(script, *args, timeout=600):
    result = subprocess.run([sys.executable, script, "--config", CONFIG, *args], cwd=ROOT, capture_output=True,
                            text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result


def read_metrics(output_dir):
    with open(os.path.join(output_dir, "metrics.csv"), newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.timeout(900)
def test_two_epochs_lower_the_loss_and_eval_reports_the_logged_accuracy(tiny_digits, tmp_path):
    out = str(tmp_path / "run")
    run("train.py", "--data_path", tiny_digits, "--output_dir", out, *TINY)
    rows = read_metrics(out)
    assert [int(r["epoch"]) for r in rows] == [1, 2]
    assert float(rows[1]["train_loss"]) < float(rows[0]["train_loss"])
    for name in ("config.yaml", "train.log", "curves.png", "dm_nfnet_nano_best.ckpt"):
        assert os.path.getsize(os.path.join(out, name)) > 0, name
    best = max(rows, key=lambda r: float(r["top1"]))
    result = run("eval.py", "--data_path", tiny_digits, "--checkpoint", os.path.join(out, "dm_nfnet_nano_best.ckpt"),
                 "--output", str(tmp_path / "eval.json"))
    with open(tmp_path / "eval.json") as f:
        metrics = json.load(f)
    assert metrics["count"] == 30 and metrics["weights"] == "ema"
    assert metrics["top1"] == pytest.approx(float(best["top1"]), abs=1e-9)
    assert metrics["loss"] == pytest.approx(float(best["val_loss"]), rel=1e-6)
    assert "on 30 images" in result.stdout


@pytest.mark.timeout(600)
def test_strict_data_stops_eval_with_one_line_naming_the_unreadable_file(tiny_digits, tmp_path):
    import mindspore as ms

    from src.models import create_model

    data = tmp_path / "data"
    shutil.copytree(tiny_digits, data)
    bad = data / "val" / "3" / "broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    ckpt = str(tmp_path / "nano.ckpt")
    ms.save_checkpoint(create_model("dm_nfnet_nano", num_classes=10), ckpt)
    result = subprocess.run([sys.executable, "eval.py", "--config", CONFIG, "--data_path", str(data),
                             "--checkpoint", ckpt, "--strict_data", "true", "--num_parallel_workers", "1"],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(bad) in errors[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr
