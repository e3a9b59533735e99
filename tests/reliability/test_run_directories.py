"""Case 11, run directories (issue 24): train.py writes and prunes only inside a directory it created (its
.nfnet_run marker) or a run's own directory it resumes, never inside data_path, and nothing at all before every
input was checked. Each mistake is one `error:` line, exit 2, with nothing of the user's changed; the directory
rules run before MindSpore is imported. src/run/run_dir.py's choices are tested in tests/run/test_checkpointing.py;
here train.py runs for real."""
import os
import shutil

import pytest

from reliability_helpers import TINY, entry, mindspore_imported, read_text, snapshot, succeeded, user_error

FIRST, LAST = "dm_nfnet_nano-1_7.ckpt", "dm_nfnet_nano-2_14.ckpt"


def tree(root):
    """relative path -> bytes of every file under root: to show that nothing was written or removed."""
    found = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, root)] = f.read()
    return found


def test_resume_auto_in_a_foreign_directory_without_checkpoints_is_refused(tiny_digits, tmp_path):
    """Provokes: --resume auto --output_dir D, D the user's own folder (no marker) holding their config.yaml and
    no checkpoint (it used to start from scratch there and replace the config.yaml)."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.yaml").write_text("my notes: keep\n")
    before = snapshot(mine)
    result = entry("train.py", "--data_path", tiny_digits, "--output_dir", mine, "--resume", "auto", *TINY,
                   probe_imports=True)
    assert user_error(result) == (f"error: --resume auto: output_dir {mine} was not created by train.py (no "
                                  ".nfnet_run marker) and holds no checkpoint to resume; nothing written: choose a "
                                  "new output_dir, or the run directory to continue")
    assert not mindspore_imported(result) and snapshot(mine) == before
    assert (mine / "config.yaml").read_text() == "my notes: keep\n"


@pytest.mark.timeout(900)
def test_resume_into_another_runs_directory_is_refused_and_its_checkpoints_kept(uninterrupted_run, tiny_digits,
                                                                                 tmp_path):
    """Provokes: --resume run_a/<epoch-1 checkpoint> --output_dir run_b, run_b a finished run of its own (a copy
    of run_a's directory: the same names, which the resumed run would replace and keep_checkpoint_max 1 would
    prune). Resuming run_b from its own checkpoint is accepted (here: the finished run, nothing to do)."""
    run_b = tmp_path / "run_b"
    shutil.copytree(uninterrupted_run, run_b)
    before = tree(run_b)
    args = ["--data_path", tiny_digits, "--output_dir", run_b, *TINY, "--keep_checkpoint_max", "1"]
    result = entry("train.py", *args, "--resume", uninterrupted_run / FIRST, probe_imports=True)
    assert user_error(result) == (
        f"error: --resume {uninterrupted_run / FIRST}: output_dir {run_b} holds another run's checkpoints "
        f"({FIRST}, {LAST}), which this run would replace and prune; nothing written: resume a run in its own "
        "directory (--output_dir the checkpoint's folder) or continue into a new output_dir")
    assert not mindspore_imported(result) and tree(run_b) == before

    result = succeeded(entry("train.py", *args, "--resume", run_b / LAST))
    assert f"nothing to do: the run is finished, {run_b / LAST} holds epoch 2 of 2" in result.stdout
    assert tree(run_b) == before


def test_an_output_dir_inside_data_path_is_refused(tiny_digits, tmp_path):
    """Provokes: --output_dir <data>/val/3 (it used to become an 11th class folder of the validation split)."""
    before = tree(tiny_digits)
    inside = os.path.join(tiny_digits, "val", "3")
    result = entry("train.py", "--data_path", tiny_digits, "--output_dir", inside, *TINY, probe_imports=True)
    assert user_error(result) == (f"error: output_dir {inside} is inside data_path {tiny_digits}: the run "
                                  "directory would become a folder of the dataset; choose an output_dir outside it")
    assert not mindspore_imported(result) and tree(tiny_digits) == before


@pytest.mark.timeout(900)
def test_a_refused_pretrained_checkpoint_writes_nothing_so_the_corrected_command_uses_the_directory(
        digits_subset, tmp_path):
    """Provokes: --pretrained with a 7-class head for a 10-class run (without --finetune), then the corrected
    command. The refusal comes before the run directory is prepared (it used to leave the marker, config.yaml and
    train.log, sending the corrected run to <dir>-1)."""
    import mindspore as ms

    from src.models import create_model

    pretrained = tmp_path / "nano7.ckpt"
    ms.save_checkpoint(create_model("dm_nfnet_nano", num_classes=7), str(pretrained))
    run = tmp_path / "run"
    args = ["--data_path", digits_subset(2, 1), "--output_dir", run, "--pretrained", pretrained, *TINY,
            "--max_steps", "1"]
    assert user_error(entry("train.py", *args)).startswith(f"error: {pretrained} does not fit the network: 2 "
                                                           "mis-shaped (head.fc.bias: checkpoint (7,) vs model (10,)")
    assert not run.exists()

    result = succeeded(entry("train.py", *args, "--finetune", "true"))
    assert "this run writes to" not in result.stdout and not os.path.exists(f"{run}-1")
    assert "re-initialized 2 tensors (finetune)" in read_text(run / "train.log")
    assert "dm_nfnet_nano-1_1.ckpt" in os.listdir(run)


@pytest.mark.timeout(900)
def test_train_log_holds_the_console_notices(tiny_digits, tmp_path):
    """Issue 27: the notices train.py prints before and while it prepares the run (workers lowered to the cores,
    the AMP fallback on CPU, the -1 directory it writes to, resuming in it) are in train.log too, each once. One
    train step (--max_steps 1), then a --resume auto that has nothing to do."""
    mine = tmp_path / "run"
    mine.mkdir()
    (mine / "notes.txt").write_text("not a run\n")
    cores = len(os.sched_getaffinity(0))
    result = succeeded(entry("train.py", "--data_path", tiny_digits, "--output_dir", mine, *TINY, "--max_steps", "1",
                             "--amp_level", "O2", "--num_parallel_workers", "64"))
    run = tmp_path / "run-1"
    notices = [f"num_parallel_workers 64 lowered to {cores}, the cores of this machine",
               "AMP: amp_level O2 is not used on CPU; training in float32 (O0).",
               f"output_dir {mine} is not empty: this run writes to {run} (--resume auto continues the old run, "
               "--overwrite_output reuses the directory)"]
    log = read_text(run / "train.log")
    for notice in notices:
        assert result.stdout.count(notice) == 1 and log.count(notice) == 1, notice
    again = succeeded(entry("train.py", "--data_path", tiny_digits, "--output_dir", run, *TINY, "--max_steps", "1",
                            "--resume", "auto"))
    resuming = f"output_dir {run} exists: resuming in it"
    log = read_text(run / "train.log")
    assert again.stdout.count(resuming) == 1 and log.count(resuming) == 1
    assert "nothing to do: the run is at step 1 already, --max_steps 1" in log
