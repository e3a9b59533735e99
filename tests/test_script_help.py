"""Scripts explain themselves: -h/--help on every scripts/run_*.sh prints what it does, its arguments
and its environment and exits 0 without creating anything; a wrong argument prints what the script
does (the first sentence of --help) and its usage line, exit 1; the standalone launchers stream the run
to the console as well as to the log; the entry points' --help lists only the options they use."""
import glob
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "scripts", "run_*.sh")))


def bash(script, *args, cwd, env=None, timeout=600):
    full_env = dict(os.environ, PYTHON=sys.executable)
    full_env.pop("RUN_DIR", None)
    full_env.update(env or {})
    return subprocess.run(["bash", os.path.join(ROOT, "scripts", script), *map(str, args)], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_explains_the_script_and_creates_nothing(script, flag, tmp_path):
    for args in ([flag], ["some/path", flag]):  # also after an argument: never read as a path
        result = bash(script, *args, cwd=tmp_path, timeout=30)
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""
        text = result.stdout
        assert f"bash scripts/{script}" in text  # the usage line
        assert len(text.splitlines()) >= 4 and not text.startswith("#"), text
        assert os.listdir(tmp_path) == [], os.listdir(tmp_path)
    if "train" in script or "eval" in script:
        assert "RUN_DIR" in text and "PYTHON" in text  # the environment


def first_sentence(help_text):
    """What a script does: the first sentence of its --help text (up to ': ' or '. '), on one line."""
    paragraph = " ".join(line.strip() for line in help_text.split("\n\n")[0].splitlines())
    return re.split(r"[:.](?: |$)", paragraph, maxsplit=1)[0]


# arguments each script refuses (run_demo.sh takes one optional argument; the others need more than none)
WRONG_ARGS = {"run_demo.sh": ["out1", "out2"]}


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_wrong_argument_prints_what_the_script_does_then_its_usage(script, tmp_path):
    purpose = first_sentence(bash(script, "--help", cwd=tmp_path, timeout=30).stdout)
    result = bash(script, *WRONG_ARGS.get(script, []), cwd=tmp_path, timeout=30)
    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert lines[0] == purpose and len(purpose.split()) >= 4, result.stderr
    assert lines[1].startswith(f"Usage: bash {os.path.join(ROOT, 'scripts', script)} ["), result.stderr
    assert lines[1].endswith("(--help for more)")
    assert os.listdir(tmp_path) == []


def test_run_demo_help_does_not_train():
    result = bash("run_demo.sh", "--help", cwd=ROOT, timeout=30)
    assert result.returncode == 0 and "TRAIN_ARGS" in result.stdout
    assert not os.path.exists(os.path.join(ROOT, "--help"))


@pytest.mark.timeout(600)
def test_standalone_cpu_launcher_streams_the_run_to_the_console_and_the_log(tiny_digits, tmp_path):
    config = os.path.join(ROOT, "src", "configs", "dm_nfnet_nano_digits.yaml")
    result = bash("run_standalone_train_cpu.sh", config, "--data_path", tiny_digits, "--epochs", "1",
                  "--warmup_length", "0", "--batch_size", "8", "--num_parallel_workers", "1",
                  "--eval_while_train", "false", cwd=tmp_path, env={"RUN_DIR": str(tmp_path / "run")})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    log = (tmp_path / "run" / "logs" / "train.log").read_text()
    assert "training finished in" in log
    assert "training finished in" in result.stdout
    assert re.search(r"epoch 1/1 average loss", result.stdout)


# entry point -> (options its --help must list, options it must not list)
ENTRY_HELP = {
    "train.py": (["--base_lr", "--mix_up", "--resume", "--data_path", "--device_target", "--max_steps"],
                 ["--file_format", "--export_batch_size", "--checkpoint "]),
    "eval.py": (["--checkpoint", "--data_path", "--val_split", "--test_input_size", "--use_ema", "--device_target"],
                ["--base_lr", "--mix_up", "--auto_augment", "--file_format", "--resume", "--epochs"]),
    "export.py": (["--checkpoint", "--file_format", "--test_input_size", "--device_target", "--use_ema"],
                  ["--base_lr", "--mix_up", "--data_path", "--epochs", "--strict_data"]),
    "preprocess.py": (["--output_path", "--data_path", "--test_input_size", "--crop_pct"],
                      ["--base_lr", "--mix_up", "--epochs", "--device_target", "--use_ema"]),
    "postprocess.py": (["--result_path", "--label_path"], ["--base_lr", "--data_path"]),
    "predict.py": (["--checkpoint", "--model", "--topk", "--output", "--test_input_size", "--device_target"],
                   ["--base_lr", "--mix_up", "--data_path", "--epochs", "--file_format"]),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_HELP))
def test_entry_point_help_lists_only_the_options_it_uses(entry):
    result = subprocess.run([sys.executable, entry, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    shown, hidden = ENTRY_HELP[entry]
    for option in shown:
        assert option in result.stdout, (entry, option)
    for option in hidden:
        assert option not in result.stdout, (entry, option)


def test_hidden_options_are_still_accepted(tmp_path):
    """A launcher may pass a training key to eval.py: not listed in its --help, still not an error."""
    result = subprocess.run([sys.executable, "eval.py", "--config", "src/configs/dm_nfnet_nano_digits.yaml",
                             "--base_lr", "0.2", "--checkpoint", str(tmp_path / "missing.ckpt")], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.startswith("error: checkpoint not found"), result.stderr
