"""Case 10, preemption and resume in every state. SIGTERM (what Slurm, Kubernetes and ModelArts send before
killing a job) at a seeded step of epoch 2: the step finishes, a mid-epoch checkpoint with the exact data position
is written and named in the log, the exit status is 143; --resume auto then ends equal to the uninterrupted run
(1e-6). A first Ctrl-C does the same with 130, a second one ends the process at once. Resuming a finished run
changes nothing and exits 0; a resume that would change the step count or the schedule is refused in one line;
a longer --epochs is logged as a changed schedule."""
import os
import shutil
import signal

import pytest

from reliability_helpers import (PAUSE_IN_WRITE, TINY, assert_same_training_state, checkpoint_values, entry,
                                 fault_rng, read_text, snapshot, start_entry, start_logged, succeeded, user_error,
                                 wait_until)

FINAL = "dm_nfnet_nano-2_14.ckpt"  # 2 epochs of 7 steps


def logged(out, text, proc, since=0):
    """Wait until train.log in `out` holds `text` (past its first `since` characters) while `proc` runs."""
    wait_until(lambda: os.path.exists(out / "train.log") and text in read_text(out / "train.log")[since:], proc)


def stop_at(out, proc, step, signum, since=0):
    """Send `signum` once the log shows epoch 2 step `step`; the step the run stopped after (step or later)."""
    logged(out, f"epoch 2/2 step {step}/7 ", proc, since)
    proc.send_signal(signum)
    proc.communicate(timeout=600)
    return int(read_text(out / "train.log")[since:].split("after epoch 2 step ")[1].split("/")[0])


@pytest.fixture(scope="module")
def preempted(tiny_digits, tmp_path_factory):
    """TINY stopped by SIGTERM at a seeded step of epoch 2, then resumed with --resume auto."""
    out = tmp_path_factory.mktemp("preempted") / "run"
    args = ["--data_path", tiny_digits, "--output_dir", out, *TINY]
    # steps 1-2 of 7: the fused update made a nano step ~0.05 s, and a signal sent at step 5's log line
    # once reached the run after its last step (measured in a fresh-clone run); 5 steps leave the margin
    step = fault_rng("SIGTERM").randint(1, 2)
    first = start_entry("train.py", *args)
    stopped = stop_at(out, first, step, signal.SIGTERM)
    seen = {"step": stopped, "status": first.returncode, "after_stop": sorted(os.listdir(out)),
            "log": read_text(out / "train.log")}
    seen["resumed"] = succeeded(entry("train.py", *args, "--resume", "auto"))
    return out, args, seen


def test_sigterm_finishes_the_step_writes_a_mid_epoch_checkpoint_and_exits_143(preempted):
    """Provokes: SIGTERM at a seeded step of epoch 2."""
    out, _, seen = preempted
    step = seen["step"]
    mid = f"dm_nfnet_nano-2_{7 + step}.ckpt"
    assert seen["status"] == 143
    assert (f"stopped by SIGTERM after epoch 2 step {step}/7: saved {out / mid}; continue with --resume auto "
            "(exit status 143)") in seen["log"]
    assert [n for n in seen["after_stop"] if n.endswith(".ckpt")] == ["dm_nfnet_nano-1_7.ckpt", mid]
    from src.run.checkpointing import read_checkpoint_meta

    meta = read_checkpoint_meta(str(out / mid))
    assert (meta["epoch_num"], meta["epoch_step"], meta["step_num"]) == (1, step, 7 + step)


def test_resume_after_sigterm_ends_equal_to_the_uninterrupted_run(preempted, uninterrupted_run):
    """Provokes: --resume auto after the SIGTERM. It runs only the rest of epoch 2 (steps step+1..7)."""
    out, _, seen = preempted
    step = seen["step"]
    log = read_text(out / "train.log")
    assert (f"resumed from {out / f'dm_nfnet_nano-2_{7 + step}.ckpt'}: epoch 1 + {step} step(s) of epoch 2, "
            f"step {7 + step}") in log
    resumed_steps = [line for line in log[len(seen["log"]):].splitlines() if " epoch 2/2 step " in line]
    assert [line.split(" step ")[1].split(" ")[0] for line in resumed_steps] == \
        [f"{s}/7" for s in range(step + 1, 8)]
    assert_same_training_state(checkpoint_values(uninterrupted_run / FINAL), checkpoint_values(out / FINAL))


