"""Classification losses, always computed in float32.

Both losses are the cross entropy between a target distribution q and the
softmax of the logits z, per sample:

    loss = -sum_c q_c * log_softmax(z)_c

SoftTargetCrossEntropy takes q directly (Mixup / CutMix targets).
CrossEntropySmooth takes integer labels y and smooths them like timm's
LabelSmoothingCrossEntropy and DeepMind's experiment:

    q = (1 - s) * onehot(y) + s / C   =>   loss = (1 - s) * nll + s * mean_c(-log_softmax(z)_c)

Logits are cast to float32 before the log-softmax, so under AMP (float16 or
bfloat16 network outputs) the loss and its gradient stay in float32.
"""
import mindspore
from mindspore import nn, ops

__all__ = ["SoftTargetCrossEntropy", "CrossEntropySmooth", "create_loss"]


class SoftTargetCrossEntropy(nn.LossBase):
    """Cross entropy with probability targets of shape (N, C).

    Args:
        reduction: "mean" (over the batch), "sum" or "none" (one loss per sample).
    """

    def __init__(self, reduction="mean"):
        super().__init__(reduction)

    def construct(self, logits, target):
        log_probs = ops.log_softmax(ops.cast(logits, mindspore.float32), axis=-1)
        loss = -ops.sum(ops.cast(target, mindspore.float32) * log_probs, dim=-1)
        return self.get_loss(loss)


class CrossEntropySmooth(nn.LossBase):
    """Cross entropy with integer labels of shape (N,) and label smoothing.

    Args:
        smoothing: label smoothing s in [0, 1) (0.1 in the NFNet recipe).
        reduction: "mean" (over the batch), "sum" or "none" (one loss per sample).
    """

    def __init__(self, smoothing=0.0, reduction="mean"):
        super().__init__(reduction)
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"label smoothing must lie in [0, 1), got {smoothing}")
        self.smoothing = float(smoothing)

    def construct(self, logits, labels):
        log_probs = ops.log_softmax(ops.cast(logits, mindspore.float32), axis=-1)
        nll = -ops.gather_elements(log_probs, 1, ops.cast(labels, mindspore.int32).reshape(-1, 1))
        smooth = -ops.mean(log_probs, axis=-1)
        loss = (1.0 - self.smoothing) * nll.reshape(-1) + self.smoothing * smooth
        return self.get_loss(loss)


LOSSES = ("ce",)


def create_loss(name="ce", label_smoothing=0.0, reduction="mean", soft_targets=False):
    """Build the training or evaluation loss.

    Args:
        name: "ce" (softmax cross entropy), the only loss NFNet uses.
        label_smoothing: smoothing for integer labels.
        reduction: "mean", "sum" or "none".
        soft_targets: the targets are (N, C) probabilities, e.g. from Mixup /
            CutMix. Such targets already carry the label smoothing (the mixup
            step folds it in, as in timm's train.py), so ``label_smoothing``
            is not applied a second time.

    Returns:
        An ``nn.LossBase`` taking (logits, targets).
    """
    if name not in LOSSES:
        raise ValueError(f"unknown loss '{name}'; choose one of {', '.join(LOSSES)}")
    if soft_targets:
        return SoftTargetCrossEntropy(reduction=reduction)
    return CrossEntropySmooth(smoothing=label_smoothing, reduction=reduction)
