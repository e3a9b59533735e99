"""src/atomic.py: a file appears whole or not at all; a failed write keeps the previous file and leaves nothing."""
import errno
import os

import pytest

from src.atomic import PARTIAL_MARK, atomic_path, write_atomic, write_json


def test_a_write_replaces_the_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "sub" / "config.yaml"  # the folder is created
    write_atomic(str(target), "a: 1\n")
    write_atomic(str(target), b"a: 2\n", durable=False)
    assert target.read_text() == "a: 2\n"
    assert os.listdir(target.parent) == ["config.yaml"]


def test_the_temporary_is_hidden_beside_the_target_with_its_extension(tmp_path):
    with atomic_path(str(tmp_path / "model.mindir")) as tmp:
        name = os.path.basename(tmp)
        assert os.path.dirname(tmp) == str(tmp_path)
        assert name.startswith("." + "model" + PARTIAL_MARK) and name.endswith(".mindir")
        open(tmp, "w").close()


def test_a_failed_write_keeps_the_previous_file_and_removes_every_leftover(tmp_path):
    """What a full disk does to a writer (MindSpore's savers also leave <temporary stem>.tmp beside it)."""
    target = tmp_path / "run-1_4.ckpt"
    target.write_bytes(b"previous")
    with pytest.raises(OSError) as info:
        with atomic_path(str(target)) as tmp:
            open(tmp, "wb").write(b"half")
            open(tmp[:-len(".ckpt")] + ".tmp", "wb").write(b"library's own")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), tmp)
    assert info.value.errno == errno.ENOSPC  # unchanged: each caller words its own one-line error
    assert target.read_bytes() == b"previous"
    assert os.listdir(tmp_path) == ["run-1_4.ckpt"]


def test_json_is_indented_with_sorted_keys(tmp_path):
    write_json(str(tmp_path / "labels.json"), {"b": 1, "a": [2]})
    assert (tmp_path / "labels.json").read_text() == '{\n "a": [\n  2\n ],\n "b": 1\n}\n'
