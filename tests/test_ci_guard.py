"""With CI set, a missing tool stops the run with one line, and a skip is a failure (tests/conftest.py)."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _pytest(*args, **env):
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          env=dict(os.environ, **env), capture_output=True, text=True, timeout=120)


def test_a_missing_tool_stops_a_ci_run_with_one_line_naming_what_to_install():
    result = _pytest("--collect-only", "tests/test_ci_guard.py", CI="1", PATH=os.path.join(ROOT, "no-such-dir"))
    assert result.returncode == 2
    lines = [line for line in result.stdout.splitlines() + result.stderr.splitlines() if "error:" in line]
    assert lines == ["Exit: error: CI is set but the tests need what is missing here: g++ (apt-get install g++); "
                     "shellcheck (apt-get install shellcheck); taskset (apt-get install util-linux); "
                     "aarch64-linux-gnu-g++ (make arm-tools); qemu-aarch64 (make arm-tools)"]


def test_a_skip_fails_a_ci_run(tmp_path):
    result = _pytest("tests/test_ci_guard.py::test_skipping_helper", CI="1", NFNET_SKIP_HELPER="1")
    assert result.returncode == 1 and "skipped in a CI run (CI is set): Skipped: why" in result.stdout
    result = _pytest("tests/test_ci_guard.py::test_skipping_helper", NFNET_SKIP_HELPER="1", CI="")
    assert result.returncode == 0 and "1 skipped" in result.stdout


def test_skipping_helper():
    """Skips when run by the test above; passes otherwise."""
    if os.environ.get("NFNET_SKIP_HELPER"):
        import pytest

        pytest.skip("why")
