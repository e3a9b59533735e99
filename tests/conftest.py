"""Shared test setup: every test runs MindSpore on the CPU backend; in CI nothing skips."""
import glob
import importlib.util
import os
import shutil
import sys

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
for path in (ROOT, os.path.join(TESTS, "models")):  # the repository, and timm_reference.py
    if path not in sys.path:
        sys.path.insert(0, path)

# With CI set (.ci/run exports CI=1) a test that would skip fails instead, and a missing tool or
# test dependency stops the run at once with one line saying what to install. Without CI (a
# laptop without g++ or torch) those tests skip with their reason.
CI = bool(os.environ.get("CI"))
_DEV = "pip install -r requirements-dev.txt"
CI_NEEDS = {  # name -> (found?, how to install it)
    "g++": (lambda: shutil.which(os.environ.get("CXX") or "g++"), "apt-get install g++"),
    "shellcheck": (lambda: shutil.which("shellcheck"), "apt-get install shellcheck"),
    "taskset": (lambda: shutil.which("taskset"), "apt-get install util-linux"),
    **{tool: (lambda t=tool: shutil.which(t), "make arm-tools") for tool in ("aarch64-linux-gnu-g++", "qemu-aarch64")},
    "libdnnl.so.2": (lambda: glob.glob("/usr/lib/*-linux-gnu/libdnnl.so.2"), "make arm-tools"),
    **{module: (lambda m=module: importlib.util.find_spec(m), _DEV)
       for module in ("torch", "torchvision", "timm", "sklearn", "safetensors", "onnxruntime", "pytest_timeout", "xdist")},
}


def pytest_configure(config):
    # pytest-xdist hands the files out ordered by their number of tests, most first, unless told not to
    # (--no-loadscope-reorder): that order would undo LONGEST_FIRST below
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    if not CI:
        return
    missing = [f"{name} ({how})" for name, (found, how) in CI_NEEDS.items() if not found()]
    if missing:
        pytest.exit(f"error: CI is set but the tests need what is missing here: {'; '.join(missing)}", returncode=2)


# The files whose tests take longest go first, longest first (seconds in a loaded run on the 2 cores:
# 609 for the bench's one --quick test, 788 ... 251 for the others): with --dist loadfile a file is
# handed out whole, and the bench's 10 minutes, handed out late (xdist's order: files with more tests
# first), were the tail of a loaded run: the other process had finished. The order of every other file
# stays the collection's.
LONGEST_FIRST = ("tests/test_bench.py", "tests/deploy/test_export.py", "tests/reliability/test_inference_outputs.py",
                 "tests/test_machine_fit.py", "tests/models/test_nfnet_parity.py",
                 "tests/distributed/test_data_parallel_cpu.py", "tests/reliability/test_mindrecord_sources.py",
                 "tests/reliability/test_preemption.py", "tests/deploy/test_fold.py")


def pytest_collection_modifyitems(items):
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: the rest keep order


# The skips a CI run keeps, each for a reason no install can remove: material that lives outside
# the repository by design (the C++ API headers in ../shared/mindspore-cxx-api, which the project
# must not copy), and the user the run has (root reads files whatever their permissions; only
# root may mount the small filesystem the disk-full test fills).
UNAVOIDABLE_SKIPS = ("outside the repository: ", "root reads every file", "cannot mount here")


def _skip_fails_in_ci(report):
    if CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if any(phrase in reason for phrase in UNAVOIDABLE_SKIPS):
            return
        report.outcome = "failed"
        report.longrepr = f"skipped in a CI run (CI is set): {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _skip_fails_in_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _skip_fails_in_ci(outcome.get_result())


@pytest.fixture(autouse=True, scope="session")
def _mindspore_cpu():
    import mindspore

    from src.run.context import set_cpu_threads

    mindspore.set_device("CPU")
    set_cpu_threads()
    yield


@pytest.fixture()
def pynative():
    import mindspore

    mindspore.set_context(mode=mindspore.PYNATIVE_MODE)
    yield


@pytest.fixture()
def graph_mode():
    import mindspore

    mindspore.set_context(mode=mindspore.GRAPH_MODE)
    yield
    mindspore.set_context(mode=mindspore.PYNATIVE_MODE)


@pytest.fixture()
def operator_forms(monkeypatch):
    """Cells built in the test use their MindSpore-operator forms, as without the fused CPU kernels."""
    from src.models.layers import cpu_kernels

    monkeypatch.setitem(cpu_kernels._state, "path", None)  # noqa: SLF001  as after a failed build
    monkeypatch.setitem(cpu_kernels._state, "tried", True)  # noqa: SLF001


@pytest.fixture()
def fused_kernels():
    """Cells built in the test use the fused CPU kernels (skips where they cannot be built, fails in CI)."""
    from src.models.layers import cpu_kernels

    if not cpu_kernels.available():
        pytest.skip("fused CPU kernels not built (no C++ compiler)")


@pytest.fixture(scope="session")
def digits_subset(tmp_path_factory):
    """make(train_per_class, val_per_class, short_val_class=None) -> root of a tiny digits copy.

    The first images (by name) of each class of the materialized digits (src.data.digits);
    short_val_class gets one validation image fewer (a val size not divisible by the batch).
    """
    pytest.importorskip("sklearn")
    from src.data.digits import materialize_digits

    full = materialize_digits(str(tmp_path_factory.mktemp("digits_full") / "digits"))
    made = {}

    def make(train_per_class, val_per_class, short_val_class=None):
        key = (train_per_class, val_per_class, short_val_class)
        if key not in made:
            tiny = tmp_path_factory.mktemp("digits_tiny")
            for split, count in (("train", train_per_class), ("val", val_per_class)):
                for cls in sorted(os.listdir(os.path.join(full, split))):
                    os.makedirs(tiny / split / cls)
                    names = sorted(os.listdir(os.path.join(full, split, cls)))[:count]
                    if split == "val" and cls == short_val_class:
                        names = names[:-1]
                    for name in names:
                        shutil.copy(os.path.join(full, split, cls, name), tiny / split / cls / name)
            made[key] = str(tiny)
        return made[key]

    return make


@pytest.fixture(scope="session")
def tiny_digits(digits_subset):
    """6 training and 3 validation images per digit (60 + 30): the end-to-end runs' data."""
    return digits_subset(6, 3)
