"""ModelArts copies through moxing (src/tools/modelarts.py), with a stand-in moxing module."""
import importlib.util
import sys
import types

import pytest

from src.config import UserError
from src.tools.modelarts import modelarts_io


def test_missing_moxing_is_one_line_naming_the_package_and_the_setting(tmp_path):
    if importlib.util.find_spec("moxing") is not None:
        pytest.skip("moxing is installed here")
    with pytest.raises(UserError) as err:
        with modelarts_io(True, "obs://bucket/data", "obs://bucket/out", str(tmp_path)):
            pass
    message = str(err.value)
    assert "\n" not in message
    assert "'moxing' package is not installed" in message and "enable_modelarts false" in message


def test_disabled_imports_and_copies_nothing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "moxing", None)  # importing it would raise
    with modelarts_io(False, "obs://bucket/data", "obs://bucket/out", str(tmp_path)) as local:
        assert local is None


def _fake_moxing(monkeypatch):
    calls = []
    fake = types.ModuleType("moxing")
    fake.file = types.SimpleNamespace(copy_parallel=lambda src, dst: calls.append((src, dst)))
    monkeypatch.setitem(sys.modules, "moxing", fake)
    return calls


def test_data_is_copied_in_and_results_out_also_after_an_error(tmp_path, monkeypatch):
    calls = _fake_moxing(monkeypatch)
    local, out = str(tmp_path / "cache"), str(tmp_path / "run")
    with pytest.raises(RuntimeError):
        with modelarts_io(True, "obs://b/data", "obs://b/out", out, local_dir=local) as data:
            assert data == local and calls == [("obs://b/data", local)]
            raise RuntimeError("training failed")
    assert calls == [("obs://b/data", local), (out, "obs://b/out")]


def test_other_processes_wait_for_the_copier_and_only_rank_0_copies_out(tmp_path, monkeypatch):
    calls = _fake_moxing(monkeypatch)
    local = str(tmp_path / "cache")
    with pytest.raises(UserError, match="was not copied to"):
        with modelarts_io(True, "obs://b/data", "obs://b/out", "run", local_dir=local, is_copier=False,
                          timeout=0):
            pass
    with modelarts_io(True, "obs://b/data", "obs://b/out", "run", local_dir=local):
        pass
    with modelarts_io(True, "obs://b/data", "obs://b/out", "run", local_dir=local, is_copier=False,
                      is_main=False) as data:
        assert data == local
    assert calls == [("obs://b/data", local), ("run", "obs://b/out")]
