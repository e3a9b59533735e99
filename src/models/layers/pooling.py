"""The transition blocks' shortcut pool."""
from mindspore import nn


class AvgPool2x2Same(nn.Cell):
    """2x2 average pooling, stride 2, TensorFlow SAME padding: nothing for an even size, one row or
    column after an odd one, and the mean over the valid pixels only. That equals PyTorch's
    AvgPool2d(2, 2, ceil_mode=True, count_include_pad=False), timm's, on even and odd sizes alike.

    A cell of its own so that a backend's fast form can take its place (fast_forms.py): MindSpore
    2.10's CPU AvgPool took 16 ms on F0's 8x256x64x64 shortcut input (Ice Lake, 2 threads), a pass
    that reads 33 MB.
    """

    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool2d(2, 2, pad_mode="same")

    def construct(self, x):
        return self.pool(x)
