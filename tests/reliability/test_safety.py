"""Case 9, safety: YAML is only read with yaml.safe_load, no user file is unpickled or evaluated, and the shell
scripts quote every expansion (a path with a space reaches train.py intact). Refusal of missing paths by every
script is tested in tests/test_launch_scripts.py and tests/deploy/test_scripts.py."""
import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

from reliability_helpers import CONFIG, ROOT

SCRIPTS = sorted(glob.glob(os.path.join(ROOT, "scripts", "*.sh"))) + [
    os.path.join(ROOT, "ascend310_infer", "build.sh"), os.path.join(ROOT, ".ci", "run")]


def python_sources():
    """(relative path, text) of every Python file of the project (sources, entry points, tests, benchmarks)."""
    skip = {".venv", ".git", "data", "outputs", "runs"}
    for directory, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in skip and not d.startswith(".")]
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                with open(path, encoding="utf-8") as f:
                    yield os.path.relpath(path, ROOT), f.read()


def offending_lines(pattern):
    regex = re.compile(pattern)
    return [f"{path}:{n}: {line.strip()}" for path, text in python_sources()
            for n, line in enumerate(text.splitlines(), 1) if regex.search(line)]


def test_yaml_is_only_read_with_safe_load():
    """Provokes nothing: reads every Python file for a YAML loader that can build arbitrary objects."""
    assert offending_lines(r"yaml\.(load|load_all|full_load|full_load_all|unsafe_load|unsafe_load_all)\(|"
                           r"Loader\s*=|yaml\.(Unsafe|Full)?Loader\b") == []
    assert len(offending_lines(r"yaml\.safe_load\(")) >= 2  # the config loader and its tests


def test_no_user_file_is_unpickled_or_evaluated():
    """Provokes nothing: reads every Python file for pickle-based loaders and eval/exec. `import pickle` is
    allowed where nothing is loaded with it (tests writing DeepMind-format fixtures) and in a module whose
    unpickling goes only through a pickle.Unpickler subclass restricting find_class (convert_weights' reader
    of DeepMind's release, which builds NumPy arrays and plain containers only; a pickle naming anything else
    is refused, tests/reliability/test_weight_files.py)."""
    restricted = {path for path, text in python_sources()
                  if not path.startswith("tests" + os.sep) and "(pickle.Unpickler)" in text and "def find_class" in text}
    imports = [line for line in offending_lines(r"^\s*(import|from)\s+(pickle|cPickle|dill|shelve|marshal|joblib)\b")
               if not (line.startswith("tests" + os.sep) or line.split(":", 1)[0] in restricted)]
    assert imports == []
    assert restricted <= {os.path.join("tools", "convert_weights.py")}, restricted
    assert offending_lines(r"\bpickle\.loads?\(|allow_pickle\s*=\s*True|(?<![\w.])(eval|exec)\(") == []
    torch_loads = offending_lines(r"torch\.load\(")
    assert torch_loads and all("weights_only=True" in line for line in torch_loads), torch_loads


def test_no_script_switches_off_the_quoting_checks():
    """Provokes nothing: no `# shellcheck disable=` of the unquoted-expansion warnings in any script."""
    quoting = ("SC2086", "SC2046", "SC2048", "SC2068", "SC2206", "SC2207")
    for script in SCRIPTS:
        with open(script, encoding="utf-8") as f:
            disabled = [line.strip() for line in f if "shellcheck disable" in line and any(c in line for c in quoting)]
        assert disabled == [], script
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (Debian package 'shellcheck'; `make test` installs it)")
    result = subprocess.run(["shellcheck", "-x", "--include=" + ",".join(quoting), *SCRIPTS], cwd=ROOT,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_a_config_path_with_spaces_and_glob_characters_reaches_train_py_intact(tmp_path):
    """Provokes: a config in 'my configs/[v1] *.yaml' given to the CPU launcher, with a flag train.py rejects
    at once. The error train.py reports names the flag, so the whole path arrived as one argument."""
    config = tmp_path / "my configs" / "[v1] *.yaml"
    config.parent.mkdir()
    shutil.copy(CONFIG, config)
    run_dir = tmp_path / "run dir"
    result = subprocess.run(["bash", os.path.join(ROOT, "scripts", "run_standalone_train_cpu.sh"), str(config),
                             "--no_such_key", "1"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, PYTHON=sys.executable, RUN_DIR=str(run_dir)))
    assert result.returncode == 2, result.stderr
    with open(run_dir / "logs" / "train.log", encoding="utf-8") as f:
        assert f.read().strip() == "error: command line: unknown option --no_such_key"
