"""Mixed precision for NFNet through mindspore.amp, with the numerically sensitive parts in float32.

Levels (MindSpore's names):
    O0  float32 everywhere.
    O1  only the ops on MindSpore's white list (convolutions, matmuls) run in low precision
        (``auto_mixed_precision(..., "O1")``, which rewrites the network's code and leaves
        the generated source in ./rewritten_network/).
    O2  everything in low precision except the keep-float32 cells below and MindSpore's own
        black list (normalization layers; NFNet has none). This is the recipe's level.
    O3  MindSpore casts every cell; here it is applied like O2, so the keep-float32 cells
        still run in float32. For NFNet, which has no normalization layers, O2 and O3 are
        the same network.

Kept in float32 at every level:
    - the squeeze-excite gate (`SqueezeExcite`: its mean, two 1x1 convs and sigmoid);
    - weight standardization (`WeightStandardization`, and so its fused CPU form, a
      subclass): a cell of its own, computed in float32 from the float32 weight; its output is rounded to the
      low dtype for the convolution (tests/trainers/amp_cases.py checks the values);
    - the network output: O2/O3 cast the logits back to float32, and the losses
      (src/trainers/loss.py) cast to float32 before the log-softmax, so the softmax and
      the loss are float32.
The master weights stay float32 Parameters; gradients arrive in float32.

Low-precision dtype: float16 by default on GPU and Ascend (the MindSpore model zoo's O2
setting, used with a loss scale); bfloat16 can be chosen where the hardware supports it
(Ascend 910B; DeepMind trained in bfloat16 on TPU) and needs no loss scale.

CPU: training runs O0. A requested O1-O3 falls back to O0 with a printed notice. MindSpore
2.10 does run float16 convolutions on CPU, forward and backward, but measured on
dm_nfnet_nano (batch 8, 64x64, Graph mode, 2 shared cores) an O2 train step took 0.6 s
against 0.5-0.7 s in float32: no gain, only float16 rounding. `apply_mixed_precision`
applies a level without the device check (used by the tests to inspect an O2 network).
"""
import mindspore
from mindspore import amp

from src.models.layers import SqueezeExcite
from src.models.layers.std_conv import WeightStandardization

__all__ = ["prepare_amp", "cpu_amp_notice", "KEEP_FP32_CELLS", "AMP_LEVELS"]

AMP_LEVELS = ("O0", "O1", "O2", "O3")

# Cell types that always run in float32, with their subclasses (see the module docstring for the
# rest). The CPU fast forms (src/models/layers/fast_forms.py) need no entry: they are given to
# float32 networks only.
KEEP_FP32_CELLS = (SqueezeExcite, WeightStandardization)

_DTYPES = {"float16": mindspore.float16, "bfloat16": mindspore.bfloat16}


def prepare_amp(network, amp_level="O0", device_target="CPU", dtype="float16"):
    """Return `network` set up for mixed precision at `amp_level`.

    Args:
        network: the model (an ``nn.Cell``), float32.
        amp_level: "O0", "O1", "O2" or "O3" (see the module docstring).
        device_target: "CPU", "GPU" or "Ascend". On CPU every level runs as O0 and a
            notice is printed when another level was asked for.
        dtype: "float16" or "bfloat16", the low-precision type on GPU/Ascend.

    Returns:
        The network to train and evaluate. For O1-O3 this is a new cell wrapping (O2/O3) or
        rewriting (O1) `network`; parameter names and objects are unchanged, so optimizers
        and checkpoints built on `network` keep working. Wrap once: MindSpore warns that
        repeated wrapping slows the network down.
    """
    if amp_level not in AMP_LEVELS:
        raise ValueError(f"unknown amp_level {amp_level!r}; choose one of {', '.join(AMP_LEVELS)}")
    if dtype not in _DTYPES:
        raise ValueError(f"unknown AMP dtype {dtype!r}; choose float16 or bfloat16")
    if amp_level == "O0":
        return network
    if device_target == "CPU":
        print(cpu_amp_notice(amp_level), flush=True)
        return network
    return apply_mixed_precision(network, amp_level, _DTYPES[dtype])


def cpu_amp_notice(amp_level):
    """The line said when a requested amp_level falls back to O0 on CPU."""
    return f"AMP: amp_level {amp_level} is not used on CPU; training in float32 (O0)."


def apply_mixed_precision(network, amp_level, dtype):
    """The mindspore.amp calls behind `prepare_amp`, without the device check."""
    if amp_level == "O1":
        # The O1 rewrite leaves cells whose precision was set by the user alone.
        for _, cell in network.cells_and_names():
            if isinstance(cell, KEEP_FP32_CELLS):
                cell.to_float(mindspore.float32)
        return amp.auto_mixed_precision(network, "O1", dtype=dtype)
    black_list = amp.get_black_list() + list(KEEP_FP32_CELLS)
    return amp.custom_mixed_precision(network, black_list=black_list, dtype=dtype)
