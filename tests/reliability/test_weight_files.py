"""convert_weights on hostile or careless weight files and outputs (issue 24; issue 27 item 8: --overwrite).

Each case runs `python -m tools.convert_weights` for real and expects one `error:` line naming the
file, exit 2, no traceback, and nothing written or lost. The malformed safetensors are written byte by
byte as the format defines them (8-byte little-endian header length, JSON header, data); the pickles
with real torch.save.
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from reliability_helpers import ROOT, user_error


def convert(*args):
    return subprocess.run([sys.executable, "-m", "tools.convert_weights", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def safetensors_bytes(header, data=b"", header_len=None):
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text) if header_len is None else header_len) + text + data


def refused(tmp_path, content, name="w.safetensors"):
    """The error line for an input file holding `content`; the output was not written."""
    src = tmp_path / name
    src.write_bytes(content)
    line = user_error(convert(src, tmp_path / "out.ckpt"))
    assert str(src) in line, line
    assert not (tmp_path / "out.ckpt").exists() and sorted(os.listdir(tmp_path)) == [name]
    print(line)
    return line


GOOD_ENTRY = {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}


def test_a_safetensors_header_length_beyond_the_file_is_refused(tmp_path):
    """Provokes: a header length field of 2**40 bytes (a file of 30 bytes)."""
    assert "its header claims 1099511627776 bytes" in refused(tmp_path, safetensors_bytes({}, header_len=2 ** 40))


def test_a_safetensors_header_that_is_a_list_is_refused(tmp_path):
    """Provokes: a JSON list where the header's object of tensors belongs."""
    assert "its header is a JSON list, not an object of tensors" in refused(tmp_path, safetensors_bytes([1, 2]))


def test_a_tensor_without_data_offsets_is_refused(tmp_path):
    """Provokes: a tensor entry with dtype and shape but no data_offsets."""
    line = refused(tmp_path, safetensors_bytes({"a": {"dtype": "F32", "shape": [2, 2]}}, bytes(16)))
    assert "tensor a lacks data_offsets" in line


def test_a_string_shape_is_refused(tmp_path):
    """Provokes: "shape": "2x2"."""
    line = refused(tmp_path, safetensors_bytes({"a": {**GOOD_ENTRY, "shape": "2x2"}}, bytes(16)))
    assert "tensor a has shape '2x2', not a list of sizes" in line


def test_a_truncated_safetensors_names_the_file_and_the_tensor(tmp_path):
    """Provokes: a valid two-tensor file cut short inside the second tensor's data."""
    from safetensors.numpy import save as save_bytes

    whole = save_bytes({"a": np.ones((4, 4), np.float32), "b": np.ones((128, 16, 3, 3), np.float32)})
    line = refused(tmp_path, whole[:-1000])
    assert "is truncated: tensor b ends at byte" in line, line


def test_a_pickle_that_weights_only_refuses_is_one_line_and_nothing_runs(tmp_path):
    """Provokes: a .pth whose pickle calls os.system (torch.load(weights_only=True) raises UnpicklingError)."""
    torch = pytest.importorskip("torch")
    marker = tmp_path / "executed"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    src = tmp_path / "evil.pth"
    torch.save({"stem.conv1.weight": Payload()}, src)
    line = user_error(convert(src, tmp_path / "out.ckpt"))
    assert str(src) in line and "weights_only loader refuses (it needs posix.system)" in line and "nothing in it was run" in line, line
    assert not marker.exists() and not (tmp_path / "out.ckpt").exists()
    print(line)


def test_an_empty_pth_is_refused(tmp_path):
    """Provokes: a 0-byte .pth."""
    assert "is empty (0 bytes), not a PyTorch checkpoint" in refused(tmp_path, b"", "empty.pth")


@pytest.mark.parametrize("where", ["missing_folder", "folder_is_a_file", "read_only_folder"])
def test_an_unwritable_output_is_refused_before_reading(tmp_path, where):
    """Provokes: an output whose folder does not exist, is a file, or cannot be written to."""
    src = tmp_path / "w.safetensors"
    src.write_bytes(safetensors_bytes({}))
    if where == "missing_folder":
        out = tmp_path / "nope" / "out.ckpt"
        expected = f"output {out}: folder {tmp_path / 'nope'} does not exist"
    elif where == "folder_is_a_file":
        (tmp_path / "plain").write_text("x")
        out = tmp_path / "plain" / "out.ckpt"
        expected = f"output {out}: folder {tmp_path / 'plain'} is not a folder"
    else:
        if os.geteuid() == 0:
            pytest.skip("root reads every file and writes into read-only folders")
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o500)
        out = folder / "out.ckpt"
        expected = f"output {out}: cannot write in folder {folder} (Permission denied)"
    line = user_error(convert(src, out))
    assert line == f"error: {expected}", line
    print(line)


def test_an_existing_output_needs_overwrite_and_the_input_is_never_the_output(tmp_path):
    """Provokes: converting onto an existing file (refused, then replaced with --overwrite), and onto the
    input itself through a hard link (refused even with --overwrite)."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file
    from timm_reference import randomize_, timm_nano

    src = tmp_path / "nano.safetensors"
    save_file({k: v.contiguous() for k, v in randomize_(timm_nano(), seed=3).state_dict().items()}, str(src))
    out = tmp_path / "out.ckpt"
    out.write_bytes(b"the user's file")
    line = user_error(convert(src, out))
    assert line == f"error: output {out}: already exists; pass --overwrite to replace it", line
    assert out.read_bytes() == b"the user's file"
    result = convert(src, out, "--overwrite")
    assert result.returncode == 0, result.stderr
    assert out.stat().st_size > 100_000
    link = tmp_path / "same.ckpt"
    os.link(src, link)
    before = src.read_bytes()
    line = user_error(convert(src, link, "--overwrite"))
    assert line == f"error: output {link}: is the input {src}; name another file", line
    assert src.read_bytes() == before
    del torch
