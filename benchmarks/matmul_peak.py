"""The machine's float32 matmul limit, as each framework reaches it: GFLOP/s of a few matmul shapes.

A train step of an NFNet is almost all matmuls (on CPU the project runs every convolution as
im2col + one matmul batched over the groups: src/models/layers/conv2d_same.py), so the best
matmul rate a framework reaches on this machine bounds the step's GFLOP/s. The shapes:

  square      2048 x 2048 x 2048: a large GEMM, near the machine's peak.
  conv1x1     the F0 stage-3 1x1 convolution at the bench's train batch and size, as the
              project computes it: (768 x 1536) @ (1536 x batch*(size/16)^2).
  grouped3x3  the F0 stage-3 grouped 3x3 convolution (6 groups of 128 channels): im2col columns
              (6, 1152, batch*(size/16)^2), weights (6, 128, 1152), one batched matmul.

PyTorch: torch.matmul with torch.set_num_threads(threads). MindSpore: ops.matmul in a Graph-mode
cell (BatchMatMul for the 3-d shapes), the kernel the project's convolutions run. Each shape is
timed ``repeats`` times after a warm-up pass; its GFLOP/s comes from the fastest call (a limit:
another process on the cores only slows a call down), the median's is recorded beside it. In the
bench, the two peak workers run in the train rounds' turns, so both rates come from the minutes the
train steps ran in (this KVM guest's matmul limit measured 205-249 GFLOP/s in separate workers on
different runs).
"""
import statistics
import time


def matmul_shapes(batch, size, square=2048):
    """[(name, groups, m, k, n)]: (groups, m, k) @ (groups, k, n) for the bench's train batch and size."""
    columns = batch * max(1, size // 16) ** 2  # stage 3 runs at 1/16 of the input side
    return [("square", 1, square, square, square),
            ("conv1x1", 1, 768, 1536, columns),
            ("grouped3x3", 6, 128, 1152, columns)]


def gflop(groups, m, k, n):
    return 2 * groups * m * k * n / 1e9


def _rates(shapes, make_run, repeats):
    """{name: shape_rate} per shape; ``make_run(g, m, k, n)`` -> callable.

    One call is a pass over every shape; the first pass warms up (graph compile, allocation), then
    ``repeats`` timed passes. In the bench's train turns (benchmarks/turns.py) each pass takes a turn
    between the train steps, so the limit is measured in the same minutes as the steps it bounds.
    """
    from benchmarks.turns import timed_calls

    runs = [(name, [groups, m, k, n], make_run(groups, m, k, n)) for name, groups, m, k, n in shapes]
    times = {name: [] for name, *_ in runs}

    def one_pass():
        for name, _, run in runs:
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)

    timed_calls(one_pass, 1, repeats)
    return {name: shape_rate(shape, times[name][1:]) for name, shape, _ in runs}


def shape_rate(shape, times):
    """{shape, gflop, gflop_s (fastest call), median_gflop_s, times_s} of the timed calls of one shape."""
    from benchmarks.report import significant  # a fixed number of decimals rounds small rates to 0

    work = gflop(*shape)
    return {"shape": shape, "gflop": significant(work), "gflop_s": significant(work / min(times)),
            "median_gflop_s": significant(work / statistics.median(times)), "times_s": times}


def merge_peaks(results):
    """One peak_summary of several rounds' peak_summary results: every shape's timed calls together."""
    shapes = results[0]["shapes"]
    times = {name: [t for result in results for t in result["shapes"][name]["times_s"]] for name in shapes}
    return peak_summary({name: shape_rate(shapes[name]["shape"], times[name]) for name in shapes})


def peak_summary(rates):
    """{best_gflop_s, best_shape, shapes}: the fastest shape's rate is the framework's peak."""
    best = max(rates, key=lambda name: rates[name]["gflop_s"])
    return {"best_gflop_s": rates[best]["gflop_s"], "best_shape": best, "shapes": rates}


def torch_rates(shapes, threads, repeats=7):
    import torch

    torch.set_num_threads(threads)
    generator = torch.Generator().manual_seed(0)

    def make_run(groups, m, k, n):
        a = torch.randn(groups, m, k, generator=generator)
        b = torch.randn(groups, k, n, generator=generator)
        if groups == 1:
            a, b = a[0], b[0]
        return lambda: torch.matmul(a, b)

    with torch.no_grad():
        return peak_summary(_rates(shapes, make_run, repeats))


def mindspore_rates(shapes, repeats=7):
    """ops.matmul in Graph mode (the caller sets the device, mode and threads: bench.mindspore_setup)."""
    import mindspore as ms
    import numpy as np
    from mindspore import nn, ops

    class MatMul(nn.Cell):
        def construct(self, a, b):
            return ops.matmul(a, b)

    rng = np.random.default_rng(0)
    cell = MatMul()

    def make_run(groups, m, k, n):
        shape_a, shape_b = ((groups, m, k), (groups, k, n)) if groups > 1 else ((m, k), (k, n))
        a = ms.Tensor(rng.standard_normal(shape_a, dtype=np.float32))
        b = ms.Tensor(rng.standard_normal(shape_b, dtype=np.float32))
        # asnumpy() waits for the result; its copy is at most 16 MB (~2 ms against ~100 ms of 2048^3)
        return lambda: cell(a, b).asnumpy()

    return peak_summary(_rates(shapes, make_run, repeats))
