"""With CI set, a missing tool stops the run with one line, and a skip is a failure (tests/conftest.py); the runs
leave no temp folders behind (pytest.ini, .ci/run)."""
import importlib.util
import os
import shutil
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


def _script(path, body):
    """An executable /bin/sh script: the stand-in commands below."""
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def _make_as_user(target, tmp_path):
    """`make <target>` as a user without root: PATH holds the basic commands but no shellcheck, Arm cross compiler
    or qemu, an `id` that answers uid 1000, and a `sudo` that only records that it was called."""
    bin_dir, called = tmp_path / "bin", tmp_path / "sudo-called"
    if not bin_dir.exists():
        bin_dir.mkdir()
        for tool in ("make", "ls", "cat", "sha256sum", "cut"):
            os.symlink(shutil.which(tool), bin_dir / tool)
        for name, body in (("id", "echo 1000"), ("sudo", f'echo "$@" > {called}')):
            _script(bin_dir / name, body)
    result = subprocess.run(["make", "--no-print-directory", "-C", ROOT, target], capture_output=True, text=True,
                            env={"PATH": str(bin_dir), "HOME": str(tmp_path)}, timeout=60)
    return result, called.exists()


def test_make_never_runs_sudo_for_the_test_tools(tmp_path):
    """Issue 27: `make test`'s tool step as a user without root names the missing Debian packages and the command
    in one line, installs nothing and succeeds (their tests skip); `make arm-tools` asked for by name says that it
    needs root, exit 1. Real make on this Makefile; the user's uid is a stand-in `id` (CI runs as root)."""
    result, sudo = _make_as_user("test-tools", tmp_path)
    assert result.returncode == 0 and not sudo, result.stderr
    assert result.stdout.splitlines() == [
        "note: not installed (Debian packages): shellcheck g++-aarch64-linux-gnu qemu-user libdnnl2; the tests that "
        "need them skip; install them with: sudo make shellcheck arm-tools"]
    result, sudo = _make_as_user("arm-tools", tmp_path)
    assert result.returncode != 0 and not sudo
    assert result.stderr.splitlines()[0] == ("error: installing g++-aarch64-linux-gnu qemu-user libdnnl2 needs root: "
                                             "run sudo make arm-tools")


def test_the_longest_files_go_first_and_each_still_exists():
    # by path: with several conftest.py files in tests/, the module name "conftest" may be another folder's
    spec = importlib.util.spec_from_file_location("tests_conftest", os.path.join(ROOT, "tests", "conftest.py"))
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    assert [path for path in conftest.LONGEST_FIRST if not os.path.isfile(os.path.join(ROOT, path))] == []


def test_pytest_xdist_hands_out_the_longest_file_first():
    # real pytest-xdist, one worker (its queue order is the run order), as make test runs it: test_config.py
    # (33 tests, collected first) and two of test_bench.py's (LONGEST_FIRST). xdist alone would run the file with
    # more tests first (its default, which undid the order in CI's runs until tests/conftest.py turned it off)
    run = _pytest("-n", "1", "--dist", "loadfile", "-vv", "tests/test_config.py",
                  "tests/test_bench.py", "-k", "test_config or compile_time_below_zero or unknown_only_name")
    assert run.returncode == 0, run.stdout[-3000:]
    files = [line.split("::")[0].split()[-1] for line in run.stdout.splitlines() if " PASSED " in line]
    assert list(dict.fromkeys(files)) == ["tests/test_bench.py", "tests/test_config.py"], run.stdout[-3000:]


def test_a_passing_test_leaves_no_temp_folder(tmp_path):
    # real pytest with this repository's pytest.ini: a passed test's tmp_path goes when it ends, a failed one's stays
    (tmp_path / "test_two.py").write_text("def test_pass(tmp_path):\n    (tmp_path / 'ckpt').write_bytes(b'0' * 9)\n\n"
                                          "def test_fail(tmp_path):\n    (tmp_path / 'ckpt').write_bytes(b'0')\n"
                                          "    assert False\n")
    base = tmp_path / "base"
    run = _pytest("-c", os.path.join(ROOT, "pytest.ini"), "--rootdir", str(tmp_path), f"--basetemp={base}",
                  str(tmp_path / "test_two.py"))
    assert run.returncode == 1 and "1 failed, 1 passed" in run.stdout, run.stdout[-2000:]
    assert sorted(path.name for path in base.iterdir() if not path.is_symlink()) == ["test_fail0"]  # not *current


def test_ci_run_removes_its_temp_folder(tmp_path):
    # .ci/run itself (bash), from a copy of the checkout's .ci folder, with a `make` stand-in that writes what the
    # jobs write in their pytest temp folders: every job's log is printed, and nothing is left in TMPDIR
    checkout, tmp, bin_dir = tmp_path / "checkout", tmp_path / "tmp", tmp_path / "bin"
    for folder in (checkout, tmp, bin_dir):
        folder.mkdir()
    shutil.copytree(os.path.join(ROOT, ".ci"), checkout / ".ci")
    _script(bin_dir / "make", 'echo "make $*"\ncase "$PYTEST_ADDOPTS" in *--basetemp=*) '
                              'd=${PYTEST_ADDOPTS#*--basetemp=}; mkdir -p "$d" && echo x > "$d/model.ckpt";; esac')
    (checkout / ".venv" / "bin").mkdir(parents=True)
    os.symlink(shutil.which("true"), checkout / ".venv" / "bin" / "python")
    run = subprocess.run(["bash", str(checkout / ".ci" / "run")], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, TMPDIR=str(tmp), PATH=f"{bin_dir}:{os.environ['PATH']}"))
    assert run.returncode == 0, run.stdout + run.stderr
    for job in ("make test-slow", "make test-lite", "make demo", "make test", "CI finished"):
        assert job in run.stdout, run.stdout
    assert list(tmp.iterdir()) == []
