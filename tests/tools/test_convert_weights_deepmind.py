"""DeepMind's haiku release (deepmind-research nfnets/, `F0_haiku.npz` ...) -> our checkpoint.

No download: the release is written here from a network of ours with every parameter random, in
DeepMind's names and layouts as nfnets/nfnet.py and base.py define them (haiku module names
`NFNet/~/stem_conv0`, `NFNet/~/nf_block_3/~/conv1b`, `.../squeeze_excite/~/linear_1`; WSConv2D's
`w` HWIO, `gain` (O,), `bias`; hk.Linear's `w` (in, out), `b`; NFBlock's `skip_gain`), both as
DeepMind wrote it (a pickle of {module: {name: array}}, written with dill as DeepMind's colab
reads it) and as a NumPy .npz archive. The writer below is an independent transcription of those
names, not convert_weights' mapping run backwards.
"""
import os
import pickle
import subprocess
import sys

import mindspore as ms
import numpy as np
import pytest

from live_weights import live_nano
from src.data.data_settings import read_checkpoint_settings
from tools.convert_weights import ConversionError, convert

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BLOCK = {"conv1": "conv0", "conv2": "conv1", "conv2b": "conv1b", "conv3": "conv2", "downsample.conv": "conv_shortcut",
          "attn_last.fc1": "squeeze_excite/~/linear", "attn_last.fc2": "squeeze_excite/~/linear_1"}


def deepmind_params(network):
    """{haiku module: {param: array}} of `network` as DeepMind's NFNet would hold the same weights."""
    depths = network.cfg.depths
    params = {}
    for name, p in network.parameters_and_names():
        value = p.asnumpy()
        *path, leaf = name.split(".")
        module = ".".join(path)
        if module.startswith("stem.conv"):
            dm = f"stem_conv{int(module[-1]) - 1}"
        elif module.startswith("stages."):
            _, stage, index, *rest = module.split(".")
            k = sum(depths[:int(stage)]) + int(index)
            dm = "nf_block" + (f"_{k}" if k else "")
            if rest:
                dm += "/~/" + _BLOCK[".".join(rest)]
        else:
            dm = {"final_conv": "final_conv", "head.fc": "linear"}[module]
        if leaf == "skipinit_gain":
            leaf, value = "skip_gain", value.reshape(())
        elif leaf == "weight" and module.startswith("head"):
            leaf, value = "w", value.T
        elif leaf == "weight" and "attn_last" in module:
            leaf, value = "w", value.reshape(value.shape[:2]).T
        elif leaf == "weight":
            leaf, value = "w", value.transpose(2, 3, 1, 0)  # OIHW -> HWIO
        elif leaf == "gain":
            value = value.reshape(-1)
        elif leaf == "bias" and (module.startswith("head") or "attn_last" in module):
            leaf = "b"
        params.setdefault(f"NFNet/~/{dm}", {})[leaf] = np.ascontiguousarray(value)
    return params


@pytest.fixture(scope="module")
def nano():
    return live_nano(seed=5)


@pytest.mark.parametrize("layout", ["dill_pickle", "numpy_npz"])
def test_deepmind_release_round_trips_exactly(nano, tmp_path, layout):
    params = deepmind_params(nano)
    assert "NFNet/~/stem_conv0" in params and params["NFNet/~/stem_conv0"]["w"].shape == (3, 3, 3, 4)
    assert "NFNet/~/nf_block_1/~/squeeze_excite/~/linear_1" in params
    src = str(tmp_path / "F0_haiku.npz")
    if layout == "dill_pickle":
        dill = pytest.importorskip("dill")
        with open(src, "wb") as f:
            dill.dump(params, f)
    else:
        np.savez(src, **{f"{module}/{name}": v for module, group in params.items() for name, v in group.items()})
    out = str(tmp_path / "dm.ckpt")
    arch, num_classes, count, record = convert(src, out)
    ours = dict(nano.parameters_and_names())
    assert (arch, num_classes, count) == ("dm_nfnet_nano", 10, len(ours))
    stored = ms.load_checkpoint(out)
    mismatched = [n for n, p in ours.items() if not np.array_equal(stored[n].asnumpy(), p.asnumpy())]
    print(f"{layout}: {len(ours)} tensors, {len(mismatched)} differ")
    assert not mismatched
    settings = read_checkpoint_settings(out)
    assert settings["ws_form"] == "deepmind" and settings["gelu_form"] == "tanh"
    assert (settings["eval_crop_mode"], settings["crop_pct"], settings["test_input_size"]) == ("pixels", 32, 64)
    assert record == settings


@pytest.mark.timeout(600)
def test_converted_deepmind_weights_evaluate_in_deepmind_forms(nano, tmp_path):
    """eval.py's builder takes the forms from the checkpoint: the logits are the DeepMind-form network's."""
    from src.builders import build_eval_network
    from src.config import load_config
    from src.data.data_settings import apply_settings

    src = str(tmp_path / "dm.npz")
    with open(src, "wb") as f:
        pickle.dump(deepmind_params(nano), f)
    out = str(tmp_path / "dm.ckpt")
    convert(src, out)
    cfg, changed = apply_settings(load_config(), read_checkpoint_settings(out))
    assert (cfg.ws_form, cfg.gelu_form) == ("deepmind", "tanh") and "ws_form" in changed
    net, _ = build_eval_network(cfg.replace(device_target="CPU"), out, fast_forms=False)
    reference = live_nano(seed=5, ws_form="deepmind", gelu_form="tanh").set_train(False)
    x = ms.Tensor(np.random.default_rng(0).standard_normal((2, 3, 64, 64)).astype(np.float32))
    np.testing.assert_array_equal(net(x).asnumpy(), reference(x).asnumpy())


def test_a_pickle_naming_anything_but_arrays_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    src = str(tmp_path / "evil.npz")
    with open(src, "wb") as f:
        pickle.dump({"NFNet/~/stem_conv0": {"w": Payload()}}, f)
    with pytest.raises(ConversionError, match=r"evil.npz is not DeepMind's weights \(it needs (posix|os)\.system"):
        convert(src, str(tmp_path / "x.ckpt"))
    assert not marker.exists()


def test_foreign_names_are_named(nano, tmp_path):
    params = deepmind_params(nano)
    params["NFNet/~/nf_block_1/~/conv7"] = {"w": np.zeros((1, 1, 8, 8), np.float32)}
    src = str(tmp_path / "odd.npz")
    np.savez(src, **{f"{m}/{n}": v for m, g in params.items() for n, v in g.items()})
    out = subprocess.run([sys.executable, "-m", "tools.convert_weights", src, str(tmp_path / "o.ckpt")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr
    assert [line for line in out.stderr.splitlines() if line.startswith("error:")] == [
        f"error: {src}: NFNet/~/nf_block_1/~/conv7/w has no place in a network of stage depths (1, 1, 1, 1)"]
