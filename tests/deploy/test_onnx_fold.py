"""The ONNX export folds the constant scalings before convolutions into their weights (src/deploy/onnx_fold.py)."""
from collections import defaultdict

import mindspore as ms
import numpy as np
import pytest

from deploy_helpers import NUM_CLASSES, make_network
from src.deploy.export import create_deploy_network, export_network
from src.deploy.onnx_fold import fold_scalar_muls, scalar_constants
from src.deploy.onnx_proto import read_model, write_model

ort = pytest.importorskip("onnxruntime", reason="optional ONNX runtime (requirements-onnx.txt) not installed")


def run_onnx(path, x):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def fold_file(path):
    """fold_scalar_muls on the ONNX file at `path`, written back; the count."""
    model = read_model(path)
    count = fold_scalar_muls(model)
    write_model(path, model)
    return count


def readers_of(graph):
    readers = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            readers[name].append(node.op_type)
    return readers


class Scalings(ms.nn.Cell):
    """y = 1.5 x read by a conv, a Mul and a Mul into an Add: only the Mul by 0.25 reads into convs alone."""

    def __init__(self):
        super().__init__()
        self.conv_a = ms.nn.Conv2d(3, 4, 3, pad_mode="pad", padding=1, has_bias=True)
        self.conv_b = ms.nn.Conv2d(3, 4, 3, pad_mode="pad", padding=1, has_bias=True)

    def construct(self, x):
        y = x * 1.5
        return self.conv_a(y) + self.conv_b(y * 0.25) + (y * 2.0).sum(axis=1, keepdims=True)


def test_only_a_mul_that_feeds_convolutions_alone_is_folded_and_the_outputs_stay(tmp_path):
    network = Scalings()
    path = str(tmp_path / "scalings.onnx")
    ms.onnx.export(network, ms.Tensor(np.zeros((1, 3, 8, 8), np.float32)), file_name=path)
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    before = run_onnx(path, x)

    assert fold_file(path) == 1
    graph = read_model(path).graph
    scalars = scalar_constants(graph)
    kept = sorted(scalars[name] for node in graph.node if node.op_type == "Mul" for name in node.input
                  if name in scalars)
    assert kept == [1.5, 2.0]
    after = run_onnx(path, x)
    expected = network(ms.Tensor(x)).asnumpy()
    print(f"max |folded - unfolded| {np.abs(after - before).max():.2e}, |folded - MindSpore| "
          f"{np.abs(after - expected).max():.2e}")
    assert np.abs(after - before).max() <= 1e-5 * np.abs(before).max()  # the padding ring included
    assert np.abs(after - expected).max() <= 1e-5 * np.abs(expected).max()
    assert fold_file(path) == 0  # nothing left to fold


def test_nano_export_convolves_the_activations_directly_with_the_eval_logits(tmp_path, nano_weights):
    network = make_network("dm_nfnet_nano", nano_weights["raw"], NUM_CLASSES)
    path = export_network(create_deploy_network(network, "ONNX"), "ONNX", str(tmp_path / "nano"), 2, 64)
    graph = read_model(path).graph
    scalars, readers = scalar_constants(graph), readers_of(graph)
    before_convs = [node for node in graph.node if node.op_type == "Mul" and "Conv" in readers[node.output[0]]
                    and any(name in scalars for name in node.input)]
    # what stays: each GELU's own x * 0.5, and beta of the blocks whose shortcut pools before its convolution
    assert all("nfnet_gelu_half" in node.input or set(readers[node.output[0]]) == {"Conv", "AveragePool"}
               for node in before_convs), [(list(n.input), readers[n.output[0]]) for n in before_convs]
    assert sum("AveragePool" in readers[node.output[0]] for node in before_convs) == 3  # nano's stages 2-4

    # ONNX Runtime still fuses every GELU (gelu.py's pattern is intact) and feeds most straight to a conv
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    optimized = read_model(tmp_path / "optimized.onnx").graph
    gelus = [node for node in optimized.node if node.op_type == "Gelu"]
    optimized_readers = readers_of(optimized)
    assert len(gelus) == sum(node.op_type == "Erf" for node in graph.node) > 0
    assert sum(optimized_readers[node.output[0]] in (["Conv"], ["Conv", "Conv"]) for node in gelus) >= len(gelus) // 2

    x = np.random.default_rng(1).standard_normal((2, 3, 64, 64)).astype(np.float32)
    ours = session.run(None, {"x": x})[0]
    expected = network(ms.Tensor(x)).asnumpy()
    error = np.abs(ours - expected).max() / np.abs(expected).max()
    print(f"folded ONNX vs eval network, nano batch 2: {error:.2e}")
    assert error <= 5e-6
