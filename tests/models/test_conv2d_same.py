"""The CPU convolutions (im2col + matmul as operators and as fused kernels, oneDNN's through the
fused library) equal MindSpore's native SAME convolution and TF SAME."""
import os
import subprocess
import sys
import textwrap

import mindspore as ms
import numpy as np
import pytest
from mindspore import ops

from src.models.layers import cpu_kernels
from src.models.layers.conv2d_same import Conv2dSameMatmul, conv2d_same, same_padding

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("size, k, stride, expected", [
    (16, 3, 2, (0, 1, 8)), (17, 3, 2, (1, 1, 9)), (16, 3, 1, (1, 1, 16)), (16, 1, 1, (0, 0, 16)), (15, 1, 2, (0, 0, 8)),
])
def test_same_padding_is_tensorflow_same(size, k, stride, expected):
    assert same_padding(size, k, stride) == expected


@pytest.mark.parametrize("n, c, h, w, o, k, stride, groups", [
    (2, 8, 16, 16, 8, 3, 1, 1), (2, 8, 16, 16, 8, 3, 2, 1), (2, 8, 17, 15, 8, 3, 2, 2),
    (3, 16, 9, 9, 32, 3, 2, 4), (2, 6, 8, 8, 12, 1, 1, 1), (2, 6, 7, 7, 12, 1, 2, 3), (1, 4, 5, 6, 4, 3, 1, 4),
    # oneDNN's blocked layouts (16 channels a block on AVX-512) and the stem's 3 input channels
    (2, 32, 12, 12, 64, 3, 2, 2), (2, 64, 6, 6, 128, 1, 1, 1), (2, 3, 24, 24, 16, 3, 2, 1),
])
def test_matmul_convolution_equals_native_kernel_forward_and_backward(n, c, h, w, o, k, stride, groups):
    rng = np.random.default_rng(0)
    x = ms.Tensor(rng.standard_normal((n, c, h, w)).astype(np.float32))
    wt = ms.Tensor(rng.standard_normal((o, c // groups, k, k)).astype(np.float32))
    b = ms.Tensor(rng.standard_normal((o,)).astype(np.float32))
    cot = ms.Tensor(rng.standard_normal((n, o, -(-h // stride), -(-w // stride))).astype(np.float32))
    cell = Conv2dSameMatmul(stride, groups)  # the training layer: im2col with a hand-written backward
    convs = {impl: (lambda xx, ww, bb, impl=impl: conv2d_same(xx, ww, bb, stride, groups, impl))
             for impl in ("native", "matmul")}
    convs["cell"] = lambda xx, ww, bb: ops.bias_add(cell(xx, ww), bb)
    if cpu_kernels.available():  # the training layer with the fused CPU kernels: oneDNN's and im2col
        convs["fused"] = cpu_kernels.FusedConv2dSame(k, stride, groups)
        convs["fused_im2col"] = cpu_kernels.FusedConv2dSame(k, stride, groups, onednn=False)
    results = {}
    for impl, conv in convs.items():
        def loss(xx, ww, bb, conv=conv):
            return (conv(xx, ww, bb) * cot).sum()

        y = conv(x, wt, b).asnumpy()
        grads = ms.grad(loss, grad_position=(0, 1, 2))(x, wt, b)
        results[impl] = [y] + [g.asnumpy() for g in grads]
    for impl in set(results) - {"native"}:  # measured: <= 3.3e-7 relative
        for ours, ref in zip(results[impl], results["native"]):
            assert ours.shape == ref.shape
            assert np.abs(ours - ref).max() <= 1e-5 * np.abs(ref).max()


def test_stride_two_same_padding_is_asymmetric_like_tensorflow():
    # out[0, 0] of a 3x3 stride-2 conv on an even input covers rows/cols 0..2 (no padding before)
    x = np.arange(36, dtype=np.float32).reshape(1, 1, 6, 6)
    w = np.ones((1, 1, 3, 3), np.float32)
    y = conv2d_same(ms.Tensor(x), ms.Tensor(w), None, 2, 1, "matmul").asnumpy()
    assert y[0, 0, 0, 0] == x[0, 0, :3, :3].sum()
    assert y[0, 0, -1, -1] == x[0, 0, 4:, 4:].sum()  # one zero row/col after


@pytest.mark.timeout(300)
def test_graph_mode_training_through_stride_two_convs_runs_past_six_steps():
    """A functional pad before stride-2 convs hung Graph-mode training at step 6; concat does not."""
    from src.models import create_model

    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        net = create_model("dm_nfnet_nano", num_classes=10, fast_forms=True)
        opt = ms.nn.Momentum(net.trainable_params(), 0.01, 0.9)
        step = ms.nn.TrainOneStepCell(ms.nn.WithLossCell(net, ms.nn.CrossEntropyLoss()), opt)
        step.set_train()
        rng = np.random.default_rng(0)
        x = ms.Tensor(rng.standard_normal((4, 3, 64, 64)).astype(np.float32))
        y = ms.Tensor(rng.integers(0, 10, 4).astype(np.int32))
        losses = [float(step(x, y).asnumpy()) for _ in range(8)]
        assert np.isfinite(losses).all()
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def test_convolutions_run_through_mindspores_onednn(fused_kernels):
    """MindSpore's wheel ships oneDNN 3.x with the threadpool runtime: the fused library links it."""
    if not cpu_kernels.dnnl_available():
        pytest.skip("the fused library was built without oneDNN (mindspore/lib/libdnnl.so.3 missing or not 3.x)")
    conv = cpu_kernels.FusedConv2dSame(3, 2, 2)
    assert conv.use_dnnl and not cpu_kernels.FusedConv2dSame(3, 2, 2, onednn=False).use_dnnl


VERBOSE_STEP = textwrap.dedent("""
    import numpy as np
    import mindspore as ms
    ms.set_device("CPU")
    from src.models.layers import cpu_kernels
    rng = np.random.default_rng(0)
    for c, o, k, stride, groups in ((64, 128, 3, 2, 1), (128, 128, 3, 1, 2), (128, 256, 1, 1, 1)):
        conv = cpu_kernels.FusedConv2dSame(k, stride, groups)
        x = ms.Tensor(rng.standard_normal((2, c, 12, 12)).astype(np.float32))
        w = ms.Tensor(rng.standard_normal((o, c // groups, k, k)).astype(np.float32))
        b = ms.Tensor(np.zeros(o, np.float32))
        ms.grad(lambda xx, ww, bb: conv(xx, ww, bb).sum(), grad_position=(0, 1, 2))(x, w, b)
""")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("isa_limit", [None, "AVX2"])
def test_onednn_runs_its_direct_kernels_on_the_layouts_chosen_for_them(fused_kernels, tmp_path, isa_limit):
    """On NCHW tensors oneDNN 3.10 wraps forward and backward-data in internal layout copies
    (`jit_uni_ncsp`) and runs backward-weights as im2col + GEMM (`x64:gemm`: 136-182 GFLOP/s on
    F0's shapes here, against 206-220 for its direct AVX-512 kernel); the kernels hand every
    primitive a layout of its own kernels: with AVX-512 NHWC to a stride-1 3x3 convolution, oneDNN's
    own choice to the rest (blocked for 1x1; cpu_kernels.cc, dnnl_activation_tag). Read from oneDNN's
    own log (ONEDNN_VERBOSE), with and without AVX2 as oneDNN's ISA limit."""
    if not cpu_kernels.dnnl_available():
        pytest.skip("the fused library was built without oneDNN")
    if " avx2" not in open("/proc/cpuinfo", encoding="utf-8").read():
        pytest.skip("oneDNN's direct f32 kernels want AVX2 or newer")
    script = tmp_path / "convs.py"
    script.write_text(VERBOSE_STEP)
    env = dict(os.environ, PYTHONPATH=ROOT, ONEDNN_VERBOSE="1")
    if isa_limit:
        env["ONEDNN_MAX_CPU_ISA"] = isa_limit
    result = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=100,
                            check=False, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    runs = [line.split(",") for line in lines if line.startswith("onednn_verbose,v1,primitive,exec,cpu,convolution")]
    implementations = {(fields[7], fields[6]) for fields in runs}  # (propagation kind, implementation)
    assert {kind for kind, _ in implementations} == {"forward_training", "backward_data", "backward_weights"}
    slow = {(kind, impl) for kind, impl in implementations if impl.startswith(("x64:gemm", "ref", "jit_uni_ncsp"))}
    assert not slow, slow
    avx512 = any(line.startswith("onednn_verbose,v1,info,cpu,isa:") and "AVX-512" in line for line in lines)
    assert not (avx512 and isa_limit)
    for fields in runs:
        kind, source_layout, geometry = fields[7], fields[8].split()[0].split(":")[4], fields[-2]
        if "kh3sh1" in geometry and avx512:
            assert source_layout == "acdb", (kind, geometry, source_layout)
        elif "kh1" in geometry:  # oneDNN's free choice
            assert source_layout in ("aBcd16b", "aBcd8b"), (kind, geometry, source_layout)
