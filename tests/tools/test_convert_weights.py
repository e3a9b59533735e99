"""timm checkpoint -> MindSpore .ckpt: exact round trip, readable without torch, clear errors."""
import os
import subprocess
import sys

import mindspore as ms
import numpy as np
import pytest

from tools.convert_weights import ConversionError, convert, read_safetensors, read_timm_state_dict

torch = pytest.importorskip("torch")
pytest.importorskip("timm")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _nano_state_dict():
    from timm_reference import randomize_, timm_nano  # tests/models/timm_reference.py

    return {k: v.contiguous() for k, v in randomize_(timm_nano(), seed=3).state_dict().items()}


@pytest.fixture(scope="module")
def nano_state():
    return _nano_state_dict()


def test_safetensors_written_by_safetensors_reads_back_bit_exact_without_torch(nano_state, tmp_path):
    from safetensors.torch import save_file

    path = str(tmp_path / "model.safetensors")
    save_file(nano_state, path, metadata={"format": "pt"})
    arrays = read_safetensors(path)
    assert set(arrays) == set(nano_state)
    for name, tensor in nano_state.items():
        assert arrays[name].dtype == np.float32
        assert np.array_equal(arrays[name], tensor.numpy()), name
    # the reader needs no torch: run it in a process where importing torch fails
    code = ("import sys; sys.modules['torch'] = None; sys.path.insert(0, %r); "
            "from tools.convert_weights import read_safetensors; "
            "print(len(read_safetensors(%r)))" % (ROOT, path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(len(nano_state))


def test_bfloat16_and_float16_safetensors_widen_to_the_same_values_as_torch(tmp_path):
    from safetensors.torch import save_file

    t = torch.randn(5, 7)
    path = str(tmp_path / "half.safetensors")
    save_file({"a": t.to(torch.bfloat16), "b": t.to(torch.float16)}, path)
    arrays = read_safetensors(path)
    assert np.array_equal(arrays["a"].astype(np.float32), t.to(torch.bfloat16).float().numpy())
    assert np.array_equal(arrays["b"].astype(np.float32), t.to(torch.float16).float().numpy())


@pytest.mark.parametrize("fmt", ["safetensors", "pth", "pth_wrapped"])
def test_convert_round_trip_is_exact(nano_state, tmp_path, fmt):
    if fmt == "safetensors":
        from safetensors.torch import save_file

        src = str(tmp_path / "in.safetensors")
        save_file(nano_state, src)
    else:
        src = str(tmp_path / "in.pth")
        obj = {"state_dict": {"module." + k: v for k, v in nano_state.items()}} if fmt == "pth_wrapped" \
            else nano_state
        torch.save(obj, src)
    out = str(tmp_path / "out.ckpt")
    arch, num_classes, count, record = convert(src, out)
    assert (arch, num_classes, count) == ("dm_nfnet_nano", 10, len(nano_state))
    assert record is None  # timm has no nano weights, so no pretrained settings
    stored = ms.load_checkpoint(out)
    assert set(stored) == set(nano_state)
    for name, tensor in nano_state.items():
        assert np.array_equal(stored[name].asnumpy(), tensor.numpy()), name
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".")]  # no temporary left behind


def test_convert_reports_missing_and_misshaped_names(nano_state, tmp_path):
    from safetensors.torch import save_file

    broken = dict(nano_state)
    del broken["stages.1.0.conv2.gain"]
    broken["stages.0.0.conv1.weight"] = torch.zeros(3, 3, 1, 1)
    src = str(tmp_path / "broken.safetensors")
    save_file(broken, src)
    with pytest.raises(ConversionError) as err:
        convert(src, str(tmp_path / "x.ckpt"))
    msg = str(err.value)
    assert "missing: stages.1.0.conv2.gain" in msg and "mis-shaped: stages.0.0.conv1.weight" in msg
    assert "\n" not in msg


def test_convert_cli_fails_with_one_line_for_unknown_network(tmp_path):
    from safetensors.numpy import save_file

    src = str(tmp_path / "other.safetensors")
    save_file({"stages.0.0.conv3.weight": np.zeros((24, 8, 1, 1), np.float32)}, src)
    out = subprocess.run([sys.executable, "-m", "tools.convert_weights", src, str(tmp_path / "o.ckpt")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert lines == ["error: no known NFNet has stage depths (1, 0, 0, 0) and widths (24, 0, 0, 0)"]
    assert not os.path.exists(tmp_path / "o.ckpt")


def test_reading_a_missing_file_names_it(tmp_path):
    with pytest.raises(ConversionError, match="input not found: .*nope.safetensors"):
        read_timm_state_dict(str(tmp_path / "nope.safetensors"))
