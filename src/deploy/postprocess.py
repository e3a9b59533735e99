"""result_Files/<name>_0.bin logits + labels.json -> top-1 / top-5 counts (no MindSpore needed)."""
import os

from .binio import DTYPE, RESULT_SUFFIX, list_bins, read_labels, read_tensor, result_name
from .errors import DeployError
from src.accuracy import accuracy_report, correct_topk


def _layout(result_path, labels):
    """(rows per file, classes per row), from the result sizes and the label lists.

    Every result file has the same size, batch * classes float32 values; the batch is the
    longest label list (a full file; only the last one may hold fewer real images).
    """
    sizes = {name: os.path.getsize(os.path.join(result_path, result_name(name))) for name in labels}
    common = max(set(sizes.values()), key=list(sizes.values()).count)
    odd = sorted(n for n, s in sizes.items() if s != common)
    if odd:
        raise DeployError(f"{os.path.join(result_path, result_name(odd[0]))}: {sizes[odd[0]]} bytes, "
                          f"but the other results have {common} ({len(odd)} file(s) differ)")
    batch = max(len(v) for v in labels.values())
    values = common // DTYPE.itemsize
    if common % DTYPE.itemsize or values == 0 or values % batch:
        raise DeployError(f"{result_path}: results of {common} bytes do not hold {batch} float32 logit rows")
    return batch, values // batch


def evaluate_results(result_path, label_path, num_classes=None):
    """Top-1 / top-5 of the results against the labels; returns accuracy_report(...).

    Raises DeployError when a result has no label or a label no result (counts differ),
    when a label is out of range, or when a result file has the wrong size.
    """
    labels = read_labels(label_path)
    results = list_bins(result_path, RESULT_SUFFIX)
    names = {f[:-len(RESULT_SUFFIX)] for f in results}
    no_label = sorted(names - set(labels))
    no_result = sorted(set(labels) - names)
    if no_label or no_result:
        parts = [f"{len(results)} results in {result_path}, {len(labels)} labels in {label_path}"]
        if no_label:
            parts.append(f"no label for {result_name(no_label[0])}" + (f" (+{len(no_label) - 1} more)"
                                                                       if len(no_label) > 1 else ""))
        if no_result:
            parts.append(f"no result for {no_result[0]}" + (f" (+{len(no_result) - 1} more)"
                                                            if len(no_result) > 1 else ""))
        raise DeployError("; ".join(parts))
    batch, classes = _layout(result_path, labels)
    if num_classes is not None and classes != num_classes:
        raise DeployError(f"{result_path}: results hold {classes} logits per image, expected {num_classes}")
    correct1 = correct5 = count = 0
    for name in sorted(labels):
        rows = labels[name]
        bad = [v for v in rows if v >= classes]
        if bad:
            raise DeployError(f"{label_path}: label {bad[0]} of {name!r} is out of range for {classes} classes")
        logits = read_tensor(os.path.join(result_path, result_name(name)), (batch, classes))[:len(rows)]
        correct1 += correct_topk(logits, rows, 1)
        correct5 += correct_topk(logits, rows, 5)
        count += len(rows)
    return accuracy_report(correct1, correct5, count)


def format_report(report):
    return (f"top-1 {100 * report['top1']:.2f}% ({report['correct_top1']}/{report['count']}), "
            f"top-5 {100 * report['top5']:.2f}% ({report['correct_top5']}/{report['count']}), "
            f"{report['count']} images")

