"""The ONNX graph's GELU is ONNX's own exact (Erf) GELU, which ONNX Runtime fuses into one kernel."""
import mindspore as ms
import numpy as np
import pytest
import torch

from src.deploy.errors import DeployError
from src.deploy.export import export_network
from src.deploy.gelu import OnnxGeluMarker, restore_erf_gelu, use_onnx_gelu_markers
from src.deploy.onnx_proto import read_model
from src.models import create_model
from src.models.layers import GammaAct

ort = pytest.importorskip("onnxruntime", reason="optional ONNX runtime (requirements-onnx.txt) not installed")
GAMMA = 1.7015043497085571


def _export(net, path, size=16):
    use_onnx_gelu_markers(net)
    return export_network(net, "ONNX", str(path), 1, size, overwrite=True)


def _session(path, optimized=None):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    if optimized:
        options.optimized_model_filepath = str(optimized)
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda x: session.run(None, {session.get_inputs()[0].name: x})[0]


def test_exported_gelu_is_onnx_erf_gelu_fused_by_onnx_runtime_and_equals_float64_gelu(tmp_path):
    path = _export(ms.nn.SequentialCell([GammaAct("gelu", GAMMA)]), tmp_path / "gelu")
    ops = [n.op_type for n in read_model(path).graph.node]
    assert ops.count("Erf") == 1 and "Tanh" not in ops, ops
    assert ops[:5] == ["Div", "Erf", "Add", "Mul", "Mul"], ops
    x = np.linspace(-10, 10, 3 * 16 * 16, dtype=np.float32).reshape(1, 3, 16, 16)
    ours = _session(path, tmp_path / "optimized.onnx")(x).astype(np.float64)
    fused = [n.op_type for n in read_model(tmp_path / "optimized.onnx").graph.node]
    assert "Gelu" in fused and "Erf" not in fused, fused  # ONNX Runtime's GeluFusion took the pattern
    exact = torch.nn.functional.gelu(torch.from_numpy(x.astype(np.float64))).numpy() * GAMMA
    error = np.abs(ours - exact).max()
    kernel = ms.ops.gelu(ms.Tensor(x), approximate="none").asnumpy().astype(np.float64) * GAMMA
    print(f"max |ONNX Runtime gelu - float64 gelu| on [-10, 10]: {error:.2e} "
          f"(MindSpore's erf kernel: {np.abs(kernel - exact).max():.2e})")
    assert error <= 2e-6  # measured 1.1e-6 (MindSpore's erf kernel: 7.3e-7): float32 rounding of |y| <= 17


def test_a_network_with_its_own_tanh_is_refused(tmp_path):
    class TanhThenGelu(ms.nn.Cell):
        def __init__(self):
            super().__init__()
            self.act = GammaAct("gelu", GAMMA)

        def construct(self, x):
            return self.act(ms.ops.tanh(x))

    with pytest.raises(DeployError, match="2 Tanh nodes in the exported graph, expected one per GELU"):
        _export(TanhThenGelu(), tmp_path / "tanh")


def test_a_graph_without_markers_is_left_as_it_is(tmp_path):
    path = export_network(ms.nn.SequentialCell([GammaAct("relu")]), "ONNX", str(tmp_path / "relu"), 1, 8)
    before = open(path, "rb").read()
    model = read_model(path)
    assert restore_erf_gelu(model, 0) == 0
    assert model.SerializeToString() == read_model(path).SerializeToString()
    assert open(path, "rb").read() == before


@pytest.mark.parametrize("act_type", ["relu", "silu"])
def test_only_gelu_activations_are_swapped(act_type):
    net = ms.nn.SequentialCell([GammaAct(act_type), GammaAct("gelu")])
    assert use_onnx_gelu_markers(net) == 1
    assert isinstance(net[0], GammaAct) and isinstance(net[1], OnnxGeluMarker)


def test_every_nano_gelu_is_swapped():
    net = create_model("dm_nfnet_nano", num_classes=10)
    gelus = sum(isinstance(c, GammaAct) for _, c in net.cells_and_names())
    assert use_onnx_gelu_markers(net) == gelus > 0
    assert not any(isinstance(c, GammaAct) for _, c in net.cells_and_names())
