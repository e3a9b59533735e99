"""Case 5, checkpoint mistakes: a missing file, a file that is not a checkpoint, another arch's checkpoint, a
classifier of another class count (re-initialized only with --finetune) and a non-empty output directory (never
written over). The loaders are tested in tests/models/test_checkpoint_loading.py and
tests/run/test_checkpointing.py; here train.py and eval.py run for real."""
import os
import shutil

import numpy as np
import pytest

from reliability_helpers import TINY, entry, mindspore_imported, read_text, succeeded, user_error


@pytest.fixture(scope="module")
def nano10(tmp_path_factory):
    """A dm_nfnet_nano checkpoint with a 10-class head."""
    import mindspore as ms

    from src.models import create_model

    path = str(tmp_path_factory.mktemp("ckpt") / "nano10.ckpt")
    ms.save_checkpoint(create_model("dm_nfnet_nano", num_classes=10), path)
    return path


@pytest.mark.parametrize("script, flag", [("eval.py", "--checkpoint"), ("train.py", "--pretrained"),
                                          ("train.py", "--resume")])
def test_a_missing_checkpoint_is_named_before_anything_heavy(tiny_digits, tmp_path, script, flag):
    """Provokes: a checkpoint path that does not exist, given to each flag that takes one."""
    missing = tmp_path / "missing.ckpt"
    result = entry(script, "--data_path", tiny_digits, flag, missing, "--output_dir", tmp_path / "run",
                   probe_imports=True)
    given = "" if flag == "--checkpoint" else f" (given as {flag[2:]})"
    assert user_error(result) == f"error: checkpoint not found: {missing}{given}"
    assert not mindspore_imported(result) and not (tmp_path / "run").exists()


def test_files_that_are_not_checkpoints_are_named(tiny_digits, tmp_path):
    """Provokes: random bytes given to eval.py, a text file given to train.py --resume."""
    noise, text = tmp_path / "noise.ckpt", tmp_path / "notes.ckpt"
    noise.write_bytes(np.random.default_rng(0).bytes(4096))
    text.write_text("not a checkpoint\n")
    message = user_error(entry("eval.py", "--data_path", tiny_digits, "--checkpoint", noise))
    assert message.startswith(f"error: {noise} is not a readable MindSpore checkpoint (")
    message = user_error(entry("train.py", "--data_path", tiny_digits, "--resume", text, "--output_dir",
                               tmp_path / "run", *TINY))
    assert message.startswith(f"error: {text} is not a readable MindSpore checkpoint (")


def test_another_archs_checkpoint_lists_missing_and_misshaped_parameters(tiny_digits, nano10):
    """Provokes: eval.py of dm_nfnet_f0 given a dm_nfnet_nano checkpoint."""
    message = user_error(entry("eval.py", "--data_path", tiny_digits, "--checkpoint", nano10, "--arch", "dm_nfnet_f0"))
    assert message.startswith(f"error: {nano10} does not fit the network: 136 missing (stages.1.1.")
    assert "; 92 mis-shaped (final_conv.bias: checkpoint (512,) vs model (3072,), " in message


@pytest.mark.timeout(600)
def test_a_head_of_another_class_count_needs_finetune_and_a_used_output_dir_is_kept(digits_subset, nano10, tmp_path):
    """Provokes: train.py on 3 classes from a 10-class checkpoint, first without --finetune, then with it into an
    output_dir that already holds another run's files."""
    data = tmp_path / "three_classes"
    for split in ("train", "val"):
        for cls in ("0", "1", "2"):
            shutil.copytree(os.path.join(digits_subset(6, 3), split, cls), data / split / cls)
    args = ["--data_path", data, "--num_classes", "3", "--pretrained", nano10, *TINY, "--epochs", "1"]
    message = user_error(entry("train.py", *args, "--output_dir", tmp_path / "fresh"))
    assert message == (f"error: {nano10} does not fit the network: 2 mis-shaped (head.fc.bias: checkpoint (10,) vs "
                       "model (3,), head.fc.weight: checkpoint (10, 512) vs model (3, 512)); the classifier has "
                       "another class count: fine-tune with the head re-initialized (--finetune)")

    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("an earlier run's notes\n")
    shutil.copy(nano10, used / "dm_nfnet_nano-9_90.ckpt")
    result = succeeded(entry("train.py", *args, "--finetune", "true", "--output_dir", used))
    assert (f"output_dir {used} is not empty: this run writes to {used}-1 (--resume auto continues the old run, "
            "--overwrite_output reuses the directory)") in result.stdout
    assert sorted(os.listdir(used)) == ["dm_nfnet_nano-9_90.ckpt", "notes.txt"]
    assert (used / "notes.txt").read_text() == "an earlier run's notes\n"
    assert "dm_nfnet_nano-1_2.ckpt" in os.listdir(f"{used}-1")  # 18 images, batch 8: 2 steps
    assert "epoch 1/1 average loss " in read_text(f"{used}-1/train.log")
