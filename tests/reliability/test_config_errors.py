"""Case 4, config and command-line mistakes: one `error:` line naming the key and what is allowed, exit 2,
before MindSpore is imported. The loader's own checks are tested in tests/test_config.py; here the entry
points run as real processes under a probe that reports whether `mindspore` was imported."""
import pytest

from reliability_helpers import entry, mindspore_imported, user_error

MISTAKES = [
    (["--bad_key", "1"], "command line: unknown option --bad_key"),
    (["--lr", "0.1"], "command line: unknown option --lr (did you mean --base_lr or --warmup_lr or --min_lr?)"),
    (["--batch_size", "abc"], "command line: --batch_size: expected an integer, got 'abc' (str)"),
    (["--epochs", "2.5"], "command line: --epochs: expected an integer, got 2.5 (float)"),
    (["--base_lr", "-0.1"], "command line: --base_lr: must be > 0, got -0.1"),
    (["--batch_size", "0"], "command line: --batch_size: must be in [1, 65536], got 0"),
    (["--drop_rate", "1.0"], "command line: --drop_rate: must be in [0, 1), got 1.0"),
    (["--drop_path_rate", "-0.1"], "command line: --drop_path_rate: must be in [0, 1), got -0.1"),
    (["--arch", "nfnet_f9"], "command line: --arch: 'nfnet_f9' is not allowed; choose one of: dm_nfnet_f0, "
                             "dm_nfnet_f1, dm_nfnet_f2, dm_nfnet_f3, dm_nfnet_f4, dm_nfnet_f5, dm_nfnet_f6, dm_nfnet_nano"),
    (["--amp_level", "O4"], "command line: --amp_level: 'O4' is not allowed; choose one of: O0, O1, O2, O3"),
    (["--optimizer", "adam"], "command line: --optimizer: 'adam' is not allowed; choose one of: sgd_agc, momentum, "
                              "adamw"),
    (["--lr_scheduler", "cosine"], "command line: --lr_scheduler: 'cosine' is not allowed; choose one of: "
                                   "warmup_cosine, multistep, exponential, constant"),
]


@pytest.mark.parametrize("args, message", MISTAKES, ids=[" ".join(a) for a, _ in MISTAKES])
def test_train_py_names_the_key_and_the_allowed_values_before_importing_mindspore(args, message, tmp_path):
    """Provokes: each kind of command-line mistake given to train.py."""
    result = entry("train.py", *args, "--output_dir", tmp_path / "run", probe_imports=True)
    assert user_error(result) == f"error: {message}"
    assert not mindspore_imported(result)
    assert not (tmp_path / "run").exists()


def test_a_yaml_with_an_unknown_key_and_a_wrong_type_is_named_with_the_file(tmp_path):
    """Provokes: a config file with a misspelt key, then one with a value of the wrong type."""
    misspelt = tmp_path / "misspelt.yaml"
    misspelt.write_text("lr: 0.1\nbatch_size: 8\n")
    result = entry("train.py", config=misspelt, probe_imports=True)
    assert user_error(result) == (f"error: {misspelt}: unknown key 'lr' "
                                  "(did you mean 'base_lr' or 'warmup_lr' or 'min_lr'?)")
    assert not mindspore_imported(result)
    wrong_type = tmp_path / "wrong_type.yaml"
    wrong_type.write_text("batch_size: [8]\n")
    assert user_error(entry("train.py", config=wrong_type)) == \
        f"error: {wrong_type}: batch_size: expected an integer, got [8] (list)"


@pytest.mark.parametrize("script, args, message", [
    ("eval.py", ["--checkpoint", "any.ckpt", "--momentum", "1.5"], "--momentum: must be in [0, 1), got 1.5"),
    ("export.py", ["--checkpoint", "any.ckpt", "--file_format", "PNG"],
     "--file_format: 'PNG' is not allowed; choose one of: MINDIR, AIR, ONNX"),
    ("preprocess.py", ["--data_path", "x", "--output_path", "y", "--test_input_size", "9"],
     "--test_input_size: must be in [64, 4096], got 9"),
])
def test_the_other_entry_points_check_their_config_the_same_way(script, args, message):
    """Provokes: an out-of-range or unknown value given to eval.py, export.py and preprocess.py."""
    result = entry(script, *args, probe_imports=True)
    assert user_error(result) == f"error: command line: {message}"
    assert not mindspore_imported(result)
