"""Shared test setup: every test runs MindSpore on the CPU backend."""
import os
import sys

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
for path in (ROOT, os.path.join(TESTS, "models")):  # the repository, and timm_reference.py
    if path not in sys.path:
        sys.path.insert(0, path)


@pytest.fixture(autouse=True, scope="session")
def _mindspore_cpu():
    import mindspore

    from src.tools.context import set_cpu_threads

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
