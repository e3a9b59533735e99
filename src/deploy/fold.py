"""Weight-standardization folding: the deployed graph convolves with precomputed weights.

In training every ScaledStdConv2d standardizes its weight on each call:

    w_hat = (w - mean(w)) / sqrt(var(w) + eps) * gain * gamma / sqrt(fan_in)

At inference w, gain and gamma are constants, so w_hat is too. Folding computes w_hat
once, with the layer's own `standardized_weight()` (the very arithmetic the network
runs), and replaces the layer by a plain convolution holding w_hat and the bias, with
the same TensorFlow-SAME padding, stride and groups. The exported graph then carries no
mean/variance reductions per call, and a device runs an ordinary Conv2D.
"""
import copy

from mindspore import Parameter, Tensor, nn, ops

from src.models.layers import ScaledStdConv2d

from .cells import replace_cells


class FoldedConv2d(nn.Cell):
    """conv2d(x, w_hat) + bias with pad_mode='same': a ScaledStdConv2d after folding.

    Parameters `weight` (out, in/groups, k, k) holds w_hat and `bias` (out,) the conv
    bias; there is no gain any more (it is inside w_hat).
    """

    def __init__(self, weight, bias, stride=1, groups=1):
        super().__init__()
        self.weight = Parameter(Tensor(weight), name="weight")
        self.bias = Parameter(Tensor(bias), name="bias")
        self.stride = stride
        self.groups = groups

    def construct(self, x):
        return ops.conv2d(x, self.weight, self.bias, stride=self.stride, pad_mode="same",
                          groups=self.groups)

    def extend_repr(self):
        out, in_per_group, k, _ = self.weight.shape
        return (f"{in_per_group * self.groups}, {out}, kernel_size={k}, stride={self.stride}, "
                f"groups={self.groups}, folded")


def fold_conv(conv):
    """The FoldedConv2d equivalent to one ScaledStdConv2d (weights computed in float32)."""
    w_hat = conv.standardized_weight().asnumpy()
    bias = conv.bias.asnumpy().astype("float32")
    return FoldedConv2d(w_hat, bias, stride=conv.stride, groups=conv.groups)


def fold_weight_standardization(network):
    """An eval-mode copy of `network` with every ScaledStdConv2d replaced by a FoldedConv2d.

    The input network is left untouched (the copy is deep). Returns the folded network;
    raises ValueError when there is nothing to fold, which means the caller passed
    something other than an NFNet.
    """
    folded = copy.deepcopy(network)
    count = replace_cells(folded, lambda cell: isinstance(cell, ScaledStdConv2d),
                          lambda _name, conv: fold_conv(conv))
    if count == 0:
        raise ValueError(f"{type(network).__name__} has no ScaledStdConv2d to fold")
    folded.set_train(False)
    return folded
