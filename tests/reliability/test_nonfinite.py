"""Case 6, non-finite losses, provoked for real: a run resumed from a good epoch-1 checkpoint with base_lr 1e30.
Its first step is finite and throws the weights out of range; every later loss is NaN. Each NaN step is skipped
(no update) and counted, the run stops after max_nonfinite_steps of them in a row with a message naming the last
good checkpoint, writes no checkpoint from the broken weights and exits 1. The guard's counting and the skipped
update are tested in tests/run/test_callbacks.py and tests/trainers/test_loss_scale.py."""
import hashlib
import math
import os
import re
import shutil

import numpy as np
import pytest

from reliability_helpers import TINY, checkpoint_values, entry, read_metrics, read_text

GOOD = "dm_nfnet_nano-1_7.ckpt"


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.mark.timeout(600)
def test_nan_losses_are_skipped_counted_and_stop_the_run_keeping_the_last_good_checkpoint(
        uninterrupted_run, tiny_digits, tmp_path):
    """Provokes: train.py --resume auto --base_lr 1e30 --max_nonfinite_steps 3 from a good checkpoint of epoch 1,
    with dynamic loss scaling."""
    out = tmp_path / "run"
    out.mkdir()
    shutil.copy(uninterrupted_run / GOOD, out / GOOD)
    result = entry("train.py", "--data_path", tiny_digits, "--output_dir", out, *TINY, "--resume", "auto",
                   "--base_lr", "1e30", "--max_nonfinite_steps", "3", "--is_dynamic_loss_scale", "true")
    assert result.returncode == 1, result.stderr[-3000:]
    log = read_text(out / "train.log")
    for count, step in ((1, 9), (2, 10)):
        assert f"warning: non-finite loss nan at epoch 2 step {step} ({count}/3 in a row)" in log
    stop = (f"stopping: 3 consecutive non-finite losses (last nan at epoch 2 step 11); the last good checkpoint is "
            f"{out / GOOD} (continue with --resume auto); lower the lr, raise clipping or use loss scaling")
    assert stop in log and stop in result.stdout
    assert "epoch 2: training diverged, no checkpoint written" in log
    assert "steps skipped for non-finite values: 3" in log

    assert sorted(n for n in os.listdir(out) if n.endswith(".ckpt")) == [GOOD]
    assert digest(out / GOOD) == digest(uninterrupted_run / GOOD)  # untouched
    assert all(np.isfinite(v).all() for v in checkpoint_values(out / GOOD).values() if v.dtype.kind == "f")
    from src.run.checkpointing import find_latest_checkpoint

    assert find_latest_checkpoint(str(out)) == str(out / GOOD)  # what --resume auto continues from
    # the one finite step is the uninterrupted run's first step of epoch 2 (same state, same batch)
    first = re.search(r"epoch 2/2 step 1/7 loss (\S+) ", read_text(uninterrupted_run / "train.log"))[1]
    assert f"epoch 2/2 step 1/7 loss {first} lr 1.5625e+28 " in log
    (row,) = read_metrics(out)
    assert row["epoch"] == "2" and math.isclose(float(row["train_loss"]), float(first), abs_tol=1e-4)
