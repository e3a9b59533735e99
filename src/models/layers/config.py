"""Which of a backend's fast forms a network built now gets, and why (cf. timm's layers/config.py).

The layers compute the paper's function in one plain form each (MindSpore operators, native
convolutions). On MindSpore's CPU backend some of them are slow; fast_forms.py swaps in
forms that compute the same function faster:

- operator forms (`cpu_operators`): im2col + matmul convolutions and a GELU with its own
  backward (conv2d_same.py, activations.py); on the CPU backend, for float32 networks;
- fused kernels (`fused_kernels`): the same plus weight standardization and per-row scales
  as C++ kernels (cpu_kernels.py); in addition they need the library built on this machine
  and NFNET_CPU_KERNELS not set to 0.

Only float32 networks get them (CPU training always runs float32: trainers/amp.py); the
kernels are float32 only. Exported networks get them only when asked for by name (export.py
--conv_impl fused_cpu, a MINDIR for this machine's CPU); otherwise deploy/export.py builds the
plain network, so an exported model runs wherever MindSpore does.

The weight updates' fused kernels (SGD-AGC, EMA, the overflow check) and the kernels' thread
count are handed out here too (`fused_update_kernel`, `set_kernel_threads`): the optimizer, EMA and
update cells and the device context never import the kernels themselves
(tests/test_import_graph.py names the modules that may).
"""
import os
from dataclasses import dataclass

KERNELS_ENV = "NFNET_CPU_KERNELS"  # "0": never build or use the fused kernels


@dataclass(frozen=True)
class FastForms:
    """What fast_forms.apply_fast_forms swaps in. Kernels without the operator forms (a test's
    choice) swap only the kernels that are float32 whatever the network's precision: weight
    standardization and the per-row scale of squeeze-excite."""

    cpu_operators: bool = False
    fused_kernels: bool = False
    reason: str = "plain forms"


def kernels_enabled():
    """False when the user switched the fused kernels off (NFNET_CPU_KERNELS=0)."""
    return os.environ.get(KERNELS_ENV, "1") != "0"


def active_forms(float32=True):
    """The fast forms for a network built now on the current device (mindspore.set_device)."""
    import mindspore as ms

    device = ms.get_context("device_target")
    if device != "CPU":
        return FastForms(reason=f"device {device}: the plain forms are its fast ones")
    if not float32:
        return FastForms(reason="low-precision network: the CPU forms are float32")
    if not kernels_enabled():
        return FastForms(cpu_operators=True, reason=f"CPU, float32; fused kernels off ({KERNELS_ENV}=0)")
    from . import cpu_kernels

    if not cpu_kernels.available():
        return FastForms(cpu_operators=True, reason="CPU, float32; fused kernels not built")
    return FastForms(cpu_operators=True, fused_kernels=True, reason="CPU, float32, fused kernels built")


def fused_update_kernel(name, fused=None):
    """The fused C++ kernel of a weight update, or None for the operator form.

    name: "sgd_agc" (optim/sgd_agc.py), "ema" (trainers/ema.py) or "all_finite" (the overflow
    check of trainers/update.py, all gradients in one launch). fused: True/False force the choice (a test's); None takes the
    current backend's (`active_forms().fused_kernels`).
    """
    if not (active_forms().fused_kernels if fused is None else fused):
        return None
    from . import cpu_kernels

    ops = {"sgd_agc": cpu_kernels.sgd_agc_update_op, "ema": cpu_kernels.ema_update_op,
           "all_finite": cpu_kernels.all_finite_multi_op}
    return ops[name]()


def kernel_library():
    """Path of the fused kernels' library, or None when they are off or cannot be built."""
    from . import cpu_kernels  # library_path() itself honours NFNET_CPU_KERNELS=0

    return cpu_kernels.library_path()


def set_kernel_threads(num):
    """Threads of the fused kernels (the device context keeps them equal to MindSpore's)."""
    from . import cpu_kernels

    cpu_kernels.set_threads(num)
