"""export.py: the folded eval network as MINDIR / ONNX, its logits, weights choice and file handling."""
import importlib
import os
import shutil
from collections import Counter

import mindspore as ms
import numpy as np
import onnxruntime as ort
import pytest

from deploy_helpers import DIGITS_CONFIG, F0_CONFIG, NUM_CLASSES, error_lines, make_network, random_weights, run_python
from src.config import ConfigError, load_config
from src.deploy.binio import mindir_input_shape
from src.deploy.errors import DeployError
from src.deploy.export import create_deploy_network, export_network
from src.deploy.onnx_proto import read_model
from src.models.layers import ScaledStdConv2d

export_script = importlib.import_module("export")


def export(tmp_path, ckpt, *extra, name="nano"):
    """Run export.py's main() in this process; returns the written path."""
    file_name = str(tmp_path / name)
    export_script.main(["--config", DIGITS_CONFIG, "--device_target", "CPU", "--checkpoint", ckpt,
                        "--file_name", file_name, *extra])
    fmt = extra[extra.index("--file_format") + 1] if "--file_format" in extra else "MINDIR"
    return file_name + {"MINDIR": ".mindir", "ONNX": ".onnx"}[fmt]


def run_mindir(path, x):
    return ms.nn.GraphCell(ms.load(path))(ms.Tensor(x)).asnumpy()


def run_onnx(path, x):
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def relative_max_error(actual, expected):
    return float(np.abs(actual - expected).max() / np.abs(expected).max())


def images(batch, size=64, seed=5):
    return np.random.default_rng(seed).standard_normal((batch, 3, size, size)).astype(np.float32)


@pytest.fixture(scope="module")
def nano(nano_weights):
    return make_network("dm_nfnet_nano", nano_weights["raw"], NUM_CLASSES)


def mindir_ops(path):
    """{operator name: count} of the nodes of a MINDIR's graph (op_type 'REF::Conv2D:4' -> 'Conv2D')."""
    from mindspore.train import mind_ir_pb2

    model = mind_ir_pb2.ModelProto()
    with open(path, "rb") as f:
        model.ParseFromString(f.read())
    return Counter(node.op_type.split("::")[-1].rsplit(":", 1)[0] for node in model.graph.node)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("conv_impl", [None, "im2col_cpu"])
def test_mindir_gives_the_eval_network_logits(tmp_path, nano, nano_ckpt, conv_impl, capsys):
    """None: exported on this CPU machine with default options, which is the portable form: one Conv2D per
    convolution, no im2col slices. im2col_cpu: the named option does what it says."""
    path = export(tmp_path, nano_ckpt, "--batch_size", "3", *(["--conv_impl", conv_impl] if conv_impl else []))
    conv_impl = conv_impl or "native"
    assert mindir_input_shape(path) == ((3, 3, 64, 64), True)
    assert f"{conv_impl} convolutions" in capsys.readouterr().out
    ops = mindir_ops(path)
    if conv_impl == "native":
        assert ops["Conv2D"] == sum(isinstance(c, ScaledStdConv2d) for _, c in nano.cells_and_names()) == 25
        assert not {"Slice", "StridedSlice", "MatMulExt", "BatchMatMul", "Concat", "Stack"} & set(ops)
    else:
        assert ops["Conv2D"] == 0 and ops["Slice"] > 0
    x = images(3)
    logits = run_mindir(path, x)
    # the graph runs exactly what the folded network runs in Graph mode (README: bit-identical)
    deployed = create_deploy_network(nano, "MINDIR", conv_impl)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        in_graph_mode = deployed(ms.Tensor(x)).asnumpy()
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert logits.tobytes() == in_graph_mode.tobytes()
    error = relative_max_error(logits, nano(ms.Tensor(x)).asnumpy())
    print(f"MINDIR (folded, {conv_impl} conv) vs eval network, nano batch 3: {error:.2e}")
    assert error <= 5e-6  # measured 4.2e-7 (native) and 3.3e-7 (im2col_cpu)


def fused_kernels_or_skip():
    from src.models.layers.config import active_forms

    forms = active_forms()
    if not forms.fused_kernels:
        pytest.skip(f"no fused CPU kernels here: {forms.reason}")