def test_resuming_a_finished_run_says_so_and_changes_nothing(preempted):
    """Provokes: --resume auto again after the run reached its last epoch (a scheduler's requeue)."""
    out, args, _ = preempted
    before = snapshot(out)
    result = succeeded(entry("train.py", *args, "--resume", "auto"))
    assert (f"nothing to do: the run is finished, {out / FINAL} holds epoch 2 of 2 (raise --epochs to train "
            "further)") in result.stdout
    assert snapshot(out) == before


@pytest.mark.parametrize("flag, value, message", [
    ("--epochs", "1", "epochs 1 is below the 2 epoch(s) {ckpt} has reached (set --epochs 2 or more)"),
    ("--batch_size", "4", "batch_size is 4 but 8 in {ckpt}; the step count and the lr schedule depend on it: "
                          "resume with batch_size 8, or start a new run in another output_dir"),
    ("--accumulation_step", "7", "accumulation_step is 7 but 1 in {ckpt}; the step count"),
])
def test_a_resume_that_changes_the_schedule_is_refused_in_one_line(preempted, flag, value, message):
    """Provokes: --resume auto of the finished run with fewer epochs, another batch size, another accumulation."""
    out, args, _ = preempted
    before = snapshot(out)
    line = user_error(entry("train.py", *args, "--resume", "auto", flag, value))
    assert line.startswith("error: cannot resume: " + message.format(ckpt=out / FINAL))
    assert snapshot(out) == before


@pytest.mark.timeout(600)
def test_more_epochs_continue_the_finished_run_with_a_logged_schedule_change(preempted, tmp_path):
    """Provokes: --resume auto --epochs 3 on a copy of the finished run."""
    out, args, _ = preempted
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    succeeded(entry("train.py", *args, "--output_dir", copy, "--resume", "auto", "--epochs", "3"))
    log = read_text(copy / "train.log")
    assert ("schedule changed: epochs 2 -> 3; the lr schedule is rebuilt for 3 epochs and continues at step 14"
            in log)
    assert "epoch 3/3 step 7/7 " in log and (copy / "dm_nfnet_nano-3_21.ckpt").exists()


@pytest.mark.timeout(600)
def test_first_ctrl_c_checkpoints_and_a_second_one_stops_at_once(tiny_digits, tmp_path):
    """Provokes: Ctrl-C (SIGINT) at a seeded step, then a second one while the mid-epoch checkpoint is being
    written (held there by pause_in_checkpoint_write.py). The process ends at once, leaving only the epoch-1
    checkpoint visible; a Ctrl-C alone (second run) stops with the checkpoint. MindSpore passes a
    SIGINT during training on as SIGTERM (src/run/preemption.py): either name and status (130 / 143) is accepted."""
    out = tmp_path / "run"
    args = ["--data_path", tiny_digits, "--output_dir", out, *TINY]
    step = fault_rng("SIGINT").randint(1, 2)  # margin: see preempted()
    proc = start_logged(PAUSE_IN_WRITE, *args, env={"PAUSE_IN_WRITE_OF": "dm_nfnet_nano-2_"})
    logged(out, f"epoch 2/2 step {step}/7 ", proc)
    proc.send_signal(signal.SIGINT)
    while not (said := proc.stdout.readline()).startswith("writing ") and said:
        pass
    assert said.startswith("writing "), "the run ended before writing its mid-epoch checkpoint"
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)  # held in the write for an hour otherwise
    assert proc.returncode in (-signal.SIGINT, 130, 143), proc.returncode
    assert [n for n in os.listdir(out) if n.endswith(".ckpt") and not n.startswith(".")] == ["dm_nfnet_nano-1_7.ckpt"]

    since = len(read_text(out / "train.log"))
    once = start_entry("train.py", *args, "--resume", "auto")
    stopped = stop_at(out, once, 2, signal.SIGINT, since)
    assert once.returncode in (130, 143)
    name = {130: "SIGINT", 143: "SIGTERM"}[once.returncode]
    assert f"stopped by {name} after epoch 2 step {stopped}/7: saved {out / f'dm_nfnet_nano-2_{7 + stopped}.ckpt'}" \
        in read_text(out / "train.log")
