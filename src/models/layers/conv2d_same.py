"""2-D convolution with TensorFlow SAME padding, as oneDNN's kernel or as im2col + matmul.

MindSpore 2.10's CPU backend hands oneDNN plain NCHW tensors, and oneDNN then runs 3x3
convolutions in its slow "jit_uni_ncsp" implementation: measured here (AMD EPYC,
AVX-512, 2 threads) 1.2 s for a 32x64x16x16 3x3 conv that PyTorch runs in 2.7 ms, while
a matmul of the same size takes 8 ms in oneDNN's brgemm kernel. On CPU the convolution is
therefore written as im2col (k*k shifted slices of the zero-padded input) followed by one
(batched, per group) matmul; forward and backward are 10-20x faster and equal to the
native kernel within float32 rounding (tests/models/test_conv2d_same.py). Other devices
use the native kernel (pad_mode='same').
"""
import mindspore as ms
from mindspore import ops


def same_padding(size, kernel_size, stride):
    """(pad_before, pad_after, out_size) of TensorFlow SAME: out = ceil(size / stride)."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel_size - size, 0)
    return total // 2, total - total // 2, out


def default_conv_impl():
    """"matmul" on the CPU backend, "native" elsewhere."""
    return "matmul" if ms.get_context("device_target") == "CPU" else "native"


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


def conv2d_same_matmul(x, weight, stride=1, groups=1):
    """NCHW convolution with SAME padding as im2col + matmul (no bias)."""
    n, c, h, w = x.shape
    out_channels, _, kh, kw = weight.shape
    cg, og = c // groups, out_channels // groups
    if kh == 1 and kw == 1 and stride == 1:
        y = ops.matmul(weight.reshape(groups, og, cg), x.reshape(n, groups, cg, h * w))
        return y.reshape(n, out_channels, h, w)
    top, bottom, oh = same_padding(h, kh, stride)
    left, right, ow = same_padding(w, kw, stride)
    # zeros are concatenated rather than added with ops.pad: a functional pad in front of
    # stride-2 convs hung Graph-mode training here (measured with MindSpore 2.10)
    x = _zero_pad(_zero_pad(x, top, bottom, 2), left, right, 3)
    # ops.strided_slice, not x[..., a:b:2]: the latter's PyNative backward segfaults in 2.10
    cols = []
    for i in range(kh):
        for j in range(kw):
            cols.append(ops.strided_slice(x, (0, 0, i, j), (n, c, i + (oh - 1) * stride + 1, j + (ow - 1) * stride + 1),
                                          (1, 1, stride, stride)))
    patches = ops.stack(cols, 2).reshape(n, groups, cg * kh * kw, oh * ow)  # (c, kh, kw) order
    y = ops.matmul(weight.reshape(groups, og, cg * kh * kw), patches)
    return y.reshape(n, out_channels, oh, ow)


def conv2d_same(x, weight, bias=None, stride=1, groups=1, impl="native"):
    """SAME-padded convolution (asymmetric for stride 2 on even inputs, as TensorFlow)."""
    if impl == "matmul":
        y = conv2d_same_matmul(x, weight, stride, groups)
        return y if bias is None else y + bias.reshape(1, -1, 1, 1)
    return ops.conv2d(x, weight, bias, stride=stride, pad_mode="same", groups=groups)
