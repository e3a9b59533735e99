"""Exact top-1 / top-5 / loss over an evaluation dataset, in one process or sharded.

Every image counts once: the dataset may carry a third column `valid` (1 for a real image,
0 for padding added so that each shard has whole batches and the same number of batches),
and the counts of all shards are summed with one all-reduce at the end (so shards may run
different numbers of batches). Nothing is dropped: a last partial batch is evaluated as it
is (the jit-compiled forward then compiles once more for its shape; padding to full batches
avoids that). The forward is compiled on each `evaluate` call.

Correct at k means the true class is among the k largest logits, ties broken towards the
lower class index, i.e. exactly `np.argsort(-logits, kind="stable")[:, :k]` (top-1 is
`np.argmax`). A row with a non-finite logit is never correct. k = min(5, classes) for top-5.
"""
import weakref

import numpy as np
import mindspore
from mindspore import Tensor, nn, ops

from src.accuracy import accuracy_report, correct_topk

__all__ = ["evaluate"]


def _batch_outputs(network, loss_fn, images, labels, valid):
    """(float32 logits, int32 classes, loss summed over valid images or 0); the top-k counts are
    taken from the logits on the host (src/accuracy.py, the rule postprocess.py applies too)."""
    logits = ops.cast(network(images), mindspore.float32)
    classes = ops.argmax(labels, dim=-1) if labels.ndim == 2 else labels  # soft targets: argmax
    loss_sum = Tensor(0.0, mindspore.float32)
    if loss_fn is not None:
        losses = ops.cast(loss_fn(logits, labels), mindspore.float32)
        if losses.ndim != 1:
            raise ValueError("evaluate needs per-image losses: build the loss with reduction='none'")
        loss_sum = ops.sum(losses * ops.cast(valid, mindspore.float32))
    return logits, ops.cast(classes, mindspore.int32), loss_sum


def _batch_counts(logits, classes, valid):
    """[valid images, correct top-1, correct top-5] of one batch (NumPy arrays in)."""
    rows = valid.astype(bool)
    logits, classes = logits[rows], classes[rows]
    k5 = min(5, logits.shape[-1])
    return np.array([len(classes), correct_topk(logits, classes, 1), correct_topk(logits, classes, k5)], np.int64)


def evaluate(network, dataset, loss_fn=None, distributed=False, jit=True, progress=None):
    """Evaluate `network` on `dataset`, counting every valid image exactly once.

    Args:
        network: the model; it is put in inference mode for the call and restored after.
        dataset: a ``mindspore.dataset`` whose rows are (image, label) or
            (image, label, valid); label is an int class (or a soft-target vector, whose
            largest entry is the class), valid 1/0 marks padding rows.
        loss_fn: optional loss with ``reduction="none"`` (e.g.
            ``create_loss("ce", reduction="none")``), averaged over the valid images.
        distributed: each process evaluated its own shard; sum the counts over all
            processes (all-reduce) so every process returns the whole set's numbers.
        jit: compile the forward and the counting with ``mindspore.jit`` (works in
            PyNative and Graph mode).
        progress: optional callable, called with the number of valid images of each batch done.

    Returns:
        dict(top1, top5, loss, count, correct_top1, correct_top5): accuracies as fractions
        in [0, 1], loss the mean per-image loss (None without loss_fn), count the number of
        valid images.
    """
    if loss_fn is not None and getattr(loss_fn, "reduce", False):
        raise ValueError("evaluate needs per-image losses to leave out padding: build the loss "
                         "with reduction='none'")

    step = _make_counter(network, loss_fn, jit)
    was_training = network.training
    network.set_train(False)
    counts = np.zeros(3, np.int64)  # images, top-1, top-5
    loss_sum = 0.0
    try:
        for row in dataset.create_tuple_iterator(num_epochs=1):
            images, labels = row[0], row[1]
            valid = row[2] if len(row) > 2 else ops.ones(images.shape[0], mindspore.int32)
            logits, classes, batch_loss = step(images, labels, valid)
            batch = _batch_counts(logits.asnumpy(), classes.asnumpy(), valid.asnumpy())
            counts += batch
            loss_sum += float(batch_loss.asnumpy())
            if progress is not None:
                progress(int(batch[0]))
    finally:
        network.set_train(was_training)
    if distributed:
        counts, loss_sum = _all_reduce_sums(counts, loss_sum)
    count, top1, top5 = (int(c) for c in counts)
    return accuracy_report(top1, top5, count, loss=loss_sum / count if (loss_fn is not None and count) else None)


class _BatchCounter(nn.Cell):
    """The per-batch counting as a Cell, compiled once in Graph mode and reused.

    Not a cached jit closure: a jit function (and a jit-decorated construct in PyNative
    mode) captures the weights as they were when it compiled, so later evaluations (new
    weights, EMA weights swapped in) would silently score the first ones (measured with
    MindSpore 2.10); a Graph-mode Cell reads its Parameters on every call.
    """

    def __init__(self, network, loss_fn):
        super().__init__(auto_prefix=False)
        self.network = network
        self.loss_fn = loss_fn

    def construct(self, images, labels, valid):
        return _batch_outputs(self.network, self.loss_fn, images, labels, valid)


# network -> {(loss_fn id, jit): counter}: one compiled counter per network, reused by every
# evaluation during training instead of compiling the graph again each epoch
_COUNTERS = weakref.WeakKeyDictionary()


def _make_counter(network, loss_fn, jit):
    if mindspore.get_context("mode") != mindspore.GRAPH_MODE:
        def counter(images, labels, valid):
            return _batch_outputs(network, loss_fn, images, labels, valid)
        # a new jit function per evaluation: it compiles again, but sees the current weights
        return mindspore.jit(counter) if jit else counter
    cache = _COUNTERS.setdefault(network, {})
    if id(loss_fn) not in cache:
        cache[id(loss_fn)] = _BatchCounter(network, loss_fn)
    return cache[id(loss_fn)]


def _all_reduce_sums(counts, loss_sum):
    """Sum the per-process counts and loss sums over all processes.

    The counts travel as float32 (exact below 2**24 images per count): MindSpore 2.10's CPU
    AllReduce takes float32/float16 only.
    """
    if counts.max() >= 2 ** 24:
        raise ValueError("evaluation counts beyond float32's exact integers")
    all_reduce = ops.AllReduce()
    counts = np.rint(all_reduce(Tensor(counts.astype(np.float32))).asnumpy()).astype(np.int64)
    loss_sum = float(all_reduce(Tensor(np.float32(loss_sum))).asnumpy())
    return counts, loss_sum
