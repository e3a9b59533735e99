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
timed ``repeats`` times after a warm-up call; its GFLOP/s comes from the fastest call (a limit:
another process on the cores only slows a call down), the median's is recorded beside it.
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
    """{name: {shape, gflop, gflop_s, median_gflop_s, times_s}} per shape; ``make_run(g, m, k, n)`` -> callable."""
    from benchmarks.report import significant  # a fixed number of decimals rounds small rates to 0

    out = {}
    for name, groups, m, k, n in shapes:
        run = make_run(groups, m, k, n)
        run()  # warm-up: graph compile, allocation
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        work = gflop(groups, m, k, n)
        out[name] = {"shape": [groups, m, k, n], "gflop": significant(work),
                     "gflop_s": significant(work / min(times)),
                     "median_gflop_s": significant(work / statistics.median(times)), "times_s": times}
    return out


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
