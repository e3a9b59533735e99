"""evaluate() counts every valid image once and matches numpy top-k and cross entropy."""
import numpy as np
import pytest
import mindspore
import mindspore.dataset as ds
from mindspore import Tensor, nn, ops

from src.trainers.loss import create_loss
from src.trainers.evaluate import evaluate


class LogitTable(nn.Cell):
    """Returns row i of a fixed logit table for the input "image" i (a 1-element float row)."""

    def __init__(self, table):
        super().__init__()
        self.table = Tensor(table)

    def construct(self, index):
        return ops.gather(self.table, ops.cast(index.reshape(-1), mindspore.int32), 0)


def make_logits(n, classes, seed=0):
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((n, classes)).astype(np.float32)
    labels = rng.integers(0, classes, n).astype(np.int32)
    logits[0] = 0.0                         # a constant row: argmax is class 0
    logits[1, :] = 1.0
    logits[1, labels[1]] = 1.0              # ties everywhere
    logits[2, 3 % classes] = logits[2].max() + 1.0  # a sure top-1
    return logits, labels


def numpy_metrics(logits, labels, k):
    order = np.argsort(-logits, axis=1, kind="stable")
    top1 = int(np.sum(order[:, 0] == labels))
    topk = int(np.sum((order[:, :k] == labels[:, None]).any(axis=1)))
    z = logits.astype(np.float64)
    log_probs = z - z.max(1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(1, keepdims=True))
    loss = float(-log_probs[np.arange(len(labels)), labels].mean())
    return top1, topk, loss