@pytest.mark.timeout(300)
def test_fused_cpu_mindir_runs_the_fused_kernels_eval_py_runs(tmp_path, nano, nano_ckpt, capsys):
    """--conv_impl fused_cpu: the MINDIR holds the eval network's fast forms with folded weights (Custom ops
    of the kernel library, each block's main path one kernel), and gives what that network gives in Graph
    mode, bit for bit."""
    from src.models.layers import apply_fast_forms

    fused_kernels_or_skip()
    path = export(tmp_path, nano_ckpt, "--batch_size", "3", "--conv_impl", "fused_cpu")
    out = capsys.readouterr().out
    assert "fused_cpu convolutions" in out and "calls the fused CPU kernels of " in out
    ops = mindir_ops(path)
    assert ops["Custom"] > 0 and not {"Conv2D", "Slice", "GeLU", "Erf"} & set(ops), ops
    x = images(3)
    logits = run_mindir(path, x)
    fast = make_network("dm_nfnet_nano", {n: p.asnumpy() for n, p in nano.parameters_and_names()}, NUM_CLASSES)
    apply_fast_forms(fast)
    deployed = create_deploy_network(fast, "MINDIR", "fused_cpu")
    assert sum(getattr(c, "fused_chain", None) is not None for _, c in deployed.cells_and_names()) > 0
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        in_graph_mode, eval_network = deployed(ms.Tensor(x)).asnumpy(), fast(ms.Tensor(x)).asnumpy()
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert logits.tobytes() == in_graph_mode.tobytes()
    error = relative_max_error(logits, eval_network)
    print(f"MINDIR (folded, fused_cpu) vs eval network with the fused kernels, nano batch 3: {error:.2e}")
    assert error <= 5e-6  # measured 0 (the same kernels on the same weights, folded once instead of per call)
    assert relative_max_error(logits, nano(ms.Tensor(x)).asnumpy()) <= 5e-6  # the plain network


@pytest.mark.timeout(300)
def test_fused_cpu_mindir_without_its_kernel_library_is_one_clear_error(tmp_path, nano_ckpt):
    """The file names the library by path: moved or deleted, loading says so, and what to do."""
    from src.deploy.infer_cpu import load_mindir
    from src.models.layers.config import kernel_library

    fused_kernels_or_skip()
    cache = tmp_path / "kernels"
    cache.mkdir()
    library = str(cache / os.path.basename(kernel_library()))
    shutil.copy(kernel_library(), library)  # the library this source and CPU build: no compile
    result = run_python(["export.py", "--config", DIGITS_CONFIG, "--device_target", "CPU", "--checkpoint",
                         nano_ckpt, "--file_name", str(tmp_path / "nano"), "--conv_impl", "fused_cpu"],
                        env={"NFNET_KERNEL_CACHE": str(cache)})
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"calls the fused CPU kernels of {library}" in result.stdout
    os.remove(library)
    with pytest.raises(DeployError) as raised:
        load_mindir(str(tmp_path / "nano.mindir"))
    assert str(raised.value) == (f"{tmp_path / 'nano.mindir'} was exported with --conv_impl fused_cpu and calls "
                                 f"the fused CPU kernels of {library}, which is not on this machine; export it again "
                                 f"here, or with --conv_impl im2col_cpu or native for a file that runs anywhere")


def test_fused_cpu_is_refused_for_onnx_and_without_the_kernels(tmp_path, nano_ckpt, monkeypatch):
    with pytest.raises(DeployError, match="needs --file_format MINDIR and --device_target CPU, not ONNX and CPU"):
        export(tmp_path, nano_ckpt, "--file_format", "ONNX", "--conv_impl", "fused_cpu")
    monkeypatch.setenv("NFNET_CPU_KERNELS", "0")
    with pytest.raises(DeployError, match=r"needs the fused CPU kernels, which this machine does not have \(CPU, "
                                          r"float32; fused kernels off \(NFNET_CPU_KERNELS=0\); .*--conv_impl "
                                          r"im2col_cpu instead"):
        export(tmp_path, nano_ckpt, "--conv_impl", "fused_cpu")
    assert os.listdir(tmp_path) == []


