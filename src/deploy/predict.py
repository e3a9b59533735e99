"""Top-k predictions for unlabelled images: from a checkpoint, an exported MINDIR or an ONNX model.

predict.py's work. Images (files, folders searched recursively, or text lists of paths)
go through the evaluation transform in the data pipeline's worker pool
(src.data.dataset.create_file_dataset), in batches, to one of three runners with the
same interface (`batch_size`, `image_size`, `__call__(float32 NCHW) -> logits`):

    CheckpointRunner   the eval network built from a .ckpt (EMA weights when present)
    ModelRunner        an exported MINDIR (MindSpore) or ONNX model (ONNX Runtime), loaded by
                       src.deploy.infer_cpu

A graph exported with a fixed batch gets its last batch padded with zeros. Unreadable
images are skipped and listed, as eval.py does.
"""
import csv
import io
import json
import os

import numpy as np

from src.atomic import write_atomic
from src.data.folder import IMG_EXTENSIONS, escape_name

from .errors import DeployError

LIST_EXTENSIONS = (".txt", ".lst")


# --------------------------------------------------------------------------- inputs

def _walk_images(folder):
    found = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        found.extend(os.path.join(dirpath, f) for f in sorted(filenames)
                     if f.lower().endswith(IMG_EXTENSIONS) and not f.startswith("."))
    return found


def read_text_lines(path, what):
    """The stripped lines of a UTF-8 text file; one DeployError naming it when it cannot be read or decoded."""
    try:
        with open(path, encoding="utf-8") as f:
            return [line.strip() for line in f]
    except UnicodeDecodeError as exc:
        raise DeployError(f"{what} {path}: not UTF-8 text (byte {exc.start}: {exc.object[exc.start:exc.start + 1]!r}); "
                          f"save it as UTF-8") from None
    except OSError as exc:
        raise DeployError(f"{what} {path}: {exc.strerror or exc}") from None


def _read_list(path):
    """Image paths listed one per line in a text file (relative ones are relative to the file's folder)."""
    base = os.path.dirname(os.path.abspath(path))
    lines = read_text_lines(path, "image list")
    return [line if os.path.isabs(line) else os.path.join(base, line) for line in lines
            if line and not line.startswith("#")]


def collect_images(inputs):
    """The image files named by `inputs` (files, folders searched recursively, .txt/.lst lists), in order,
    each once. A missing input, or a file that is neither an image nor a list, is a one-line DeployError;
    a listed file that is missing is kept (it is reported as unreadable)."""
    paths, seen = [], set()
    for item in inputs:
        if os.path.isdir(item):
            found = _walk_images(item)
            if not found:
                raise DeployError(f"no images ({'/'.join(IMG_EXTENSIONS)}) in {item}")
        elif os.path.isfile(item) and item.lower().endswith(LIST_EXTENSIONS):
            found = _read_list(item)
            if not found:
                raise DeployError(f"{item}: the list names no image")
        elif os.path.isfile(item) and item.lower().endswith(IMG_EXTENSIONS):
            found = [item]
        elif os.path.exists(item):
            raise DeployError(f"{item}: not an image ({'/'.join(IMG_EXTENSIONS)}), a folder or a list "
                              f"({'/'.join(LIST_EXTENSIONS)})")
        else:
            raise DeployError(f"input not found: {item}")
        for path in found:
            key = os.path.realpath(path)
            if key not in seen:
                seen.add(key)
                paths.append(path)
    return paths


def read_class_names(path):
    """Class names, one per line, in label order."""
    names = [line for line in read_text_lines(path, "--class_names") if line]
    if not names:
        raise DeployError(f"class names file {path} is empty (one name per line expected)")
    return names


def check_class_count(runner, class_names, names_path=None, record=None, model_path=None):
    """The model's logits per image against --class_names (`names_path`) and an exported model's
    sidecar record (`record`): one DeployError naming the file that disagrees."""
    classes = runner.num_classes
    if names_path and len(class_names) != classes:
        raise DeployError(f"--class_names {names_path}: {len(class_names)} names for the model's {classes} classes "
                          f"(one name per line, in label order)")
    if record is not None and model_path is not None:
        from src.data.data_settings import sidecar_path

        counts = {"num_classes": record.get("num_classes")}
        if record.get("classes"):
            counts["classes"] = len(record["classes"])
        for key, count in counts.items():
            if count is not None and count != classes:
                raise DeployError(f"{model_path} gives {classes} logits per image, but its data settings "
                                  f"{sidecar_path(model_path)} say {key} {count}: not the model they were "
                                  f"written for (export it again)")


# --------------------------------------------------------------------------- runners

def _pad(batch, size):
    if batch.shape[0] == size:
        return batch
    pad = np.zeros((size - batch.shape[0],) + batch.shape[1:], batch.dtype)
    return np.concatenate([batch, pad])