def padded_dataset(n, batch, shard=None, num_shards=1):
    """Rows 0..n-1 (sharded round-robin), padded with valid=0 rows to whole, equal batches."""
    index = np.arange(n)
    if shard is not None:
        index = index[shard::num_shards]
    per_shard = -(-n // num_shards)
    total = -(-per_shard // batch) * batch
    valid = np.zeros(total, np.int32)
    valid[:len(index)] = 1
    rows = np.zeros(total, np.int32)
    rows[:len(index)] = index
    return rows, valid


def _dataset(labels, rows, valid, batch, with_valid=True):
    data = {"image": rows.astype(np.float32).reshape(-1, 1), "label": labels[rows]}
    if with_valid:
        data["valid"] = valid
    return ds.NumpySlicesDataset(data, shuffle=False).batch(batch)


@pytest.mark.timeout(200)
@pytest.mark.parametrize("classes", [7, 3])
def test_counts_with_valid_mask_match_numpy_topk_and_loss(mode, classes):
    n, batch = 11, 4  # 3 batches, the last padded with one invalid row
    logits, labels = make_logits(n, classes)
    rows, valid = padded_dataset(n, batch)
    assert len(rows) == 12 and valid.sum() == 11
    result = evaluate(LogitTable(logits), _dataset(labels, rows, valid, batch),
                      loss_fn=create_loss("ce", reduction="none"))
    k = min(5, classes)
    top1, topk, loss = numpy_metrics(logits, labels, k)
    assert (result["count"], result["correct_top1"], result["correct_top5"]) == (n, top1, topk)
    assert result["top1"] == top1 / n and result["top5"] == topk / n
    # measured: relative 6.2e-7 (7 classes) / 4.9e-7 (3), float32 against float64
    assert abs(result["loss"] - loss) < 1e-5 * loss
    if classes == 3:
        assert result["top5"] == 1.0  # k capped at the class count


@pytest.mark.timeout(200)
def test_unpadded_last_partial_batch_is_counted_and_no_valid_column_means_all_valid():
    n, batch = 10, 4  # batches of 4, 4, 2
    logits, labels = make_logits(n, 7, seed=1)
    rows = np.arange(n, dtype=np.int32)
    result = evaluate(LogitTable(logits), _dataset(labels, rows, None, batch, with_valid=False))
    top1, top5, _ = numpy_metrics(logits, labels, 5)
    assert (result["count"], result["correct_top1"], result["correct_top5"]) == (n, top1, top5)
    assert result["loss"] is None


@pytest.mark.timeout(200)
def test_shard_counts_add_up_to_the_whole_set_without_drops_or_repeats():
    n, batch, shards = 13, 4, 3
    logits, labels = make_logits(n, 7, seed=2)
    top1, top5, _ = numpy_metrics(logits, labels, 5)
    totals = np.zeros(3, np.int64)
    for shard in range(shards):  # what the all-reduce of distributed=True sums
        rows, valid = padded_dataset(n, batch, shard, shards)
        r = evaluate(LogitTable(logits), _dataset(labels, rows, valid, batch))
        totals += (r["count"], r["correct_top1"], r["correct_top5"])
    assert tuple(totals) == (n, top1, top5)


def test_non_finite_logits_are_never_correct_and_ties_follow_argmax():
    logits = np.array([[np.nan, 0.0, 0.0], [1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, np.inf, 0.0]],
                      np.float32)
    labels = np.array([1, 0, 1, 1], np.int32)
    rows = np.arange(4, dtype=np.int32)
    result = evaluate(LogitTable(logits), _dataset(labels, rows, None, 4, with_valid=False))
    # row 0: NaN; row 1: tie, argmax -> 0 correct; row 2: tie, class 1 second; row 3: inf
    assert (result["correct_top1"], result["correct_top5"]) == (1, 2)


def test_a_mean_reduced_loss_is_refused():
    logits, labels = make_logits(4, 3)
    data = _dataset(labels, np.arange(4, dtype=np.int32), None, 4, with_valid=False)
    with pytest.raises(ValueError, match="reduction='none'"):
        evaluate(LogitTable(logits), data, loss_fn=create_loss("ce"))


@pytest.mark.timeout(200)
def test_evaluate_restores_training_mode_and_runs_the_network_in_inference_mode():
    """Dropout in training mode zeroes or doubles every logit (p 0.5, kept values scaled by 2), so the
    loss of a network left in training mode differs from the inference-mode loss on every run."""
    class Probe(nn.Cell):
        def __init__(self, table):
            super().__init__()
            self.table = LogitTable(table)
            self.drop = nn.Dropout(p=0.5)

        def construct(self, x):
            return self.drop(self.table(x))

    logits, labels = make_logits(8, 3, seed=4)
    logits += 0.5  # no zero logit: each one changes under dropout
    probe = Probe(logits)
    probe.set_train(True)
    r = evaluate(probe, _dataset(labels, np.arange(8, dtype=np.int32), None, 8, with_valid=False),
                 loss_fn=create_loss("ce", reduction="none"))
    top1, _, loss = numpy_metrics(logits, labels, 3)
    assert r["correct_top1"] == top1
    assert abs(r["loss"] - loss) < 1e-5 * loss  # measured: relative 1e-7 order (float32 against float64)
    assert probe.training


def test_soft_target_labels_count_their_largest_class():
    logits, labels = make_logits(6, 7, seed=3)
    soft = np.full((6, 7), 0.1 / 6, np.float32)
    soft[np.arange(6), labels] = 0.9
    data = ds.NumpySlicesDataset({"image": np.arange(6, dtype=np.float32).reshape(-1, 1),
                                  "label": soft}, shuffle=False).batch(4)
    result = evaluate(LogitTable(logits), data)
    top1, top5, _ = numpy_metrics(logits, labels, 5)
    assert (result["count"], result["correct_top1"], result["correct_top5"]) == (6, top1, top5)


@pytest.mark.parametrize("mode", [mindspore.GRAPH_MODE, mindspore.PYNATIVE_MODE], ids=["graph", "pynative"])
def test_a_second_evaluation_scores_the_current_weights_not_the_compiled_ones(mode):
    """Evaluation during training changes the weights between calls (training, EMA swap-in)."""
    mindspore.set_context(mode=mode)
    try:
        net = nn.Dense(4, 3)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((6, 4)).astype(np.float32)
        y = rng.integers(0, 3, 6).astype(np.int32)
        data = ds.NumpySlicesDataset({"image": x, "label": y}, shuffle=False).batch(4)
        losses, loss_fn = [], create_loss(reduction="none")
        for seed in (1, 2):
            w = np.random.default_rng(seed).standard_normal((3, 4)).astype(np.float32)
            net.weight.set_data(Tensor(w))
            got = evaluate(net, data, loss_fn)["loss"]
            logits = x @ w.T + net.bias.asnumpy()
            logp = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True)) \
                - logits.max(1, keepdims=True)
            expected = float(-logp[np.arange(6), y].mean())
            assert got == pytest.approx(expected, rel=1e-5)
            losses.append(got)
        assert losses[0] != losses[1]
    finally:
        mindspore.set_context(mode=mindspore.PYNATIVE_MODE)