@pytest.mark.timeout(300)
def test_onnx_runs_in_onnxruntime_with_mindspore_logits(tmp_path, nano, nano_ckpt, capsys):
    path = export(tmp_path, nano_ckpt, "--file_format", "ONNX", "--batch_size", "2", "--conv_impl", "im2col_cpu")
    assert "native convolutions" in capsys.readouterr().out  # ONNX: always the Conv operator
    x = images(2)
    error = relative_max_error(run_onnx(path, x), nano(ms.Tensor(x)).asnumpy())
    print(f"ONNX in onnxruntime vs eval network, nano batch 2: {error:.2e}")
    assert error <= 5e-6  # measured 4.5e-7


@pytest.mark.timeout(300)
def test_onnx_with_a_dynamic_batch_axis_runs_any_batch(tmp_path, nano, nano_ckpt, capsys):
    path = export(tmp_path, nano_ckpt, "--file_format", "ONNX", "--batch_size", "2", "--dynamic_batch")
    assert "input anyx3x64x64" in capsys.readouterr().out
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].shape == ["batch", 3, 64, 64]
    assert session.get_outputs()[0].shape == ["batch", NUM_CLASSES]
    errors = []
    for batch in (1, 3, 8):
        x = images(batch, seed=batch)
        logits = run_onnx(path, x)
        assert logits.shape == (batch, NUM_CLASSES)
        errors.append(relative_max_error(logits, nano(ms.Tensor(x)).asnumpy()))
    print(f"dynamic-batch ONNX vs eval network, nano batch 1/3/8: {errors}")
    assert max(errors) <= 5e-6  # measured 4.9e-7, 9.3e-7, 6.2e-7
    # the squeeze-excite FC pairs are 1x1 convolutions on the pooled (N, C, 1, 1) tensor, as in timm's graph
    ops = Counter(node.op_type for node in read_model(path).graph.node)
    convs = sum(isinstance(cell, ScaledStdConv2d) for _, cell in nano.cells_and_names())
    assert ops["MatMul"] == ops["Transpose"] == 0 and ops["Sigmoid"] > 0
    assert ops["Conv"] == convs + 2 * ops["Sigmoid"], ops


def test_dynamic_batch_is_refused_for_mindir(tmp_path, nano_ckpt):
    with pytest.raises(DeployError, match="--dynamic_batch is for ONNX exports only, not MINDIR"):
        export(tmp_path, nano_ckpt, "--dynamic_batch")
    assert os.listdir(tmp_path) == []


@pytest.mark.timeout(300)
def test_ema_weights_are_exported_when_present_and_asked(tmp_path, nano_weights, nano_ema_ckpt, monkeypatch):
    """Also: one mindspore.load_checkpoint per export (src/checkpoint_file.py): the EMA check and the weights
    share it (two before); the data settings come from the header walk, which parses no tensor."""
    x = images(1)
    ema = make_network("dm_nfnet_nano", nano_weights["ema"], NUM_CLASSES)(ms.Tensor(x)).asnumpy()
    raw = make_network("dm_nfnet_nano", nano_weights["raw"], NUM_CLASSES)(ms.Tensor(x)).asnumpy()
    reads, real = [], ms.load_checkpoint
    with monkeypatch.context() as patch:
        patch.setattr(ms, "load_checkpoint", lambda path, *a, **k: reads.append(str(path)) or real(path, *a, **k))
        ema_model = export(tmp_path, nano_ema_ckpt, "--use_ema", name="ema")
    assert reads == [os.path.abspath(str(nano_ema_ckpt))]
    with_ema = run_mindir(ema_model, x)
    without = run_mindir(export(tmp_path, nano_ema_ckpt, "--use_ema", "false", name="raw"), x)
    assert relative_max_error(with_ema, ema) <= 5e-6  # same graph as above: 5e-7 measured
    assert relative_max_error(without, raw) <= 5e-6
    assert relative_max_error(with_ema, raw) > 1e-2