class CheckpointRunner:
    """The eval network of a checkpoint (cfg's arch and classes; EMA weights when cfg.use_ema and present)."""

    def __init__(self, cfg, checkpoint, batch_size):
        import mindspore as ms

        from src.builders import build_eval_network

        self.network, ema = build_eval_network(cfg, checkpoint, fast_forms=False)
        self.weights = "EMA" if ema else "raw"
        self.batch_size, self.image_size = batch_size, cfg.test_input_size
        self.num_classes = cfg.num_classes
        self._tensor = ms.Tensor

    def __call__(self, batch):
        n = batch.shape[0]  # padded to one shape: the graph compiles once
        return self.network(self._tensor(_pad(batch, self.batch_size))).asnumpy()[:n]


class ModelRunner:
    """An exported model: a MINDIR through MindSpore, an ONNX model through ONNX Runtime
    (src.deploy.infer_cpu's loaders). A fixed batch comes from the graph; a free one is `batch_size`."""

    def __init__(self, path, batch_size, device_target="CPU"):
        from .infer_cpu import load_mindir, load_onnx

        is_onnx = path.lower().endswith(".onnx")
        self.run, shape = load_onnx(path) if is_onnx else load_mindir(path, device_target)
        self.fixed_batch = shape[0]
        self.batch_size = self.fixed_batch or batch_size
        self.image_size = shape[-1]
        probe = np.zeros((self.fixed_batch or 1,) + tuple(shape[1:]), np.float32)  # its output size, before any image
        self.num_classes = int(np.asarray(self.run(probe)).shape[-1])

    def __call__(self, batch):
        n = batch.shape[0]
        x = _pad(batch, self.fixed_batch) if self.fixed_batch else batch
        return self.run(np.ascontiguousarray(x, np.float32))[:n]


# --------------------------------------------------------------------------- top-k and output

def top_k(logits, k):
    """(indices, probabilities) of the k most probable classes per row (softmax in float64)."""
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(shifted)
    probs /= probs.sum(axis=1, keepdims=True)
    k = min(k, logits.shape[1])
    order = np.argsort(-logits, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(probs, order, axis=1)


def predict(runner, dataset, paths, k, class_names=None, progress=None):
    """[{"path", "topk": [{"index", "label", "probability"}, ...]}] for every readable image, in input order."""
    results = {}
    for row in dataset.create_tuple_iterator(num_epochs=1, output_numpy=True):
        images, index, valid = row
        keep = valid.astype(bool)
        if keep.any():
            order, probs = top_k(runner(images)[keep], k)
            for i, classes, p in zip(index[keep], order, probs):
                results[int(i)] = [{"index": int(c), "label": _label(class_names, c), "probability": float(q)}
                                   for c, q in zip(classes, p)]
        if progress is not None:
            progress.update(len(valid))
    return [{"path": paths[i], "topk": results[i]} for i in sorted(results)]


def _label(class_names, index):
    return class_names[index] if class_names and index < len(class_names) else str(int(index))


def output_format(path, fmt=None):
    """'json' or 'csv': `fmt` when given, else from the output file's extension."""
    if fmt:
        return fmt
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".json", ".csv"):
        raise DeployError(f"--output {path}: name a .json or .csv file, or give --format json|csv")
    return ext[1:]


def format_predictions(predictions, fmt, k, meta):
    """The output file's text: JSON {**meta, predictions} or CSV path,label_1,probability_1,index_1,..."""
    if fmt == "json":
        return json.dumps({**meta, "predictions": predictions}, indent=1) + "\n"
    k = len(predictions[0]["topk"]) if predictions else k  # at most the class count
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["path"] + [f"{col}_{r}" for r in range(1, k + 1) for col in ("label", "probability", "index")])
    for item in predictions:
        row = [item["path"]]
        for entry in item["topk"]:
            row += [entry["label"], f"{entry['probability']:.6f}", entry["index"]]
        writer.writerow(row)
    return buffer.getvalue()


def write_predictions(path, text):
    """Write the output file (checked before the work: src.deploy.cli.check_output)."""
    write_atomic(path, text)


def bad_files_path(output):
    """Where the unreadable images of a run with `--output output` are listed: <output stem>_bad_files.txt."""
    return os.path.splitext(output)[0] + "_bad_files.txt"


def format_line(item):
    """'path: label 93.1%, label 3.2%, ...' for the console: one line per image, whatever the names hold
    (a newline in a file or class name is written as \\n: folder.escape_name)."""
    return f"{escape_name(item['path'])}: " + ", ".join(f"{escape_name(e['label'])} {100 * e['probability']:.1f}%"
                                                        for e in item["topk"])
