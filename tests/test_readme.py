"""The README stays true: its Parameters tables are current, and every shell command it shows is
run by a test (named below, and the named file really runs it) or by `make demo`; the cheap ones
are run here."""
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
