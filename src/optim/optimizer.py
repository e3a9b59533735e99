"""Optimizer factory: SGD with AGC (the paper's), plain momentum SGD and AdamW.

All three share DeepMind's parameter groups: parameters whose name contains
one of ``no_decay_keys`` (gains, biases, skipinit_gain) get no weight decay.
Only SGD-AGC clips, and it skips the parameters named by ``agc_exclude``.
"""
from mindspore import nn

from .sgd_agc import DEFAULT_AGC_EXCLUDE, DEFAULT_NO_DECAY_KEYS, SGDAGC

__all__ = ["create_optimizer", "OPTIMIZERS"]

OPTIMIZERS = ("sgd_agc", "momentum", "adamw")


def _decay_groups(params, weight_decay, no_decay_keys):
    """MindSpore parameter groups: decayed weights, undecayed gains/biases, original order."""
    decay = [p for p in params if not any(key in p.name for key in no_decay_keys)]
    no_decay = [p for p in params if any(key in p.name for key in no_decay_keys)]
    groups = [{"params": group, "weight_decay": wd}
              for group, wd in ((decay, weight_decay), (no_decay, 0.0)) if group]
    return groups + [{"order_params": params}]


def create_optimizer(params_or_network, name="sgd_agc", lr=0.1, weight_decay=0.0, momentum=0.9,
                     nesterov=True, clipping=0.01, eps=1e-3, no_decay_keys=DEFAULT_NO_DECAY_KEYS,
                     agc_exclude=DEFAULT_AGC_EXCLUDE, loss_scale=1.0, betas=(0.9, 0.999),
                     adam_eps=1e-8):
    """Build the optimizer named ``name``.

    Args:
        params_or_network: a ``nn.Cell`` (its ``trainable_params()`` are used)
            or an iterable of ``Parameter``.
        name: "sgd_agc" (SGD + Nesterov momentum + adaptive gradient clipping,
            ``SGDAGC``), "momentum" (``nn.Momentum``, same decay groups, no
            clipping) or "adamw" (``nn.AdamWeightDecay``, decoupled decay;
            note MindSpore's version has no bias correction of the moments.
            ``mindspore.experimental.optim.AdamW`` has it, but
            ``mindspore.train.Model`` in 2.10 rejects it).
        lr: float, per-step sequence / numpy array (see ``schedulers``), or a
            ``LearningRateSchedule`` (mindspore.nn.learning_rate_schedule).
            Step t of training uses entry t.
        weight_decay: decay coefficient for the decayed group (2e-5 for F0).
            For SGD it is added to the gradient (g += wd * p); AdamW decouples it.
        momentum: momentum coefficient for "sgd_agc" and "momentum".
        nesterov: Nesterov momentum for "sgd_agc" and "momentum".
        clipping: AGC threshold for "sgd_agc" (None or 0: no clipping).
        eps: AGC floor on the parameter norm for "sgd_agc".
        no_decay_keys: name substrings of parameters without weight decay.
        agc_exclude: name substrings of parameters that "sgd_agc" does not clip.
        loss_scale: a fixed loss scale left in the gradients (only with
            ``FixedLossScaleManager(drop_overflow_update=False)``); the
            optimizer divides it out. "adamw" does not support it.
        betas: (beta1, beta2) for "adamw".
        adam_eps: denominator epsilon for "adamw".

    Returns:
        An ``nn.Optimizer`` usable with ``mindspore.train.Model``.
    """
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer '{name}'; choose one of {', '.join(OPTIMIZERS)}")
    if isinstance(params_or_network, nn.Cell):
        params = params_or_network.trainable_params()
    else:
        params = list(params_or_network)

    if name == "sgd_agc":
        return SGDAGC(params, learning_rate=lr, momentum=momentum, weight_decay=weight_decay,
                      nesterov=nesterov, clipping=clipping, eps=eps, no_decay_keys=no_decay_keys,
                      agc_exclude=agc_exclude, loss_scale=loss_scale)
    groups = _decay_groups(params, weight_decay, no_decay_keys)
    if name == "momentum":
        return nn.Momentum(groups, learning_rate=lr, momentum=float(momentum),
                           loss_scale=float(loss_scale), use_nesterov=nesterov)
    if loss_scale != 1.0:
        raise ValueError("adamw takes no loss_scale; use a loss-scale manager that unscales "
                         "the gradients")
    return nn.AdamWeightDecay(groups, learning_rate=lr, beta1=betas[0], beta2=betas[1],
                              eps=adam_eps)
