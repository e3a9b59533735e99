"""Weight-standardization folding: the deployed graph convolves with precomputed weights.

In training every ScaledStdConv2d standardizes its weight on each call:

    w_hat = (w - mean(w)) / sqrt(var(w) + eps) * gain * gamma / sqrt(fan_in)

At inference w, gain and gamma are constants, so w_hat is too. Folding computes w_hat
once, with the layer's own `standardized_weight()` (the very arithmetic the network
runs), and replaces the layer by a plain convolution holding w_hat and the bias, with
the same TensorFlow-SAME padding, stride and groups. The exported graph then carries no
mean/variance reductions per call.

The convolution itself is src.models.layers.conv2d_same, in the layer's implementation
by default: "native" (one Conv2D operator: what Ascend, GPU and ONNX runtimes execute
best) or "matmul" (im2col + matmul, which MindSpore 2.10's CPU backend runs ~10x faster
than its native NCHW kernel). `conv_impl` overrides it for the whole network. "fused"
keeps the layer's own convolution cell, which must be the fused CPU kernel that
layers/fast_forms.py swapped in, and each NF block's fused main path: the exported graph
then calls the kernel library compiled on this machine and runs nowhere else.
"""
import copy

from mindspore import Parameter, Tensor, nn

from src.models.layers import ScaledStdConv2d, SqueezeExcite
from src.models.layers.conv2d_same import conv2d_same
from src.models.layers.replace import replace_cells

CONV_IMPLS = ("native", "matmul", "fused")


class FoldedConv2d(nn.Cell):
    """conv2d(x, w_hat) + bias with TensorFlow SAME padding: a ScaledStdConv2d after folding.

    Parameters `weight` (out, in/groups, k, k) holds w_hat and `bias` (out,) the conv
    bias; there is no gain any more (it is inside w_hat). With conv_impl "fused", `conv`
    is the fused CPU convolution cell ((x, weight, bias) -> y) the layer ran.
    """

    def __init__(self, weight, bias, stride=1, groups=1, conv_impl="native", conv=None):
        super().__init__()
        if conv_impl not in CONV_IMPLS:
            raise ValueError(f"conv_impl must be one of {CONV_IMPLS}, got {conv_impl!r}")
        if (conv_impl == "fused") != (conv is not None):
            raise ValueError("a convolution cell is given with conv_impl 'fused' and only then")
        self.weight = Parameter(Tensor(weight), name="weight")
        self.bias = Parameter(Tensor(bias), name="bias")
        self.stride = stride
        self.groups = groups
        self.conv_impl = conv_impl
        self.conv = conv

    def standardized_weight(self):
        """w_hat, as ScaledStdConv2d.standardized_weight(): the NF block's fused main path reads it."""
        return self.weight

    def construct(self, x):
        if self.conv is not None:
            return self.conv(x, self.weight, self.bias)
        return conv2d_same(x, self.weight, self.bias, self.stride, self.groups, self.conv_impl)

    def extend_repr(self):
        out, in_per_group, k, _ = self.weight.shape
        return (f"{in_per_group * self.groups}, {out}, kernel_size={k}, stride={self.stride}, "
                f"groups={self.groups}, impl={self.conv_impl}, folded")


def fold_conv(conv, conv_impl=None):
    """The FoldedConv2d equivalent to one ScaledStdConv2d (weights computed in float32)."""
    w_hat = conv.standardized_weight().asnumpy()
    bias = conv.bias.asnumpy().astype("float32")
    impl = conv_impl or conv.conv_impl
    if impl == "fused" and conv.conv_impl != "fused":
        raise ValueError(f"conv_impl 'fused' needs the fused CPU convolution (layers/fast_forms.py), "
                         f"the layer runs {type(conv.conv).__name__}")
    return FoldedConv2d(w_hat, bias, stride=conv.stride, groups=conv.groups, conv_impl=impl,
                        conv=conv.conv if impl == "fused" else None)


def fold_weight_standardization(network, conv_impl=None):
    """An eval-mode copy of `network` with every ScaledStdConv2d replaced by a FoldedConv2d.

    `conv_impl` ("native" / "matmul" / "fused") sets the convolution of every folded layer; None
    keeps each layer's own implementation. The NF blocks' fused main paths stay with "fused" only.
    The input network is left untouched (the copy is deep).
    Raises ValueError when there is nothing to fold, which means the caller passed
    something other than an NFNet.
    """
    folded = copy.deepcopy(network)
    count = replace_cells(folded, lambda cell: isinstance(cell, ScaledStdConv2d),
                          lambda _name, conv: fold_conv(conv, conv_impl))
    if count == 0:
        raise ValueError(f"{type(network).__name__} has no ScaledStdConv2d to fold")
    for _, cell in folded.cells_and_names():
        if getattr(cell, "fused_chain", None) is not None and any(conv.conv_impl != "fused"
                                                                   for conv in cell.chain_parts()[0]):
            cell.fused_chain = None  # the block's main path as one fused CPU kernel (layers/fast_forms.py)
        elif getattr(cell, "fused_chain", None) is not None:
            cell.fused_chain = cell.fused_chain.without_standardization()  # the folded weights are standardized
    folded.set_train(False)
    return folded


class ExciteDenseWeights(nn.Cell):
    """A squeeze-excite 1x1 convolution's parameters with its weight as the (out, in) matrix that the
    SE's dense layer reads (layers/squeeze_excite.py): a folded network's fc1 / fc2.

    MindSpore 2.10's CPU backend copies a (C, r, 1, 1) parameter into that view on every call: 24 copies
    of up to 4.7 MB in F0's forward, 13 ms of a batch-8 call at 256 px (Ice Lake, 2 threads, MindSpore's
    profiler). Not for ONNX: its batch-free SE (deploy/onnx_batch.py) convolves with the 4-D weight.
    """

    def __init__(self, fc):
        super().__init__()
        weight = fc.weight.asnumpy()
        self.weight = Parameter(Tensor(weight.reshape(weight.shape[0], -1)), name="weight")
        self.bias = Parameter(Tensor(fc.bias.asnumpy()), name="bias")


def flatten_excite_weights(network):
    """Replaces the fc1 / fc2 of every SqueezeExcite in `network` (in place) by ExciteDenseWeights;
    returns the count."""
    fcs = {id(fc) for _, se in network.cells_and_names() if isinstance(se, SqueezeExcite) for fc in (se.fc1, se.fc2)}
    return replace_cells(network, lambda cell: id(cell) in fcs, lambda _name, fc: ExciteDenseWeights(fc))


def fold_for_cpu_eval(network):
    """`network` (eval mode) with its weights standardized once, where it runs the CPU fast forms (every
    ScaledStdConv2d in im2col or the fused kernel: float32 on MindSpore's CPU backend); else `network` itself.

    The folded layers keep the layers' own convolution (and the blocks' fused main paths), so the logits
    are the same, bit for bit in Graph mode, without a weight-standardization pass over all weights per
    call (F0: 71.5 M weights, tens of ms of every batch); the squeeze-excite weights become the matrices
    their dense layers read (flatten_excite_weights). Other backends keep the unfolded network,
    whose convolutions may run in float16.
    """
    impls = {cell.conv_impl for _, cell in network.cells_and_names() if isinstance(cell, ScaledStdConv2d)}
    if not impls or "native" in impls:
        return network
    folded = fold_weight_standardization(network)
    flatten_excite_weights(folded)
    return folded
