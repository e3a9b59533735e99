"""The README stays true: its Parameters tables are current, and every shell command it shows is
run by a test (named below, and the named file really runs it) or by `make demo`; here each path a
command reads exists, is written by an earlier command or is a clear placeholder, and every command
(its CPU variant) gets past its arguments on the tiny digits copy (about 20 s: to_mindrecord converts
90 images; the rest stop at their first input check, before MindSpore is imported)."""
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")


def readme_commands(path=README):
    """The shell commands of the ```bash blocks: comments dropped, continuation lines joined."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = re.sub(r"(^|\s)#.*$", "", line).strip()
            if line:
                commands.append(" ".join(line.split()))
    return commands


# (pattern a README command must match, the file that runs it, a string proving that file does).
# A command with placeholders (/data/imagenet, an Ascend device) is run by the named test with a
# small dataset, the CPU or a stand-in, as that test says.
COVERAGE = [
    (r"make demo", "Makefile", "bash scripts/run_demo.sh"),
    (r"make test", ".ci/run", "make test"),
    (r"source \.venv/bin/activate", "Makefile", "-m venv $(VENV)"),  # the venv make creates
    (r"make bench", "tests/test_bench.py", "bench"),
    (r"python train\.py --config src/configs/dm_nfnet_f0\.yaml --data_path /data/imagenet --device_id 0",
     "tests/test_machine_fit.py", "test_readme_f0_train_command_stops_on_cpu_naming_device_target"),
    (r"python train\.py --config src/configs/dm_nfnet_f0\.yaml --data_path /data/imagenet --device_target CPU .*",
     "tests/test_machine_fit.py", "test_readme_f0_cpu_commands_train_and_evaluate"),
    (r"python train\.py .* --resume auto", "tests/reliability/test_interruption.py", '"auto"'),
    (r"python train\.py .* --enable_modelarts true .*", "tests/run/test_modelarts.py", "enable_modelarts"),
    (r"python eval\.py --config src/configs/dm_nfnet_f0\.yaml .*",
     "tests/test_machine_fit.py", "test_readme_f0_cpu_commands_train_and_evaluate"),
    (r"python export\.py .*", "tests/deploy/test_export.py", "export.py"),
    (r"python train\.py --config src/configs/dm_nfnet_f0\.yaml --device_target CPU --pretrained .*",
     "tests/test_finetune.py", "test_fine_tuning_a_converted_timm_f0_to_ten_classes_then_evaluating_it"),
    (r"python eval\.py --checkpoint .*", "tests/test_finetune.py", 'run("eval.py", "--checkpoint", tuned'),
    (r"python predict\.py .*", "tests/test_predict.py", '"predict.py"'),
    (r"python -m tools\.convert_weights .*", "tests/tools/test_convert_weights.py", "convert_weights"),
    (r"python -m src\.data\.to_mindrecord .*", "tests/data/test_mindrecord.py", "to_mindrecord"),
    (r"python preprocess\.py .*", "tests/deploy/test_preprocess.py", "preprocess"),
    (r"python postprocess\.py .*", "tests/deploy/test_postprocess.py", "postprocess"),
    (r"bash scripts/run_infer_310\.sh .*", "tests/deploy/test_scripts.py", "run_infer_310.sh"),
    (r"bash scripts/run_infer_cpu\.sh .*", "tests/deploy/test_cpu_inference.py", "run_infer_cpu.sh"),
    (r"bash scripts/run_infer_onnx\.sh .*", "tests/deploy/test_cpu_inference.py", "run_infer_onnx.sh"),
    (r"export LITE_HOME=.*", "tests/deploy/test_scripts.py", "LITE_HOME"),
    (r"bash ascend310_infer/build\.sh", "tests/deploy/test_scripts.py", "build.sh"),
    # the C++ application needs MindSpore's C++ package (not in the pip wheel): its flags are
    # those main.cc parses, checked here against the source
    (r"ascend310_infer/out/main .*", "ascend310_infer/src/utils.cc", "mindir_path"),
    (r"bash scripts/run_(standalone|distribute)_train_\w+\.sh .*", "tests/test_launch_scripts.py", "LAUNCHERS"),
    (r"bash scripts/run_eval_\w+\.sh .*", "tests/test_launch_scripts.py", "LAUNCHERS"),
]


def _covering(command):
    return [entry for entry in COVERAGE if re.fullmatch(entry[0], command)]


def test_readme_parameters_tables_are_current():
    result = subprocess.run([sys.executable, "-m", "tools.config_table", "--check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_parameters_table_lists_every_config_key():
    from src.config import SCHEMA
    from tools.config_table import compact_table, markdown_table

    for name in SCHEMA:
        assert f"`{name}`" in markdown_table() and f"`{name}`" in compact_table(), name


def test_readme_commands_are_found():
    commands = readme_commands()
    assert "make demo" in commands and "make test" in commands
    assert len(commands) >= 20, commands


@pytest.mark.parametrize("command", readme_commands())
def test_every_readme_command_is_run_by_a_named_test(command):
    found = _covering(command)
    assert len(found) == 1, f"README command covered by {len(found)} entries of COVERAGE: {command}"
    _, path, needle = found[0]
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        assert needle in f.read(), f"{path} does not contain {needle!r}, so it does not run: {command}"


def test_every_script_the_readme_runs_exists():
    for command in readme_commands():
        for path in re.findall(r"\b(?:scripts|ascend310_infer|src/configs)/[\w./-]+", command):
            if not path.endswith("/out/main"):  # built by build.sh
                assert os.path.exists(os.path.join(ROOT, path)), (path, command)


def test_readme_links_point_to_files():
    with open(README, encoding="utf-8") as f:
        text = f.read()
    for target in re.findall(r"\]\(((?:docs|src|tests)/[^)#]+)\)", text):
        assert os.path.exists(os.path.join(ROOT, target)), target


# ---------------------------------------------------------------- the README's commands, run (issue 27)
# What a user supplies: their data, a bucket, a rank table, their photos, a downloaded timm file, the Lite
# package. Every other path a command reads is in the repository or written by an earlier README command.
PLACEHOLDERS = re.compile(r"(/data/|/path/|/cache/|/opt/|obs://my-bucket/|photos/|list\.txt$|model\.safetensors$)")
OUTPUT_FLAGS = ("--output_dir", "--output", "--output_path", "--train_url", "--data_path /cache")
# what commands without an output flag write (make demo: scripts/run_demo.sh; the C++ app: utils.cc's default)
WRITES = {"make demo": ("outputs/demo/", "data/digits"), "bash ascend310_infer/build.sh": ("ascend310_infer/out/",),
          "ascend310_infer/out/main": ("result_Files",)}
PATH_TOKEN = re.compile(r"^[\w.:/-]*(/|\.(ckpt|mindir|onnx|json|yaml|safetensors|txt|csv))[\w.:/-]*$")


def _outputs(command):
    """The paths (prefixes) `command` writes: its output flags' values, export's --file_name (+ .mindir/.onnx),
    convert_weights' output, train.py's default output_dir (its config's), the WRITES of a program."""
    words = command.split()
    found = [words[i + 1] for i, word in enumerate(words[:-1]) if word in ("--output_dir", "--output",
                                                                             "--output_path")]
    if "export.py" in words and "--file_name" in words:
        name = words[words.index("--file_name") + 1]
        found += [f"{name}.mindir", f"{name}.onnx"]
    if "tools.convert_weights" in words:
        found.append(words[4])
    if "train.py" in words and "--output_dir" not in words and "--config" in words:
        from src.config import load_config

        found.append(load_config(os.path.join(ROOT, words[words.index("--config") + 1])).output_dir + "/")
    for program, written in WRITES.items():
        if command.startswith(program):
            found += written
    return found


def _inputs(command):
    """The path-like words of `command` that it reads (output flags' values and URLs of flags left out)."""
    words = command.split()
    skip = {i + 1 for i, word in enumerate(words) if word in ("--output_dir", "--output", "--output_path",
                                                             "--train_url", "--file_name")}
    if "tools.convert_weights" in words:
        skip.add(4)  # its output
    values = [word.split("=", 1)[1] if word.startswith("--") and "=" in word else word
              for i, word in enumerate(words) if i not in skip]
    return [v for v in values if not v.startswith("--") and PATH_TOKEN.match(v) and not re.fullmatch(r"[\d.]+", v)]


def test_every_path_a_readme_command_reads_exists_or_is_written_before_or_is_a_placeholder():
    """Static, over all commands in README order: each path read is in the repository, written by an earlier
    command (make demo's outputs/demo, an export's <file_name>.mindir, train.py's output_dir ...), or a clear
    placeholder (/data/..., obs://my-bucket/...); a `<...>` placeholder would be a shell redirection."""
    written = []
    for command in readme_commands():
        assert "<" not in command and ">" not in command, command
        for path in _inputs(command):
            known = os.path.exists(os.path.join(ROOT, path)) or PLACEHOLDERS.search(path) or \
                any(path.startswith(prefix) for prefix in written)
            assert known, f"{path} is not in the repository, not written by an earlier README command and not a " \
                          f"placeholder: {command}"
        written += _outputs(command)


# run elsewhere: make (the demo and the suite themselves), the venv, the environment, builds and the device app
# (tests/deploy/test_scripts.py), 8 msrun workers (tests/distributed runs 2), the GPU launcher (train.py's device
# check there imports MindSpore, 10 s: tests/test_launch_scripts.py)
NOT_RUN_HERE = re.compile(r"make |source |export |bash ascend310_infer/build\.sh|ascend310_infer/out/main|"
                          r"bash scripts/run_distribute_train_msrun\.sh|bash scripts/run_standalone_train_gpu\.sh")


def _runnable(command, tmp_path, data):
    """`command` as it runs here: the repository's files by absolute path, this Python, cwd tmp_path (what it
    writes lands there), the placeholders' data as the tiny digits (whose val split holds no MINDIR or
    checkpoint the command needs: it stops at its first input check)."""
    words = []
    for word in command.split():
        head, sep, value = word.partition("=") if word.startswith("--") else ("", "", word)
        if value == "python":
            value = sys.executable
        elif value.startswith(("scripts/", "src/configs/")) or value in ("train.py", "eval.py", "export.py",
                                                                          "predict.py", "preprocess.py",
                                                                          "postprocess.py"):
            value = os.path.join(ROOT, value)
        elif value.startswith("/data/imagenet_"):  # an output beside the data
            value = str(tmp_path / value[len("/data/"):])
        elif value.startswith(("/data/imagenet", "data/digits")):
            value = data + value.split("imagenet", 1)[1] if "imagenet" in value else data + value[len("data/digits"):]
        words.append(head + sep + value)
    if "train.py" in command.split() and "--device_target" not in command:  # its CPU variant
        words += ["--device_target", "CPU"]
    return words


@pytest.mark.timeout(600)
def test_every_readme_command_gets_past_its_arguments(tiny_digits, tmp_path):
    """Issue 27: each README command (their data replaced by the tiny digits copy, cwd an empty folder, so
    that the checkpoints, models and device they name are missing) runs (to_mindrecord converts the 90 images)
    or stops at its first input or device check with an `error:` line: no unknown option, no traceback.
    train.py runs as its CPU variant (--device_target CPU added when absent). Nothing trains: F0 and every other
    command end at their first check (under a second each, MindSpore not imported); the full runs are the named
    tests above (COVERAGE)."""
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHON=sys.executable, ASCEND_DEVICE_NODE=str(tmp_path / "no-device"))
    env.pop("RUN_DIR", None)
    checked = ran = 0
    for command in readme_commands():
        if NOT_RUN_HERE.match(command):
            continue
        cwd = tmp_path / f"c{checked}"
        cwd.mkdir()
        result = subprocess.run(_runnable(command, cwd, tiny_digits), cwd=cwd, env=env, capture_output=True,
                                text=True, timeout=300)
        said = result.stdout + result.stderr
        errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert result.returncode == 0 or errors, f"{command}\n{said[-2000:]}"
        assert "Traceback" not in said, f"{command}\n{said[-2000:]}"
        refused = ("unknown option", "unrecognized", "did you mean", "must be a", "invalid choice")
        assert not any(w in line for line in errors for w in refused), (command, errors)
        ran += result.returncode == 0
        checked += 1
    print(f"{checked} README commands: {ran} ran, {checked - ran} stopped at an input or device check")
    assert checked >= 20
