"""Top-k accuracy counts from logits and the accuracy report: the one rule of evaluate (eval.py, training's
evaluation) and postprocess.py. NumPy only, so postprocess.py runs on a machine without MindSpore."""
import numpy as np


def correct_topk(logits, labels, k):
    """How many rows have their label among the k highest logits, ranked as eval.py ranks them.

    A label's rank is the number of classes with a larger logit plus those with an equal
    logit and a lower index; it is in the top k when its rank is below k. A row with a non-finite logit is never correct. With fewer than k
    classes every finite row counts.
    """
    logits = np.asarray(logits, dtype=np.float32)
    labels = np.asarray(labels, dtype=np.int64)
    own = logits[np.arange(len(labels)), labels][:, None]
    classes = np.arange(logits.shape[1])[None, :]
    ahead = (logits > own) | ((logits == own) & (classes < labels[:, None]))
    correct = (ahead.sum(axis=1) < k) & np.isfinite(logits).all(axis=1)
    return int(correct.sum())


def accuracy_report(correct_top1, correct_top5, count, **loss):
    """The JSON report: top1/top5 as fractions in [0, 1], plus the counts they come from; `loss=`
    (evaluate's mean loss, None without a loss function) follows top5 when given."""
    return {
        "top1": correct_top1 / count if count else 0.0,
        "top5": correct_top5 / count if count else 0.0,
        **loss,
        "count": int(count),
        "correct_top1": int(correct_top1),
        "correct_top5": int(correct_top5),
    }
