"""Normalizer-Free ResNets, NFNet-F family (Brock et al. 2021, arXiv 2102.06171).

The network follows DeepMind's nfnets/nfnet.py and is laid out like timm's
dm_nfnet_* models (same module names and parameter shapes), so a timm checkpoint
loads 1:1. Every architectural knob lives in `NfCfg`; a variant's widths and depths
are its row of the variant table, src/variants.py.
"""
import math
from dataclasses import dataclass
from functools import partial
from typing import Tuple

import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common.initializer import Normal, Zero

from src.variants import VARIANTS

from .layers import AvgPool2x2Same, DropPath, Dropout, GammaAct, ScaledStdConv2d, SqueezeExcite
from .layers.activations import PreActivation
from .layers.rowwise import mean_hw
from .registry import register_model


@dataclass(frozen=True)
class NfCfg:
    """Architecture of one NFNet variant (DeepMind's defaults for the F family)."""

    depths: Tuple[int, ...]
    channels: Tuple[int, ...]
    stem_chs: int = 128
    group_size: int = 128
    bottle_ratio: float = 0.5
    feat_mult: float = 2.0
    alpha: float = 0.2
    attn_gain: float = 2.0
    se_ratio: float = 0.5
    act_layer: str = "gelu"
    std_conv_eps: float = 1e-5  # timm's; ws_form "deepmind" uses DeepMind's 1e-4 (layers/std_conv.py)


