"""Per-epoch metrics as a CSV file, and PNG curves drawn from it.

The CSV is an append-only log with one row per epoch: a resumed run appends to it, the
header is written once, and every row is fsynced, so a killed run loses at most the row
it was writing. After a crash and resume the same epoch can appear twice (written
before the kill, then again after the resume); `read_metrics` keeps the last row of
each epoch, and so do the curves.
"""
import csv
import io
import math
import os
import time

from mindspore.train import Callback

from src.tools.callbacks import epoch_record

__all__ = ["MetricsCSV", "read_metrics", "plot_curves", "COLUMNS"]

COLUMNS = ("epoch", "train_loss", "lr", "top1", "top5", "val_loss", "images", "seconds")


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return format(value, ".10g")  # "nan" for an epoch without a finite loss
    return str(value)


class MetricsCSV(Callback):
    """Writes one CSV row per epoch from the callbacks' epoch record; draws curves at the end.

    Put it after ProgressLogger and EvalCallback in the callback list: it takes train_loss,
    lr, images, seconds and top1, top5, val_loss from `epoch_record` (columns without a
    value, e.g. top1 in an epoch without evaluation, stay empty).

    Args:
        path: the CSV file.
        png_path: where plot_curves draws at the end of training (None: no curves).
        append: keep an existing file's rows (a resumed run); False starts the file anew
            (a new run in a reused directory).
        is_main: only rank 0 writes.
        log_fn: where a failure to draw the curves is reported (it never stops training).
    """

    def __init__(self, path, png_path=None, append=True, is_main=True, log_fn=print):
        super().__init__()
        self.path = path
        self.png_path = png_path
        self.is_main = is_main
        self.log_fn = log_fn
        self._epoch_time = None
        if is_main:
            directory = os.path.dirname(os.path.abspath(path))
            os.makedirs(directory, exist_ok=True)
            if not append and os.path.exists(path):
                os.remove(path)
            self._check_header()

    def _check_header(self):
        if not os.path.exists(self.path) or os.path.getsize(self.path) == 0:
            return
        with open(self.path, newline="", encoding="utf-8") as f:
            header = next(csv.reader(f), [])
        if tuple(header) != COLUMNS:
            raise ValueError(f"{self.path} has columns {','.join(header)}, not {','.join(COLUMNS)}: "
                             "move it away or write this run to another output_dir")

    def append(self, row):
        """Append one row (a dict with keys from COLUMNS; others are ignored) and fsync it."""
        if not self.is_main:
            return
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        new_file = not os.path.exists(self.path) or os.path.getsize(self.path) == 0
        if new_file:
            writer.writerow(COLUMNS)
        writer.writerow([_cell(row.get(column)) for column in COLUMNS])
        with open(self.path, "a+b") as f:
            # a run killed mid-row leaves a line without its newline: end it before appending
            if not new_file:
                f.seek(-1, os.SEEK_END)
                if f.read(1) != b"\n":
                    f.write(b"\n")
            f.write(buffer.getvalue().encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())

    def on_train_epoch_begin(self, run_context):
        self._epoch_time = time.time()

    def on_train_epoch_end(self, run_context):
        row = dict(epoch_record(run_context.original_args()))
        if row.get("seconds") is None and self._epoch_time is not None:
            row["seconds"] = time.time() - self._epoch_time
        self.append(row)

    def on_train_end(self, run_context):
        if not (self.is_main and self.png_path):
            return
        try:
            plot_curves(self.path, self.png_path)
        except Exception as exc:  # curves are a convenience; never fail a finished run over them
            self.log_fn(f"warning: could not draw {self.png_path}: {exc}")


def _number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def read_metrics(csv_path):
    """Rows of a metrics CSV as dicts of floats (None for empty cells), one per epoch.

    Rows that cannot be read (a line cut by a kill) are skipped; of rows with the same
    epoch the last one wins. Sorted by epoch.
    """
    by_epoch = {}
    with open(csv_path, newline="", encoding="utf-8") as f:
        for raw in csv.DictReader(f):
            row = {column: _number(raw.get(column)) for column in COLUMNS}
            if row["epoch"] is None or None in raw.values() or len(raw) != len(COLUMNS):
                continue
            by_epoch[int(row["epoch"])] = row
    return [by_epoch[epoch] for epoch in sorted(by_epoch)]


def plot_curves(csv_path, png_path):
    """Draw loss (train, val), accuracy (top-1, top-5) and lr against the epoch into png_path.

    Uses matplotlib's Agg canvas directly (no pyplot, no global backend switch), imported
    here so that training never needs matplotlib before the end. The PNG is written to a
    temporary name and renamed, so an interrupted plot leaves no half-written image.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = read_metrics(csv_path)
    if not rows:
        raise ValueError(f"{csv_path} has no complete rows to plot")
    figure = Figure(figsize=(15, 4.2), dpi=100)
    FigureCanvasAgg(figure)
    panels = (
        ("loss", (("train_loss", "train"), ("val_loss", "val"))),
        ("accuracy", (("top1", "top-1"), ("top5", "top-5"))),
        ("learning rate", (("lr", "lr"),)),
    )
    for index, (title, series) in enumerate(panels, start=1):
        axes = figure.add_subplot(1, 3, index)
        for column, label in series:
            points = [(row["epoch"], row[column]) for row in rows
                      if row[column] is not None and math.isfinite(row[column])]
            if points:
                xs, ys = zip(*points)
                axes.plot(xs, ys, marker="o" if len(points) < 30 else None, markersize=3, label=label)
        axes.set_title(title)
        axes.set_xlabel("epoch")
        axes.grid(True, alpha=0.3)
        if len(series) > 1:
            axes.legend()
    figure.tight_layout()
    directory, base = os.path.split(os.path.abspath(png_path))
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{base}.partial-{os.getpid()}.png")
    try:
        figure.savefig(tmp, format="png")
        os.replace(tmp, png_path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return png_path
