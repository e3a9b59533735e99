"""Loss scaling with overflow detection that runs on every backend, CPU included.

Why not MindSpore's own cells: `nn.TrainOneStepWithLossScaleCell` (2.10) detects overflow
with GPU FloatStatus or the Ascend NPU status registers; on CPU it takes the Ascend branch
and fails in PyNative and Graph mode alike ("Unsupported op [NPUGetFloatStatusV2] on CPU"),
and `Model` rejects a `DynamicLossScaleManager` on CPU. Checking `isfinite` on one sum per
gradient is backend-neutral and cheap, so this module does that and keeps the scale itself.

Dynamic scaling follows `nn.DynamicLossScaleUpdateCell` / `DynamicLossScaleManager`, counted
per optimizer step (one event per accumulation window):

    overflow:            scale <- max(scale / factor, 1), good_steps <- 0
    finite:              good_steps += 1; after `window` such steps: scale *= factor, good_steps <- 0

A fixed scale never changes; both skip the update on overflow.
"""
import mindspore
from mindspore import Parameter, Tensor, nn, ops

__all__ = ["LossScaler", "all_finite"]

_unscale = ops.MultitypeFuncGraph("unscale")


@_unscale.register("Tensor", "Tensor")
def _unscale_tensor(inv_scale, grad):
    return grad * ops.cast(inv_scale, grad.dtype)


_finite_sum = ops.MultitypeFuncGraph("finite_sum")


@_finite_sum.register("Tensor")
def _finite_sum_tensor(grad):
    # One reduction per tensor: a NaN or inf anywhere makes the float32 sum non-finite.
    # (A finite sum overflowing float32 would also count; for gradients that is an overflow too.)
    return ops.isfinite(ops.sum(ops.cast(grad, mindspore.float32).reshape(-1)))  # 1-D: see layers/rowwise.py


def all_finite(loss, grads, kernel=None):
    """True (a bool scalar Tensor) when the loss and every gradient are finite.

    kernel: fused_update_kernel("all_finite") (models/layers/config.py; float32 gradients), one
    multi-threaded pass over all gradients in one launch instead of a ReduceSum per gradient (3 % of
    the F0 CPU train step, profiled; one kernel, a slice and a compare per gradient before); None: operators.
    """
    loss_finite = ops.isfinite(ops.cast(loss, mindspore.float32)).all()
    if kernel is not None:
        return ops.logical_and(kernel(*grads)[0] > 0.5, loss_finite)
    flags = ops.HyperMap()(_finite_sum, grads)
    return ops.stack(flags + (loss_finite,)).all()


class LossScaler(nn.Cell):
    """Loss scale, overflow flag and overflow counter as checkpointable Parameters.

    Args:
        loss_scale: the fixed scale, or the initial dynamic one (>= 1).
        dynamic: lower the scale on overflow and raise it after `window` finite steps.
        factor: dynamic: divide / multiply the scale by this (> 1).
        window: dynamic: finite optimizer steps before the scale grows.

    Parameters (names as stored in checkpoints):
        loss_scale (float32): the current scale.
        overflow (int32, 0 or 1): the last optimizer step was skipped.
        overflow_count (int32): optimizer steps skipped so far.
        loss_scale_good_steps (int32): finite steps since the scale last changed.
    """

    def __init__(self, loss_scale=1.0, dynamic=False, factor=2.0, window=1000):
        super().__init__()
        if loss_scale < 1.0:
            raise ValueError(f"loss_scale must be >= 1, got {loss_scale}")
        if dynamic and (factor <= 1.0 or window < 1):
            raise ValueError(f"dynamic loss scaling needs factor > 1 and window >= 1, "
                             f"got {factor} and {window}")
        self.dynamic = bool(dynamic)
        # With a fixed scale of 1 the scaling ops are left out of the graph entirely.
        self.enabled = self.dynamic or float(loss_scale) != 1.0
        self.factor = float(factor)
        self.window = int(window)
        self.loss_scale = Parameter(Tensor(float(loss_scale), mindspore.float32), name="loss_scale",
                                    requires_grad=False)
        # Flags are int32 0/1: MindSpore 2.10 graphs cannot load bool Parameters.
        self.overflow = Parameter(Tensor(0, mindspore.int32), name="overflow", requires_grad=False)
        self.overflow_count = Parameter(Tensor(0, mindspore.int32), name="overflow_count",
                                        requires_grad=False)
        self.good_steps = Parameter(Tensor(0, mindspore.int32), name="loss_scale_good_steps",
                                    requires_grad=False)
        self.hyper_map = ops.HyperMap()

    def scale(self, loss):
        """The loss to differentiate: loss * scale (the loss itself when scaling is off)."""
        if self.enabled:
            return loss * ops.cast(self.loss_scale, loss.dtype)
        return loss

    def inverse_scale(self):
        """1 / scale (float32 scalar): what unscale multiplies the gradients by."""
        return 1.0 / self.loss_scale

    def unscale(self, grads):
        """Gradients of the scaled loss divided by the scale."""
        if self.enabled:
            return self.hyper_map(ops.partial(_unscale, self.inverse_scale()), grads)
        return grads

    def update(self, overflow):
        """Record one optimizer step (`overflow`: bool scalar Tensor, the step was skipped)."""
        flag = ops.cast(overflow, mindspore.int32)
        ops.assign(self.overflow, flag)
        ops.assign_add(self.overflow_count, flag)
        if self.dynamic:
            scale = self.loss_scale
            good = ops.select(overflow, ops.zeros_like(self.good_steps), self.good_steps + 1)
            grow = good >= self.window
            lowered = ops.maximum(scale / self.factor, ops.ones_like(scale))
            new_scale = ops.select(overflow, lowered, ops.select(grow, scale * self.factor, scale))
            ops.assign(self.good_steps, ops.select(grow, ops.zeros_like(good), good))
            ops.assign(self.loss_scale, new_scale)
        return overflow
