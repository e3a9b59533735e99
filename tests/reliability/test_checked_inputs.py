"""Case 12, inputs train.py used to accept silently or answer with a traceback (issue 24): non-finite
--pretrained weights, val_split equal to train_split, a key given twice in one YAML (each one `error:` line,
exit 2, nothing written), and a metrics.csv whose last line a kill cut (recovered, and said). The YAML loader is
tested in tests/test_config.py, the metrics log in tests/run/test_callbacks.py; here train.py runs for real."""
import os
import shutil

import numpy as np
import pytest

from reliability_helpers import CONFIG, TINY, entry, mindspore_imported, read_metrics, read_text, succeeded, user_error


@pytest.mark.timeout(600)
def test_non_finite_pretrained_weights_are_refused_naming_the_tensors(tiny_digits, tmp_path):
    """Provokes: --pretrained a dm_nfnet_nano checkpoint with NaN and inf in two tensors (they used to load
    without a word)."""
    import mindspore as ms

    from src.models import create_model

    network = create_model("dm_nfnet_nano", num_classes=10)
    params = dict(network.parameters_and_names())
    for name in ("stem.conv1.weight", "head.fc.bias"):
        values = params[name].asnumpy()
        values.flat[:3] = [np.nan, np.inf, np.nan]
        params[name].set_data(ms.Tensor(values))
    pretrained = tmp_path / "nan.ckpt"
    ms.save_checkpoint(network, str(pretrained))
    run = tmp_path / "run"
    result = entry("train.py", "--data_path", tiny_digits, "--output_dir", run, "--pretrained", pretrained, *TINY)
    assert user_error(result) == (f"error: {pretrained}: 2 tensor(s) hold non-finite values: stem.conv1.weight (2 "
                                  "NaN, 1 inf), head.fc.bias (2 NaN, 1 inf); not usable as pretrained weights")
    assert not run.exists()


def test_a_validation_split_that_is_the_training_split_is_refused(tiny_digits, tmp_path):
    """Provokes: --val_split ./train with train_split train and evaluation during training on (the best
    checkpoint would have been chosen on training images)."""
    result = entry("train.py", "--data_path", tiny_digits, "--output_dir", tmp_path / "run", *TINY,
                   "--eval_while_train", "true", "--val_split", "./train", probe_imports=True)
    assert user_error(result) == ("error: val_split ./train is the training split (train_split train): the best "
                                  "checkpoint would be chosen on training images; set val_split to a held-out split "
                                  "or eval_while_train false")
    assert not mindspore_imported(result) and not (tmp_path / "run").exists()


def test_a_key_given_twice_in_one_yaml_is_refused_naming_the_lines(tmp_path):
    """Provokes: the digits config with batch_size appended twice (YAML lets the last one win)."""
    config = tmp_path / "edited.yaml"
    shutil.copy(CONFIG, config)
    lines = len(read_text(config).splitlines())
    first = next(n for n, line in enumerate(read_text(config).splitlines(), 1) if line.startswith("batch_size:"))
    with open(config, "a", encoding="utf-8") as f:
        f.write("batch_size: 16\nbatch_size: 4\n")
    result = entry("train.py", "--output_dir", tmp_path / "run", config=config, probe_imports=True)
    assert user_error(result) == (f"error: {config}: key batch_size is given 3 times (lines {first}, {lines + 1}, "
                                  f"{lines + 2}); keep one")
    assert not mindspore_imported(result) and not (tmp_path / "run").exists()


@pytest.mark.timeout(900)
def test_resume_with_a_metrics_log_cut_by_a_kill_drops_the_cut_row_and_says_so(uninterrupted_run, tiny_digits,
                                                                               tmp_path):
    """Provokes: --resume auto --epochs 3 of a copy of a finished 2-epoch run whose metrics.csv lost the end of its
    last row (it used to end in a ValueError traceback). One step is trained (--max_steps 15)."""
    run = tmp_path / "run"
    shutil.copytree(uninterrupted_run, run)
    metrics = run / "metrics.csv"
    text = metrics.read_bytes()
    cut = len(text) - text.rindex(b"\n", 0, len(text) - 1) - 1 - 5  # the last row but its last 5 bytes
    os.truncate(metrics, len(text) - 5)
    result = succeeded(entry("train.py", "--data_path", tiny_digits, "--output_dir", run, *TINY, "--epochs", "3",
                             "--resume", "auto", "--max_steps", "15"))
    said = (f"{metrics}: its last line was cut by a killed run ({cut} bytes of an unfinished row): dropped that row, "
            "appending after the complete ones")
    assert said in result.stdout and said in read_text(run / "train.log")
    # epoch 2's row was the cut one; epoch 3, stopped by --max_steps after 1 of its 7 steps, gets its row when
    # a resume completes it (metrics_log: one row per complete epoch)
    assert [row["epoch"] for row in read_metrics(run)] == ["1"]
    assert "dm_nfnet_nano-3_15.ckpt" in os.listdir(run)


def test_export_of_a_missing_checkpoint_stops_before_mindspore_is_imported(tmp_path):
    """Provokes: the README's export command before its checkpoint exists (it used to import MindSpore, 10 s on a
    busy CPU, and then say so). One line, exit 2, MindSpore not imported, nothing written."""
    missing = tmp_path / "output" / "dm_nfnet_f0_best.ckpt"
    result = entry("export.py", "--checkpoint", missing, "--file_format", "MINDIR", "--file_name", tmp_path / "f0",
                   probe_imports=True)
    assert user_error(result) == f"error: checkpoint not found: {missing}"
    assert not mindspore_imported(result) and os.listdir(tmp_path) == []
