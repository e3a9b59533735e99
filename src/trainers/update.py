"""What happens to one micro-batch's gradients after the backward pass.

Shared by the Model.train cell (train_step.py) and the functional trainer (functional.py),
so both apply exactly the same update:

    grads  = scaled grads / loss_scale                      (LossScaler.unscale)
    finite = loss and every gradient finite                 (one isfinite per tensor)
    accumulation_step == 1:
        apply(grads, overflow=not finite)
    accumulation_step == N > 1:
        buffers += grads if finite;  window_overflow |= not finite
        every N-th call: apply(buffers / N, window_overflow); buffers <- 0

    apply(grads, overflow):
        overflow = overflow on any device                   (distributed: all-reduce of the flag)
        grads    = mean over devices                        (nn.DistributedGradReducer, mean=True)
        if not overflow: optimizer(grads)  then  EMA update
        loss scale bookkeeping: overflow flag and count, dynamic scale

The optimizer therefore sees unscaled, averaged, all-reduced gradients, which AGC needs
(it is not scale-invariant). With the fused SGD-AGC kernel, one device and no accumulation the
unscale is folded into the optimizer's kernel (``optimizer(grads, 1 / loss_scale)``: the same
products, not a gradient-sized Mul pass per gradient first) and the overflow check reads the
scaled gradients (finite exactly when the unscaled ones are: the scale is >= 1). With a fused EMA
over exactly the optimizer's weights, the same kernel also updates each weight's average right
after the weight (``fold_ema``: the same arithmetic, one pass over the weights fewer).
Gradients are averaged over micro-batches, not summed, so N micro-batches of B images give the
step of one batch of N*B images; the optimizer's global_step (and with it the learning-rate
schedule) advances once per applied step.
A skipped step (overflow) does not advance it, nor the EMA.
"""
import mindspore
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops
from mindspore.common.initializer import initializer
from mindspore.communication.management import get_group_size
from mindspore.context import ParallelMode
from mindspore.parallel._utils import _get_parallel_mode

from src.models.layers.config import fused_update_kernel

from .loss_scale import all_finite

__all__ = ["GradientUpdate", "is_data_parallel"]

_add_to_buffer = ops.MultitypeFuncGraph("add_to_buffer")


@_add_to_buffer.register("Tensor", "Tensor")
def _add_to_buffer_tensor(buffer, grad):
    return ops.assign_add(buffer, ops.cast(grad, buffer.dtype))


_clear_buffer = ops.MultitypeFuncGraph("clear_buffer")


@_clear_buffer.register("Tensor")
def _clear_buffer_tensor(buffer):
    return ops.assign(buffer, ops.zeros_like(buffer))


_mean_of_buffer = ops.MultitypeFuncGraph("mean_of_buffer")


@_mean_of_buffer.register("Number", "Tensor", "Tensor")
def _mean_of_buffer_tensor(inv_steps, buffer, weight):
    return ops.cast(buffer * inv_steps, weight.dtype)


def is_data_parallel():
    """True when MindSpore's parallel mode is DATA_PARALLEL (gradients must be all-reduced)."""
    return _get_parallel_mode() == ParallelMode.DATA_PARALLEL


