"""Exponential moving average of the weights, with DeepMind's warm-up.

DeepMind's NFNet experiment (nfnets/utils.py, tf1_ema) updates, after optimizer step t
(t = 0 for the first update),

    decay_t = min(decay, (1 + t) / (10 + t))
    ema     = ema * decay_t + weights * (1 - decay_t)

starting from a copy of the initial weights, and evaluates the EMA weights (decay 0.99999).
Without the warm-up, decay_t = decay.

The averages are Parameters named "ema." + the weight's name, so a checkpoint of the train
cell holds them and `create_model(..., checkpoint_prefix="ema.")` loads them as a network.
"""
import contextlib

import mindspore
from mindspore.common import dtype as mstype
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops

from src.models.checkpoint import EMA_PREFIX
from src.models.layers.config import fused_update_kernel

__all__ = ["EMA", "copy_ema_to", "ema_weights_applied", "EMA_PREFIX"]

_ema_update = ops.MultitypeFuncGraph("ema_update")


@_ema_update.register("Tensor", "Tensor", "Tensor")
def _ema_update_tensor(decay, average, weight):
    decay = ops.cast(decay, average.dtype)
    return ops.assign(average, average * decay + ops.cast(weight, average.dtype) * (1.0 - decay))


_ema_update_fused = ops.MultitypeFuncGraph("ema_update_fused")


@_ema_update_fused.register("Function", "Tensor", "Tensor", "Tensor")
def _ema_update_fused_tensor(update_kernel, decays, average, weight):
    return update_kernel(average, weight, decays)  # in place: average * decay + weight * (1 - decay)


class EMA(nn.Cell):
    """EMA of `params` (usually `network.get_parameters()`), updated by calling the cell.

    Args:
        params: the weights to average; only floating-point ones are kept.
        decay: the decay (0.99999 in the paper's ImageNet runs).
        warmup: DeepMind's warm-up min(decay, (1 + t) / (10 + t)); False: constant decay.
        fused: update each average in place with one fused CPU kernel (the same formula, no
            weight-sized temporaries); None: when the fused CPU kernels are active
            (src/models/layers/config.py).

    Parameters: ``ema.<weight name>`` (float32, like the weights) and ``ema_num_updates``
    (int32, t, the updates done so far, restored with the checkpoint).
    """

    def __init__(self, params, decay=0.99999, warmup=True, fused=None):
        super().__init__(auto_prefix=False)
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"EMA decay must lie in [0, 1), got {decay}")
        weights = [p for p in params if p.dtype in mstype.float_type]
        self.weights = ParameterTuple(weights)
        self.averages = self.weights.clone(prefix=EMA_PREFIX.rstrip("."), init="same")
        for average in self.averages:
            average.requires_grad = False
        self.num_updates = Parameter(Tensor(0, mindspore.int32), name="ema_num_updates",
                                     requires_grad=False)
        self.decay = float(decay)
        self.warmup = bool(warmup)
        self.hyper_map = ops.HyperMap()
        self.update_kernel = fused_update_kernel("ema", fused)

    def current_decay(self):
        """decay_t for the next update (a float32 scalar Tensor)."""
        decay = Tensor(self.decay, mindspore.float32)
        if self.warmup:
            t = ops.cast(self.num_updates, mindspore.float32)
            decay = ops.minimum(decay, (1.0 + t) / (10.0 + t))
        return decay

    def next_decays(self):
        """[decay_t, 1 - decay_t] for an update made elsewhere (the fused SGD-AGC kernel, update.py), t
        advanced as construct advances it."""
        decay = self.current_decay()
        decays = ops.stack([decay, 1.0 - decay])
        return ops.depend(decays, ops.assign_add(self.num_updates, Tensor(1, mindspore.int32)))

    def construct(self):
        """One update from the current weights; call it after each optimizer update."""
        decay = self.current_decay()
        if self.update_kernel is not None:
            decays = ops.stack([decay, 1.0 - decay])
            updated = self.hyper_map(ops.partial(_ema_update_fused, self.update_kernel, decays),
                                     self.averages, self.weights)
        else:
            updated = self.hyper_map(ops.partial(_ema_update, decay), self.averages, self.weights)
        return ops.depend(ops.assign_add(self.num_updates, Tensor(1, mindspore.int32)), updated)

    def averages_by_name(self):
        """weight name -> its EMA Parameter."""
        return {w.name: a for w, a in zip(self.weights, self.averages)}


def _ema_source(ema_or_cell):
    """weight name -> EMA Parameter from an EMA, or from any cell holding "ema." Parameters."""
    if isinstance(ema_or_cell, EMA):
        return ema_or_cell.averages_by_name()
    found = {p.name[len(EMA_PREFIX):]: p for p in ema_or_cell.get_parameters()
             if p.name.startswith(EMA_PREFIX)}
    if not found:
        raise ValueError(f"{type(ema_or_cell).__name__} holds no EMA weights (no '{EMA_PREFIX}*' "
                         f"parameters); build the train step with ema=True")
    return found


def copy_ema_to(ema_or_cell, network):
    """Overwrite `network`'s weights with the EMA weights (matched by name).

    `ema_or_cell` is an `EMA` or a cell that holds one (e.g. the train step). Every
    floating-point weight of `network` must have an average; use `ema_weights_applied` to
    evaluate and then get the training weights back.
    """
    source = _ema_source(ema_or_cell)
    targets = [p for p in network.get_parameters() if p.dtype in mstype.float_type]
    missing = [p.name for p in targets if p.name not in source]
    if missing:
        raise ValueError(f"no EMA weights for {len(missing)} parameters of the network "
                         f"(e.g. {missing[0]!r})")
    for p in targets:
        p.set_data(source[p.name].value().copy())


@contextlib.contextmanager
def ema_weights_applied(ema_or_cell, network):
    """Within the block `network` holds the EMA weights; afterwards its own weights again.

        with ema_weights_applied(train_step, network):
            metrics = evaluate(network, val_dataset)
    """
    saved = {p.name: p.value().copy() for p in network.get_parameters()
             if p.dtype in mstype.float_type}
    copy_ema_to(ema_or_cell, network)
    try:
        yield network
    finally:
        for p in network.get_parameters():
            if p.name in saved:
                p.set_data(saved[p.name])