def make_divisible(v, divisor=8):
    """Channel rounding used by timm for the SE width (round to nearest, never below divisor)."""
    return max(divisor, int(v + divisor / 2) // divisor * divisor)


# The nano demo net is also narrower inside: a smaller stem and groups of 16 channels.
_NANO = dict(stem_chs=32, group_size=16)

MODEL_CFGS = {
    name: NfCfg(depths=v.depths, channels=v.widths, **(_NANO if name == "dm_nfnet_nano" else {}))
    for name, v in VARIANTS.items()
}


def drop_path_rates(drop_path_rate, depths, mode="deepmind"):
    """Per-block stochastic-depth rates, flattened over all blocks.

    deepmind: rate * i / N for block i = 0..N-1 (nfnets/nfnet.py).
    timm: linspace(0, rate, N).
    """
    n = sum(depths)
    if mode == "deepmind":
        return [drop_path_rate * i / n for i in range(n)]
    if mode == "timm":
        return np.linspace(0.0, drop_path_rate, n).tolist()
    raise ValueError(f"unknown drop_path_mode {mode!r}; allowed: ['deepmind', 'timm']")


class DownsampleAvg(nn.Cell):
    """Shortcut when a block changes width or stride: conv1x1(avgpool2x2s2(x)).

    The pool exists only for stride 2 (layers/pooling.py: timm's AvgPool2d(2, 2, ceil_mode=True,
    count_include_pad=False)).
    """

    def __init__(self, in_chs, out_chs, stride, conv_layer):
        super().__init__()
        self.pool = AvgPool2x2Same() if stride > 1 else nn.Identity()
        self.conv = conv_layer(in_chs, out_chs, 1)

    def construct(self, x):
        return self.conv(self.pool(x))


class NormFreeBlock(nn.Cell):
    """NF bottleneck block (DeepMind's NFBlock with extra conv2b):

        out = act(x) * beta
        shortcut = x, or downsample(out) when width or stride change
        out = conv3(act(conv2b(act(conv2(act(conv1(out)))))))
        out = attn_gain * SE(out)
        out = drop_path(out) * skipinit_gain
        return out * alpha + shortcut

    attn_gain, the stochastic-depth mask, skipinit_gain and alpha each scale whole samples or the
    whole tensor, so they are multiplied into the SE gate, an (N, C) tensor: one pass over the
    branch's output instead of five, forward and backward, and skipinit_gain's gradient is a sum
    over the gate rather than over the activation (F0's CPU train step at batch 8, 192x192:
    2.19-2.27 -> 2.02-2.09 s, peak memory -150 MB).
    """

    def __init__(self, in_chs, out_chs, stride, alpha, beta, cfg, conv_layer, act_layer, drop_path_rate,
                 drop_path_mode="deepmind"):
        super().__init__()
        mid_chs = make_divisible(out_chs * cfg.bottle_ratio, 8)
        groups = mid_chs // cfg.group_size
        mid_chs = cfg.group_size * groups
        self.alpha = alpha
        self.beta = beta
        self.attn_gain = cfg.attn_gain
        self.downsample = None
        if in_chs != out_chs or stride != 1:
            self.downsample = DownsampleAvg(in_chs, out_chs, stride, conv_layer)
        self.act1 = PreActivation(act_layer(scale=beta), self.downsample is None)  # act(x) * beta, shortcut input
        self.conv1 = conv_layer(in_chs, mid_chs, 1)
        self.act2 = act_layer()
        self.conv2 = conv_layer(mid_chs, mid_chs, 3, stride=stride, groups=groups)
        self.act2b = act_layer()
        self.conv2b = conv_layer(mid_chs, mid_chs, 3, groups=groups)
        self.act3 = act_layer()
        self.conv3 = conv_layer(mid_chs, out_chs, 1)
        self.attn_last = SqueezeExcite(out_chs, make_divisible(out_chs * cfg.se_ratio, 8))
        self.drop_path = DropPath(drop_path_rate, scale_by_keep=drop_path_mode == "timm")
        self.skipinit_gain = Parameter(Tensor(0.0), name="skipinit_gain")
        # conv1 ... conv3 with their activations as one kernel (forward and backward), where a backend
        # has one (layers/fast_forms.py)
        self.fused_chain = None

    def chain_parts(self):
        """The main path's convolutions and the activations between them, in order."""
        return (self.conv1, self.conv2, self.conv2b, self.conv3), (self.act2, self.act2b, self.act3)

    def construct(self, x):
        out, shortcut = self.act1(x)  # act(x) * beta (beta folded into its gamma), and x or act(x) * beta
        if self.downsample is not None:
            shortcut = self.downsample(shortcut)
        if self.fused_chain is not None and self.training and self.fused_chain.standardizes:
            out = self.fused_chain(out, self.conv1.weight, self.conv1.gain, self.conv1.bias,
                                   self.conv2.weight, self.conv2.gain, self.conv2.bias,
                                   self.conv2b.weight, self.conv2b.gain, self.conv2b.bias,
                                   self.conv3.weight, self.conv3.gain, self.conv3.bias)
        elif self.fused_chain is not None:
            out = self.fused_chain(out, self.conv1.standardized_weight(), self.conv1.bias,
                                   self.conv2.standardized_weight(), self.conv2.bias,
                                   self.conv2b.standardized_weight(), self.conv2b.bias,
                                   self.conv3.standardized_weight(), self.conv3.bias)
        else:
            out = self.conv1(out)
            out = self.conv2(self.act2(out))
            out = self.conv2b(self.act2b(out))
            out = self.conv3(self.act3(out))
        scale = self.skipinit_gain.astype(out.dtype) * (self.attn_gain * self.alpha)
        return self.attn_last(out, self.drop_path.mask_scale(scale, out.shape[0]), shortcut)


class Stem(nn.Cell):
    """DeepMind's 'deep_quad' stem: four 3x3 convs (strides 2, 1, 1, 2) with an activation between each, none
    after the last (timm's names: conv1, act2, conv2, act3, conv3, act4, conv4). An NF block's main path has the
    same shape, so where a backend has that path as one kernel the stem runs through it too (`fused_chain`,
    layers/fast_forms.py)."""

    def __init__(self, in_chs, out_chs, conv_layer, act_layer):
        super().__init__()
        self.conv1 = conv_layer(in_chs, out_chs // 8, 3, stride=2)
        self.act2 = act_layer()
        self.conv2 = conv_layer(out_chs // 8, out_chs // 4, 3)
        self.act3 = act_layer()
        self.conv3 = conv_layer(out_chs // 4, out_chs // 2, 3)
        self.act4 = act_layer()
        self.conv4 = conv_layer(out_chs // 2, out_chs, 3, stride=2)
        self.fused_chain = None

    def chain_parts(self):
        """The convolutions and the activations between them, in order."""
        return (self.conv1, self.conv2, self.conv3, self.conv4), (self.act2, self.act3, self.act4)

    def construct(self, x):
        if self.fused_chain is not None and self.training and self.fused_chain.standardizes:
            return self.fused_chain(x, self.conv1.weight, self.conv1.gain, self.conv1.bias,
                                    self.conv2.weight, self.conv2.gain, self.conv2.bias,
                                    self.conv3.weight, self.conv3.gain, self.conv3.bias,
                                    self.conv4.weight, self.conv4.gain, self.conv4.bias)
        if self.fused_chain is not None:
            return self.fused_chain(x, self.conv1.standardized_weight(), self.conv1.bias,
                                    self.conv2.standardized_weight(), self.conv2.bias,
                                    self.conv3.standardized_weight(), self.conv3.bias,
                                    self.conv4.standardized_weight(), self.conv4.bias)
        x = self.conv2(self.act2(self.conv1(x)))
        return self.conv4(self.act4(self.conv3(self.act3(x))))


class ClassifierHead(nn.Cell):
    """Global average pool, dropout, linear classifier (timm's names: head.fc)."""

    def __init__(self, in_chs, num_classes, drop_rate=0.0):
        super().__init__()
        self.drop = Dropout(drop_rate) if drop_rate > 0 else nn.Identity()  # reproducible on CPU (layers/drop_path.py)
        self.fc = nn.Dense(in_chs, num_classes, weight_init=Normal(0.01), bias_init=Zero())

    def construct(self, x):
        x = mean_hw(x)
        return self.fc(self.drop(x))


class NormFreeNet(nn.Cell):
    """NFNet: stem, four stages of NormFreeBlocks, final 1x1 conv, classifier head.

    ws_form ("timm" / "deepmind") and gelu_form ("exact" / "tanh") choose the arithmetic of the
    weight standardization and the GELU (layers/std_conv.py, layers/activations.py): timm's by
    default, DeepMind's for DeepMind's own weights and recipe. Parameters are the same in both.

    beta bookkeeping (DeepMind): expected_std starts at 1; block beta = 1/expected_std;
    after each block expected_std^2 += alpha^2, reset to 1 + alpha^2 after a stage's
    first block (whose shortcut carries the activations at unit variance).
    """

    def __init__(self, cfg, num_classes=1000, in_chans=3, drop_rate=0.0, drop_path_rate=0.0,
                 drop_path_mode="deepmind", ws_form="timm", gelu_form="exact"):
        super().__init__()
        self.cfg = cfg
        self.num_classes = num_classes
        self.ws_form = ws_form
        self.gelu_form = gelu_form
        conv_layer = partial(ScaledStdConv2d, ws_form=ws_form, eps=cfg.std_conv_eps if ws_form == "timm" else None)
        act_layer = partial(GammaAct, cfg.act_layer, gelu_form=gelu_form)
        self.stem = Stem(in_chans, cfg.stem_chs, conv_layer, act_layer)
        rates = drop_path_rates(drop_path_rate, cfg.depths, drop_path_mode)
        prev_chs, expected_var, block_idx = cfg.stem_chs, 1.0, 0
        stages = []
        for stage_idx, (depth, out_chs) in enumerate(zip(cfg.depths, cfg.channels)):
            blocks = []
            for i in range(depth):
                blocks.append(NormFreeBlock(
                    prev_chs, out_chs, stride=(1 if stage_idx == 0 else 2) if i == 0 else 1,
                    alpha=cfg.alpha, beta=1.0 / math.sqrt(expected_var), cfg=cfg,
                    conv_layer=conv_layer, act_layer=act_layer,
                    drop_path_rate=rates[block_idx], drop_path_mode=drop_path_mode))
                if i == 0:
                    expected_var = 1.0
                expected_var += cfg.alpha ** 2
                prev_chs = out_chs
                block_idx += 1
            stages.append(nn.SequentialCell(blocks))
        self.stages = nn.SequentialCell(stages)
        self.num_features = int(cfg.channels[-1] * cfg.feat_mult)
        self.final_conv = conv_layer(prev_chs, self.num_features, 1)
        self.final_act = act_layer()
        self.head = ClassifierHead(self.num_features, num_classes, drop_rate)

    def forward_features(self, x):
        x = self.stem(x)
        x = self.stages(x)
        return self.final_act(self.final_conv(x))

    def construct(self, x):
        return self.head(self.forward_features(x))


def _create(name, **kwargs):
    return NormFreeNet(MODEL_CFGS[name], **kwargs)


@register_model
def dm_nfnet_f0(**kwargs):
    """NFNet-F0, DeepMind configuration (71.5M parameters, 192 train / 256 test)."""
    return _create("dm_nfnet_f0", **kwargs)


@register_model
def dm_nfnet_f1(**kwargs):
    """NFNet-F1 (132.6M parameters, 224 / 320)."""
    return _create("dm_nfnet_f1", **kwargs)


@register_model
def dm_nfnet_f2(**kwargs):
    """NFNet-F2 (193.8M parameters, 256 / 352)."""
    return _create("dm_nfnet_f2", **kwargs)


@register_model
def dm_nfnet_f3(**kwargs):
    """NFNet-F3 (254.9M parameters, 320 / 416)."""
    return _create("dm_nfnet_f3", **kwargs)


@register_model
def dm_nfnet_f4(**kwargs):
    """NFNet-F4 (316.1M parameters, 384 / 512)."""
    return _create("dm_nfnet_f4", **kwargs)


@register_model
def dm_nfnet_f5(**kwargs):
    """NFNet-F5 (377.2M parameters, 416 / 544)."""
    return _create("dm_nfnet_f5", **kwargs)


@register_model
def dm_nfnet_f6(**kwargs):
    """NFNet-F6 (438.4M parameters, 448 / 576)."""
    return _create("dm_nfnet_f6", **kwargs)


@register_model
def dm_nfnet_nano(**kwargs):
    """A ~0.9M-parameter NFNet with every F-family mechanism, for CPU demos and tests (64x64 input)."""
    return _create("dm_nfnet_nano", **kwargs)
