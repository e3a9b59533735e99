"""2-D convolution with TensorFlow SAME padding: MindSpore's Conv2D (the plain form) or im2col + matmul.

MindSpore 2.10's CPU backend hands oneDNN plain NCHW tensors, and oneDNN then runs 3x3
convolutions in its slow "jit_uni_ncsp" implementation: measured here (AMD EPYC,
AVX-512, 2 threads) 1.2 s for a 32x64x16x16 3x3 conv that PyTorch runs in 2.7 ms, while
a matmul of the same size takes 8 ms in oneDNN's brgemm kernel. On CPU the convolution is
therefore written as im2col (k*k shifted slices of the zero-padded input) followed by one
(batched, per group) matmul; forward and backward are 10-20x faster and equal to the
native kernel within float32 rounding (tests/models/test_conv2d_same.py). The layers use
the native kernel (`Conv2dSame`); the CPU form (`Im2ColConv2dSame`) is swapped in by
fast_forms.py.
"""
from mindspore import nn, ops


def same_padding(size, kernel_size, stride):
    """(pad_before, pad_after, out_size) of TensorFlow SAME: out = ceil(size / stride)."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel_size - size, 0)
    return total // 2, total - total // 2, out


def _zero_pad(x, before, after, axis):
    if not before and not after:
        return x
    parts = []
    if before:
        shape = list(x.shape)
        shape[axis] = before
        parts.append(ops.zeros(tuple(shape), x.dtype))
    parts.append(x)
    if after:
        shape = list(x.shape)
        shape[axis] = after
        parts.append(ops.zeros(tuple(shape), x.dtype))
    return ops.concat(parts, axis)


def _shifted_windows(x, kh, kw, stride, oh, ow, reverse=False):
    """(a, b, kh*kw, oh, ow) -> stacked on axis 1: for each kernel tap (i, j), x[:, :, i::stride, j::stride]
    cropped to (oh, ow); the taps in reverse order with `reverse` (a kernel flipped in space).

    Plain Slice ops only: MindSpore 2.10's CPU StridedSlice copies at ~0.1 GB/s (148 ms for
    one 8x128x48x48 window against 8 ms for Slice). A stride s is handled by viewing the
    input as (a, b, H/s, s, W/s, s), so every tap becomes a contiguous-stride slice.
    """
    a, b, hp, wp = x.shape
    if stride > 1:
        hs = stride * max(-(-hp // stride), oh + (kh - 1) // stride)
        ws = stride * max(-(-wp // stride), ow + (kw - 1) // stride)
        x = _zero_pad(_zero_pad(x, 0, hs - hp, 2), 0, ws - wp, 3)
        x = x.reshape(a, b, hs // stride, stride, ws // stride, stride)
    cols = []
    for tap in range(kh * kw):
        i, j = divmod(kh * kw - 1 - tap if reverse else tap, kw)
        if stride == 1:
            cols.append(ops.slice(x, (0, 0, i, j), (a, b, oh, ow)))
        else:
            cols.append(ops.slice(x, (0, 0, i // stride, i % stride, j // stride, j % stride),
                                  (a, b, oh, 1, ow, 1)).reshape(a, b, oh, ow))
    return ops.stack(cols, 1)


def _im2col_matmul(x, weight, stride, groups, oh, ow, reverse_taps=False):
    """Convolution of an already padded NCHW x (VALID, `stride`) as k*k slices + one matmul.

    The batch is folded into the columns, (groups, c/groups*k*k, n*oh*ow), so the matmul
    batches over the groups only: with the batch as a matmul batch axis MindSpore broadcasts
    the weight to every sample first (measured: 0.5 s of BroadcastTo per F0 train step).
    Returns (output NCHW, the columns).
    """
    n, c = x.shape[0], x.shape[1]
    out_channels, cg, kh, kw = weight.shape
    og = out_channels // groups
    xt = x.transpose(1, 0, 2, 3)  # (c, n, H, W)
    if kh == 1 and kw == 1 and stride == 1:
        patches = xt.reshape(groups, cg, n * oh * ow)
    else:
        patches = _shifted_windows(xt, kh, kw, stride, oh, ow, reverse_taps)  # (c, k*k, n, oh, ow)
        patches = patches.reshape(groups, cg * kh * kw, n * oh * ow)
    y = ops.matmul(weight.reshape(groups, og, cg * kh * kw), patches)
    return y.reshape(out_channels, n, oh, ow).transpose(1, 0, 2, 3), patches


def conv2d_same_matmul(x, weight, stride=1, groups=1):
    """NCHW convolution with SAME padding as im2col + matmul (no bias)."""
    h, w = x.shape[2], x.shape[3]
    kh, kw = weight.shape[2], weight.shape[3]
    top, bottom, oh = same_padding(h, kh, stride)
    left, right, ow = same_padding(w, kw, stride)
    # zeros are concatenated rather than added with ops.pad: a functional pad in front of
    # stride-2 convs hung Graph-mode training here (measured with MindSpore 2.10)
    x = _zero_pad(_zero_pad(x, top, bottom, 2), left, right, 3)
    return _im2col_matmul(x, weight, stride, groups, oh, ow)[0]


def _dilate(x, stride, axis):
    """Insert stride - 1 zeros between the entries of x along axis 2 or 3."""
    if stride == 1:
        return x
    shape = x.shape
    z = ops.zeros(shape, x.dtype)
    y = ops.stack([x] + [z] * (stride - 1), axis + 1)
    merged = shape[:axis] + (shape[axis] * stride,) + shape[axis + 1:]
    length = (shape[axis] - 1) * stride + 1
    return ops.narrow(y.reshape(merged), axis, 0, length)


def _pad_or_crop(x, before, after, axis):
    """Zero-pad (positive) or crop (negative) x along axis by `before` / `after` entries."""
    if before < 0:
        x = ops.narrow(x, axis, -before, x.shape[axis] + before)
        before = 0
    if after < 0:
        x = ops.narrow(x, axis, 0, x.shape[axis] + after)
        after = 0
    return _zero_pad(x, before, after, axis)


class Conv2dSameMatmul(nn.Cell):
    """`conv2d_same_matmul` with a hand-written backward that keeps no im2col patches.

    Autodiff of the slices would save the k*k-times-larger patches for the backward and
    build one input-sized zero tensor per slice in it. Here the backward recomputes the
    patches once for the weight gradient (after the output gradient exists, so that the graph
    optimizer cannot reuse the forward's and keep them alive), and gets the input gradient as
    the standard transposed convolution: the output gradient dilated by the stride, padded, and
    correlated with the flipped, in/out-swapped kernel, through the same im2col + matmul
    (the flip as reversed taps: ReverseV2 on the weights cost 0.5 s per F0 step).
    """

    def __init__(self, stride=1, groups=1):
        super().__init__()
        self.stride = stride
        self.groups = groups
        self.matmul_nt = ops.BatchMatMul(transpose_b=True)

    def construct(self, x, weight):
        return conv2d_same_matmul(x, weight, self.stride, self.groups)

    def bprop(self, x, weight, out, dout):
        n, _, h, w = x.shape
        out_channels, cg, kh, kw = weight.shape
        groups, stride = self.groups, self.stride
        og = out_channels // groups
        top, bottom, oh = same_padding(h, kh, stride)
        left, right, ow = same_padding(w, kw, stride)
        # weight gradient: dy @ columns^T, the batch folded into the columns as in the forward.
        # x depends on dout so that MindSpore's common-subexpression pass cannot merge these
        # slices with the forward's, which would keep every layer's patches until the backward.
        x = ops.depend(x, dout)
        padded = _zero_pad(_zero_pad(x, top, bottom, 2), left, right, 3)
        _, patches = _im2col_matmul(padded, weight, stride, groups, oh, ow)
        dy = dout.transpose(1, 0, 2, 3).reshape(groups, og, n * oh * ow)
        dweight = self.matmul_nt(dy, patches).reshape(weight.shape)
        # input gradient: transposed convolution (in/out swapped, taps reversed = kernel flipped)
        swapped = weight.reshape(groups, og, cg, kh, kw).transpose(0, 2, 1, 3, 4).reshape(groups * cg, og, kh, kw)
        d = _dilate(_dilate(dout, stride, 2), stride, 3)
        d = _pad_or_crop(d, kh - 1 - top, h + top - ((oh - 1) * stride + 1), 2)
        d = _pad_or_crop(d, kw - 1 - left, w + left - ((ow - 1) * stride + 1), 3)
        dx, _ = _im2col_matmul(d, swapped, 1, groups, h, w, reverse_taps=True)
        return dx, dweight


class Conv2dSame(nn.Cell):
    """(x, weight, bias) -> the SAME-padded convolution, MindSpore's native Conv2D kernel (the plain form)."""

    impl = "native"  # what deploy/fold.py's FoldedConv2d calls this convolution

    def __init__(self, kernel_size, stride=1, groups=1):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride
        self.groups = groups

    def construct(self, x, weight, bias):
        return ops.conv2d(x, weight, bias, stride=self.stride, pad_mode="same", groups=self.groups)


class Im2ColConv2dSame(Conv2dSame):
    """Conv2dSame as im2col + matmul with the hand-written backward of Conv2dSameMatmul (CPU fast form)."""

    impl = "matmul"

    def __init__(self, kernel_size, stride=1, groups=1):
        super().__init__(kernel_size, stride, groups)
        self.matmul_conv = Conv2dSameMatmul(stride, groups)

    def construct(self, x, weight, bias):
        return ops.bias_add(self.matmul_conv(x, weight), bias)  # no broadcasting Add: see rowwise.py


def conv2d_same(x, weight, bias=None, stride=1, groups=1, impl="native"):
    """SAME-padded convolution (asymmetric for stride 2 on even inputs, as TensorFlow)."""
    if impl == "matmul":
        y = conv2d_same_matmul(x, weight, stride, groups)
        return y if bias is None else ops.bias_add(y, bias)  # no broadcasting Add: see rowwise.py
    return ops.conv2d(x, weight, bias, stride=stride, pad_mode="same", groups=groups)
