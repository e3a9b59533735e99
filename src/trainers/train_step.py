"""The train-step cell run by `mindspore.train.Model(train_step).train(...)`.

As in the MindSpore model zoo's custom TrainOneStep cells, the cell is the whole network
given to Model (no loss_fn, no optimizer): Model feeds it (image, target) batches and hands
its output, the unscaled loss, to the callbacks as `net_outputs`.

    (scaled_loss, loss), grads = value_and_grad(loss_fn(network(image), target) * loss_scale)
    GradientUpdate(loss, grads)   # unscale, skip on overflow, accumulate, all-reduce, optimizer, EMA

target is int labels or float soft targets (Mixup/CutMix), whatever loss_fn takes.
"""
import mindspore
from mindspore import nn, ops

from .amp import prepare_amp
from .ema import EMA
from .loss_scale import LossScaler
from .update import GradientUpdate

__all__ = ["TrainStep", "create_train_step"]


class TrainStep(nn.Cell):
    """network + loss + the shared gradient update, as one cell for Model.train.

    Checkpoints of this cell hold the network weights under their own names, the optimizer
    state (``momentum.*``, ``global_step``, ``learning_rate``), the loss-scale state
    (``loss_scale``, ``overflow``, ``overflow_count``, ``loss_scale_good_steps``), the EMA
    (``ema.*``, ``ema_num_updates``) and, with accumulation, the buffers (``accum_grad.*``,
    ``accum_index``, ``accum_overflow``).
    """

    def __init__(self, network, loss_fn, update):
        super().__init__(auto_prefix=False)
        self.network = network
        self.loss_fn = loss_fn
        self.update = update
        self.weights = update.weights

    def forward(self, image, target):
        """(loss * loss_scale, loss): the first is differentiated, the second reported."""
        loss = self.loss_fn(self.network(image), target)
        return self.update.scaler.scale(loss), loss

    def construct(self, image, target):
        grad_fn = ops.value_and_grad(self.forward, None, self.weights, has_aux=True)
        (_, loss), grads = grad_fn(image, target)
        return self.update(loss, grads)

    # The state callbacks read (Parameters; `.asnumpy()` gives the value).
    @property
    def optimizer(self):
        return self.update.optimizer

    @property
    def ema(self):
        return self.update.ema

    @property
    def loss_scale(self):
        return self.update.scaler.loss_scale

    @property
    def overflow(self):
        return self.update.scaler.overflow

    @property
    def overflow_count(self):
        return self.update.scaler.overflow_count


def build_gradient_update(network, optimizer, *, loss_scale=1.0, dynamic_loss_scale=False,
                          loss_scale_factor=2.0, loss_scale_window=1000, accumulation_step=1,
                          ema=None):
    """The shared `GradientUpdate` for `network` (see `create_train_step` for the arguments)."""
    scaler = LossScaler(loss_scale, dynamic=dynamic_loss_scale, factor=loss_scale_factor,
                        window=loss_scale_window)
    if ema is True:
        ema = EMA(network.get_parameters())
    elif isinstance(ema, (int, float)) and not isinstance(ema, bool):
        ema = EMA(network.get_parameters(), decay=float(ema))
    elif ema is False:
        ema = None
    return GradientUpdate(optimizer, scaler, accumulation_step=accumulation_step, ema=ema)


def create_train_step(network, loss_fn, optimizer, *, amp_level="O0", amp_dtype="float16", loss_scale=1.0,
                      dynamic_loss_scale=False, loss_scale_factor=2.0, loss_scale_window=1000,
                      accumulation_step=1, ema=None, device_target="CPU"):
    """Build the train-step cell for ``Model(train_step).train(epochs, dataset, callbacks)``.

    Args:
        network: the model, float32 (AMP is applied here, see `prepare_amp`).
        loss_fn: called as loss_fn(logits, target) -> scalar loss (src/trainers/loss.py).
        optimizer: an ``nn.Optimizer`` over the network's weights (create_optimizer). Its
            learning-rate schedule advances once per optimizer step, i.e. once every
            ``accumulation_step`` calls.
        amp_level: "O0".."O3"; on CPU always O0 (with a notice).
        amp_dtype: "float16" or "bfloat16", the low-precision type of O1-O3.
        loss_scale: the fixed loss scale, or the initial dynamic one.
        dynamic_loss_scale: lower the scale on overflow, raise it after ``loss_scale_window``
            finite steps, by ``loss_scale_factor``.
        loss_scale_factor, loss_scale_window: see above.
        accumulation_step: micro-batches per optimizer step; gradients are averaged.
        ema: None/False (no EMA), True (decay 0.99999, warm-up), a float decay (warm-up), or
            an ``EMA`` built on ``network.get_parameters()``.
        device_target: "CPU", "GPU" or "Ascend" (for AMP).

    Returns:
        A `TrainStep` cell; call ``train_step.set_train()`` if not run through Model.
        Non-finite losses or gradients skip the update and count in ``overflow_count``.

    Data parallel: build the cell after ``init()`` and
    ``set_auto_parallel_context(parallel_mode=ParallelMode.DATA_PARALLEL)``; the gradients are
    then averaged over devices (whatever ``gradients_mean`` says) before the optimizer.
    """
    network = prepare_amp(network, amp_level, device_target, dtype=amp_dtype)
    update = build_gradient_update(network, optimizer, loss_scale=loss_scale,
                                   dynamic_loss_scale=dynamic_loss_scale,
                                   loss_scale_factor=loss_scale_factor,
                                   loss_scale_window=loss_scale_window,
                                   accumulation_step=accumulation_step, ema=ema)
    return TrainStep(network, loss_fn, update)