class GradientUpdate(nn.Cell):
    """Unscale, check, accumulate, all-reduce and apply one micro-batch's gradients.

    Args:
        optimizer: an ``nn.Optimizer``; its ``parameters`` are the weights the gradients
            belong to (same order).
        scaler: a ``LossScaler`` (also for unscaled training: it counts skipped steps).
        accumulation_step: micro-batches per optimizer step.
        ema: an ``EMA`` updated after each applied step, or None.

    Call with (loss, grads): the unscaled loss of the micro-batch and the gradients of the
    scaled loss, in the order of ``optimizer.parameters``. Returns the loss.
    """

    def __init__(self, optimizer, scaler, accumulation_step=1, ema=None):
        super().__init__(auto_prefix=False)
        if int(accumulation_step) < 1:
            raise ValueError(f"accumulation_step must be >= 1, got {accumulation_step}")
        self.optimizer = optimizer
        self.weights = optimizer.parameters
        self.scaler = scaler
        self.ema = ema
        self.use_ema = ema is not None
        self.accumulation_step = int(accumulation_step)
        self.hyper_map = ops.HyperMap()
        self.finite_kernel = fused_update_kernel("all_finite")  # gradients of the float32 master weights
        self.distributed = is_data_parallel()
        self.fold_unscale = (scaler.enabled and self.accumulation_step == 1 and not self.distributed
                             and getattr(optimizer, "folds_grad_scale", False))
        self.fold_ema = (self.use_ema and getattr(optimizer, "folds_grad_scale", False)
                         and ema.update_kernel is not None
                         and sorted(p.name for p in ema.weights) == sorted(p.name for p in self.weights))
        if self.fold_ema:
            averages = ema.averages_by_name()
            self.ema_averages = ParameterTuple(averages[p.name] for p in self.weights)
        self.grad_reducer = None
        if self.distributed:
            # mean=True whatever gradients_mean says: AGC must see the average, not the sum.
            self.grad_reducer = nn.DistributedGradReducer(self.weights, mean=True,
                                                          degree=get_group_size())
            self.flag_all_reduce = ops.AllReduce()
        if self.accumulation_step > 1:
            self.accum_grads = ParameterTuple(
                Parameter(initializer("zeros", p.shape, mindspore.float32),
                          name=f"accum_grad.{p.name}", requires_grad=False)
                for p in self.weights)
            self.accum_index = Parameter(Tensor(0, mindspore.int32), name="accum_index",
                                         requires_grad=False)
            # int32 0/1 (graphs cannot load bool Parameters): a micro-batch of this window overflowed
            self.accum_overflow = Parameter(Tensor(0, mindspore.int32), name="accum_overflow",
                                            requires_grad=False)

    def construct(self, loss, grads):
        if self.fold_unscale:  # the optimizer's kernel unscales (module docstring)
            finite = all_finite(loss, grads, self.finite_kernel)
            self.apply(grads, ops.logical_not(finite), self.scaler.inverse_scale())
            return loss
        grads = self.scaler.unscale(grads)
        finite = all_finite(loss, grads, self.finite_kernel)
        if self.accumulation_step == 1:
            self.apply(grads, ops.logical_not(finite))
        else:
            self.accumulate(grads, finite)
        return loss

    def accumulate(self, grads, finite):
        """Add a finite micro-batch to the buffers; apply their mean every N-th call."""
        if finite:
            self.hyper_map(_add_to_buffer, self.accum_grads, grads)
        overflowed = ops.cast(ops.logical_not(finite), mindspore.int32)
        ops.assign(self.accum_overflow, ops.maximum(self.accum_overflow, overflowed))
        index = self.accum_index + 1
        if index >= self.accumulation_step:
            mean = self.hyper_map(ops.partial(_mean_of_buffer, 1.0 / self.accumulation_step),
                                  self.accum_grads, self.weights)
            self.apply(mean, self.accum_overflow > 0)
            self.hyper_map(_clear_buffer, self.accum_grads)
            ops.assign(self.accum_overflow, Tensor(0, mindspore.int32))
            ops.assign(self.accum_index, Tensor(0, mindspore.int32))
        else:
            ops.assign(self.accum_index, index)

    def apply(self, grads, overflow, grad_scale=None):
        """One optimizer step with the (local) mean gradients, unless any device overflowed;
        grad_scale: the factor the optimizer multiplies them by first (fold_unscale), or None."""
        if self.distributed:
            overflow = self.flag_all_reduce(ops.cast(overflow, mindspore.float32)) > 0
            grads = self.grad_reducer(grads)
        if not overflow:
            if self.fold_ema:  # the optimizer's kernel updates the averages too (module docstring)
                self.optimizer(grads, grad_scale, self.ema_averages, self.ema.next_decays())
            elif grad_scale is None:
                self.optimizer(grads)
            else:
                self.optimizer(grads, grad_scale)
            if self.use_ema and not self.fold_ema:
                self.ema()
        self.scaler.update(overflow)
