"""Case 1, kill -9 during training: at a seeded random step (printed), then inside a checkpoint write. `--resume auto`
continues from the last complete checkpoint, never a partial one, and the result follows the uninterrupted run (weights,
optimizer state, EMA, step counters within 1e-6 relative; the same lr); metrics.csv and train.log are appended to.
The atomic write itself (a writer killed mid-save) is tested in tests/run/test_checkpointing.py."""
import os
import subprocess

import pytest

from reliability_helpers import (PAUSE_IN_WRITE, TINY, assert_same_training_state, checkpoint_values, entry, fault_rng,
                                 kill9, read_metrics, read_text, start_entry, succeeded, wait_until)

FINAL = "dm_nfnet_nano-2_14.ckpt"  # 2 epochs of 7 steps


@pytest.fixture(scope="module")
def interrupted(tiny_digits, tmp_path_factory):
    """The same run as uninterrupted_run, killed twice and resumed with --resume auto each time:
    1. kill -9 at a random step of epoch 2 (its epoch-1 checkpoint is complete);
    2. the resumed run is killed -9 inside the write of its final checkpoint (the temporary file exists);
    3. resumed again, it runs to the end.
    Returns what each stage left behind."""
    out = tmp_path_factory.mktemp("interrupted") / "run"
    args = ["--data_path", tiny_digits, "--output_dir", out, *TINY]
    # step 1-2 of 7 leaves 5 steps (~0.05 s each with the fused update) before the final save: see test_preemption
    seen = {"step": fault_rng("kill -9").randint(1, 2)}

    first = start_entry("train.py", *args)
    line = f"epoch 2/2 step {seen['step']}/7 "
    wait_until(lambda: os.path.exists(out / "train.log") and line in read_text(out / "train.log"), first)
    kill9(first)
    seen["after_kill"] = sorted(os.listdir(out))
    seen["log"], seen["metrics"] = read_text(out / "train.log"), read_text(out / "metrics.csv")

    second = start_entry(PAUSE_IN_WRITE, *args, "--resume", "auto", env={"PAUSE_IN_WRITE_OF": FINAL[:-5]},
                         stdout=subprocess.PIPE)
    while not (said := second.stdout.readline()).startswith("writing ") and said:
        pass
    assert said.startswith("writing "), "the resumed run ended before its final checkpoint write"
    seen["partial"] = said.split(" ", 1)[1].strip()
    assert os.path.getsize(seen["partial"]) > 0  # MindSpore has written it; it is not renamed yet
    kill9(second)
    seen["after_write_kill"] = sorted(os.listdir(out))

    succeeded(entry("train.py", *args, "--resume", "auto"))
    seen["final"] = sorted(os.listdir(out))
    return out, seen


def test_resume_after_both_kills_follows_the_uninterrupted_run(interrupted, uninterrupted_run):
    """Provokes: the two kills of the `interrupted` fixture. The final checkpoint equals the uninterrupted run's."""
    out, seen = interrupted
    assert_same_training_state(checkpoint_values(uninterrupted_run / FINAL), checkpoint_values(out / FINAL))
    straight, resumed = read_metrics(uninterrupted_run), read_metrics(out)
    assert [r["epoch"] for r in resumed] == ["1", "2"], f"killed at epoch 2 step {seen['step']}"
    assert [r["lr"] for r in resumed] == [r["lr"] for r in straight]
    assert float(resumed[1]["train_loss"]) == pytest.approx(float(straight[1]["train_loss"]), rel=1e-5)


def test_a_checkpoint_killed_mid_write_is_never_picked(interrupted):
    """Provokes: kill -9 while the final checkpoint's temporary file exists. Only complete checkpoints are
    visible, --resume auto takes the epoch-1 checkpoint, and the leftover temporary file is removed."""
    out, seen = interrupted
    partial = os.path.basename(seen["partial"])
    assert partial.startswith(".dm_nfnet_nano-2_14.partial-") and partial in seen["after_write_kill"]
    assert [n for n in seen["after_write_kill"] if n.endswith(".ckpt") and not n.startswith(".")] == \
        ["dm_nfnet_nano-1_7.ckpt"]
    log = read_text(out / "train.log")
    assert log.count(f"resumed from {out / 'dm_nfnet_nano-1_7.ckpt'}: epoch 1, step 7") == 2
    assert [n for n in seen["final"] if n.endswith(".ckpt")] == ["dm_nfnet_nano-1_7.ckpt", FINAL]


def test_metrics_and_log_of_the_killed_sessions_are_kept_and_appended_to(interrupted):
    """Provokes: the same kills. What the first session wrote is still the beginning of train.log and of
    metrics.csv, and the last session appended its epoch."""
    out, seen = interrupted
    assert seen["after_kill"] == [".nfnet_run", "config.yaml", "dm_nfnet_nano-1_7.ckpt", "metrics.csv",
                                  "metrics_steps.csv", "train.log"]
    log = read_text(out / "train.log")
    assert log.startswith(seen["log"]) and f"epoch 2/2 step {seen['step']}/7 " in seen["log"]
    assert log.count("run directory ") == 3 and log.rstrip().endswith("steps skipped for non-finite values: 0")
    metrics = read_text(out / "metrics.csv")
    assert metrics.startswith(seen["metrics"]) and metrics.count("epoch,") == 1