def test_raw_weights_are_exported_with_a_note_when_there_is_no_ema(tmp_path, nano, nano_ckpt, capsys):
    path = export(tmp_path, nano_ckpt, "--use_ema")
    assert "holds no EMA weights" in capsys.readouterr().out
    x = images(1)
    assert relative_max_error(run_mindir(path, x), nano(ms.Tensor(x)).asnumpy()) <= 5e-6  # 5e-7 measured


def test_pretrained_is_an_alias_of_checkpoint(tmp_path, nano_ckpt):
    file_name = str(tmp_path / "alias")
    export_script.main(["--config", DIGITS_CONFIG, "--device_target", "CPU", "--pretrained", nano_ckpt,
                        "--file_name", file_name])
    assert os.path.isfile(file_name + ".mindir")
    with pytest.raises(ConfigError, match="differ"):
        export_script.main(["--config", DIGITS_CONFIG, "--checkpoint", nano_ckpt, "--pretrained", "other.ckpt"])
    with pytest.raises(ConfigError, match="--checkpoint"):
        export_script.main(["--config", DIGITS_CONFIG])
    with pytest.raises(ConfigError, match="alias"):
        export_script.main(["--config", DIGITS_CONFIG, "--checkpoint", nano_ckpt, "--batch_size", "2",
                            "--export_batch_size", "2"])


def test_existing_file_is_kept_unless_overwrite(tmp_path, nano_ckpt):
    path = export(tmp_path, nano_ckpt)
    before = os.path.getmtime(path)
    with pytest.raises(DeployError, match="already exists; pass --overwrite"):
        export(tmp_path, nano_ckpt)
    assert os.path.getmtime(path) == before
    export(tmp_path, nano_ckpt, "--overwrite", "--batch_size", "2")
    assert mindir_input_shape(path)[0] == (2, 3, 64, 64)
    assert sorted(os.listdir(tmp_path)) == ["nano.mindir", "nano.mindir.json"]  # no temporary file left


def test_failed_export_leaves_no_file(tmp_path, nano, monkeypatch):
    def broken_export(net, *inputs, file_name, file_format):
        with open(file_name + ".mindir", "wb") as f:
            f.write(b"half a model")
        raise RuntimeError("disk full")

    monkeypatch.setattr(ms, "export", broken_export)
    with pytest.raises(RuntimeError, match="disk full"):
        export_network(nano, "MINDIR", str(tmp_path / "net"), 1, 64)
    assert os.listdir(tmp_path) == []


def test_missing_checkpoint_is_one_line_error(tmp_path):
    with pytest.raises(Exception, match="checkpoint not found"):
        export(tmp_path, str(tmp_path / "missing.ckpt"))


@pytest.mark.timeout(120)
def test_air_off_ascend_fails_in_one_line(tmp_path, nano_ckpt):
    result = run_python(["export.py", "--config", DIGITS_CONFIG, "--checkpoint", nano_ckpt, "--file_format", "AIR",
                         "--file_name", str(tmp_path / "net")])
    assert result.returncode != 0
    lines = error_lines(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: AIR export needs an Ascend device"), result.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.timeout(900)
def test_f0_at_256_mindir_and_onnx_give_the_eval_network_logits(tmp_path):
    """The issue's F0 check, 256x256, batch 1: the folded MINDIR and ONNX as export.py writes them by default
    (native convolutions). The CPU-only im2col form is checked on the nano above (the same folding code)."""
    cfg = load_config(F0_CONFIG, {"device_target": "CPU"})
    from src.models import create_model

    network = make_network("dm_nfnet_f0", random_weights(create_model("dm_nfnet_f0"), seed=3), cfg.num_classes)
    x = images(1, cfg.test_input_size)
    expected = network(ms.Tensor(x)).asnumpy()
    for fmt, conv_impl, run in (("MINDIR", "native", run_mindir), ("ONNX", "native", run_onnx)):
        path = export_network(create_deploy_network(network, fmt, conv_impl), fmt, str(tmp_path / f"f0_{conv_impl}"),
                              1, cfg.test_input_size)
        error = relative_max_error(run(path, x), expected)
        print(f"{fmt} (folded, {conv_impl} conv) vs eval network, F0 256 batch 1: {error:.2e}")
        assert error <= 5e-6  # measured 4.1e-7 (im2col_cpu), 3.7e-7 (native), 4.4e-7 (ONNX)
