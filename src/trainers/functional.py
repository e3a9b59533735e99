"""The same train step as a plain `mindspore.value_and_grad` + `mindspore.jit` loop.

MindSpore 2.x's functional style: a forward function, its value_and_grad, a jit-compiled
step function and a Python loop over the dataset. Everything after the gradients (loss
scale, overflow skipping, accumulation, all-reduce, optimizer, EMA) is the `GradientUpdate`
cell that the Model.train cell uses too, so after N steps on the same data both trainers
hold the same weights; `trainer.train_cell` is that `TrainStep` cell, and its checkpoints
are interchangeable with Model.train's.

    trainer = FunctionalTrainer(network, loss_fn, optimizer, ema=True)
    trainer.train(dataset, epochs=2, callbacks=[...])     # or: loss = trainer.step(images, targets)
"""
import mindspore
from mindspore.train import RunContext

from .train_step import create_train_step

__all__ = ["FunctionalTrainer"]


class _CallbackParams(dict):
    """Model.train's callback parameters: a dict whose keys are also attributes."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        self[name] = value


class FunctionalTrainer:
    """value_and_grad + jit training with the arguments of `create_train_step`.

    Args:
        network, loss_fn, optimizer: as for `create_train_step`.
        amp_level, amp_dtype, loss_scale, dynamic_loss_scale, loss_scale_factor, loss_scale_window,
        accumulation_step, ema, device_target: as for `create_train_step`.
        jit: compile the step with `mindspore.jit` (False: run it op by op, for debugging).

    Attributes:
        train_cell: the `TrainStep` holding the network, optimizer, loss-scale and EMA
            state; save it with `mindspore.save_checkpoint` and read ``loss_scale``,
            ``overflow``, ``overflow_count`` and ``ema`` from it.
    """

    def __init__(self, network, loss_fn, optimizer, *, amp_level="O0", amp_dtype="float16", loss_scale=1.0,
                 dynamic_loss_scale=False, loss_scale_factor=2.0, loss_scale_window=1000,
                 accumulation_step=1, ema=None, device_target="CPU", jit=True):
        # the same cell Model.train runs: its network, loss, update and state are shared
        self.train_cell = create_train_step(network, loss_fn, optimizer, amp_level=amp_level, amp_dtype=amp_dtype,
                                            loss_scale=loss_scale, dynamic_loss_scale=dynamic_loss_scale,
                                            loss_scale_factor=loss_scale_factor,
                                            loss_scale_window=loss_scale_window,
                                            accumulation_step=accumulation_step, ema=ema,
                                            device_target=device_target)
        network = self.network = self.train_cell.network
        update = self.train_cell.update
        scaler = update.scaler

        def forward(images, targets):
            loss = loss_fn(network(images), targets)
            return scaler.scale(loss), loss

        grad_fn = mindspore.value_and_grad(forward, None, update.weights, has_aux=True)

        def train_step(images, targets):
            (_, loss), grads = grad_fn(images, targets)
            return update(loss, grads)

        self._train_step = mindspore.jit(train_step) if jit else train_step

    def step(self, images, targets):
        """One micro-batch: returns the unscaled loss (the optimizer runs every
        accumulation_step-th call, unless the window overflowed)."""
        return self._train_step(images, targets)

    def train(self, dataset, epochs, callbacks=None, initial_epoch=0):
        """Run `epochs` epochs (from `initial_epoch`) over a dataset of (image, target) rows.

        `callbacks` are ``mindspore.train.Callback`` objects, called as Model.train calls
        them (on_train_begin / epoch / step / end) with the same callback parameters
        (train_network is `train_cell`, net_outputs the loss, cur_epoch_num, cur_step_num,
        batch_num, epoch_num, optimizer ...); ``run_context.request_stop()`` stops training.
        """
        callbacks = list(callbacks or [])
        steps_per_epoch = dataset.get_dataset_size()
        params = _CallbackParams(
            train_network=self.train_cell, network=self.network, optimizer=self.train_cell.optimizer,
            loss_fn=self.train_cell.loss_fn, train_dataset=dataset, mode="train",
            epoch_num=epochs - initial_epoch, batch_num=steps_per_epoch,
            cur_epoch_num=initial_epoch, cur_step_num=initial_epoch * steps_per_epoch,
            dataset_sink_mode=False, net_outputs=None, list_callback=callbacks)
        run_context = RunContext(params)
        self.train_cell.set_train(True)
        iterator = dataset.create_tuple_iterator(num_epochs=epochs - initial_epoch)
        self._call(callbacks, "on_train_begin", run_context)
        for epoch in range(initial_epoch, epochs):
            params.cur_epoch_num = epoch + 1
            self._call(callbacks, "on_train_epoch_begin", run_context)
            for row in iterator:
                params.cur_step_num += 1
                self._call(callbacks, "on_train_step_begin", run_context)
                params.net_outputs = self.step(row[0], row[1])
                self._call(callbacks, "on_train_step_end", run_context)
                if run_context.get_stop_requested():
                    break
            self._call(callbacks, "on_train_epoch_end", run_context)
            if run_context.get_stop_requested():
                break
        self._call(callbacks, "on_train_end", run_context)
        return params

    @staticmethod
    def _call(callbacks, hook, run_context):
        for callback in callbacks:
            getattr(callback, hook)(run_context)
