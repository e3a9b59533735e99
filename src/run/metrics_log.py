"""Per-epoch and per-step metrics as CSV files, and PNG curves drawn from them.

metrics.csv is an append-only log with one row per complete epoch: a resumed run appends to it,
the header is written once, and every row is fsynced, so a killed run loses at most the row
it was writing. An epoch cut by a stop (SIGTERM, --max_steps) gets no row: its resumed run
writes it once, with the loss, images and seconds of all its steps (the mid-epoch checkpoint
carries those of the steps before). After a kill -9 and a resume from an older checkpoint the same
epoch can appear twice; `read_metrics` keeps the last row of each epoch, and so do the curves.
metrics_steps.csv holds every train step's loss and lr (written once per epoch and when a run
stops, the same rules by step), so the curves show the warm-up and the steps of a cut epoch.
"""
import csv
import io
import math
import os
import time

from src.atomic import atomic_path
from src.errors import UserError
from src.run.callbacks import RunCallback

__all__ = ["MetricsCSV", "read_metrics", "plot_curves", "COLUMNS", "STEP_COLUMNS"]

COLUMNS = ("epoch", "train_loss", "lr", "top1", "top5", "val_loss", "images", "seconds")
STEP_COLUMNS = ("step", "epoch", "train_loss", "lr")  # epoch: fractional, step / steps per epoch
_TAIL = 65536  # bytes read from a CSV's end to find its last complete line (rows are far shorter)


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return format(value, ".10g")  # "nan" for an epoch without a finite loss
    return str(value)


class MetricsCSV(RunCallback):
    """Writes one CSV row per epoch from the run state's epoch record; draws curves at the end.

    Last in the callback list (src/run/callbacks.py): it takes train_loss, lr, images, seconds
    (ProgressLogger) and top1, top5, val_loss (EvalCallback) from the state's `epoch_record`
    (columns without a value, e.g. top1 in an epoch without evaluation, stay empty).

    Args:
        path: the CSV file.
        png_path: where plot_curves draws at the end of training (None: no curves).
        append: keep an existing file's rows (a resumed run); False starts the file anew
            (a new run in a reused directory).
        is_main: only rank 0 writes.
        log_fn: where a failure to draw the curves is reported (it never stops training).
        steps_path: the per-step CSV (None: no per-step rows); its rows come from the step
            record ProgressLogger leaves in the state (step_record).
        state: the run's RunState (src/run/state.py).
    """

    def __init__(self, path, png_path=None, append=True, is_main=True, log_fn=print, steps_path=None, *, state):
        super().__init__(state)
        self.path = path
        self.png_path = png_path
        self.is_main = is_main
        self.log_fn = log_fn
        self.steps_path = steps_path
        self._epoch_time = None
        self._step_rows = []
        if is_main:
            directory = os.path.dirname(os.path.abspath(path))
            os.makedirs(directory, exist_ok=True)
            for file, columns in ((path, COLUMNS), (steps_path, STEP_COLUMNS)):
                if file is not None and not append and os.path.exists(file):
                    os.remove(file)
                if file is not None:
                    _check_header(file, columns, log_fn)

    def append(self, row):
        """Append one row (a dict with keys from COLUMNS; others are ignored) and fsync it."""
        if self.is_main:
            _append_rows(self.path, COLUMNS, [row])

    def on_train_step_end(self, run_context):
        record = self.state.step_record
        if self.steps_path is not None and self.is_main and record is not None:
            self._step_rows.append(record)

    def _write_steps(self):
        if self._step_rows:
            _append_rows(self.steps_path, STEP_COLUMNS, self._step_rows)
            self._step_rows = []

    def on_train_epoch_begin(self, run_context):
        super().on_train_epoch_begin(run_context)
        self._epoch_time = time.time()

    def on_train_epoch_end(self, run_context):
        row = dict(self.state.epoch_record)
        if row.get("seconds") is None and self._epoch_time is not None:
            row["seconds"] = time.time() - self._epoch_time
        self._write_steps()
        if row.get("complete", True):  # a cut epoch: its steps are in steps_path, its row comes with the resume
            self.append(row)

    def on_train_end(self, run_context):
        if not self.is_main:
            return
        self._write_steps()  # steps of an epoch cut short
        if not self.png_path:
            return
        try:
            plot_curves(self.path, self.png_path, self.steps_path)
        except Exception as exc:  # curves are a convenience; never fail a finished run over them
            self.log_fn(f"warning: could not draw {self.png_path}: {exc}")


def _check_header(path, columns, log_fn=print):
    """A CSV a resumed run appends to must be this log: the header of `columns`, else a one-line UserError.

    A run killed while writing leaves a cut last line: a cut header (no rows yet) starts the file anew, a
    cut row is dropped; either is said through log_fn. Reads the first line and the tail only.
    """
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return
    expected = ",".join(columns)
    with open(path, "rb") as f:
        first = f.readline()
        size = f.seek(0, os.SEEK_END)
        f.seek(max(0, size - _TAIL))
        tail = f.read()
    header = first.rstrip(b"\r\n").decode("utf-8", "replace")
    if not first.endswith(b"\n") and expected.startswith(header):
        os.remove(path)
        log_fn(f"{path}: its header was cut by a killed run, before any row: started anew")
        return
    if header != expected:
        raise UserError(f"{path} has columns {_show(header)}, not {expected}: not this run's metrics log; move it "
                        "away or write this run to another output_dir")
    if not tail.endswith(b"\n"):
        cut = size - max(0, size - _TAIL) - (tail.rfind(b"\n") + 1)
        os.truncate(path, size - cut)
        log_fn(f"{path}: its last line was cut by a killed run ({cut} bytes of an unfinished row): dropped that "
               "row, appending after the complete ones")


def _show(text, limit=80):
    return text if len(text) <= limit else text[:limit] + "..."


def _append_rows(path, columns, rows):
    """Append rows (dicts; keys outside `columns` ignored) to the CSV at `path`, header first if new; fsync."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    new_file = not os.path.exists(path) or os.path.getsize(path) == 0
    if new_file:
        writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(row.get(column)) for column in columns])
    with open(path, "a+b") as f:
        # a run killed mid-row leaves a line without its newline: end it before appending
        if not new_file:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
        f.write(buffer.getvalue().encode("utf-8"))
        f.flush()
        os.fsync(f.fileno())


def _number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def read_metrics(csv_path, columns=COLUMNS):
    """Rows of a metrics CSV as dicts of floats (None for empty cells), one per epoch.

    Rows that cannot be read (a line cut by a kill) are skipped; of rows with the same
    epoch the last one wins. Sorted by epoch. With columns=STEP_COLUMNS: the rows of
    metrics_steps.csv, one per step.
    """
    key = columns[0]  # epoch, or step
    by_key = {}
    with open(csv_path, newline="", encoding="utf-8") as f:
        for raw in csv.DictReader(f):
            row = {column: _number(raw.get(column)) for column in columns}
            if row[key] is None or None in raw.values() or len(raw) != len(columns):
                continue
            by_key[int(row[key])] = row
    return [by_key[k] for k in sorted(by_key)]


def plot_curves(csv_path, png_path, steps_path=None):
    """Draw loss (train, val), accuracy (top-1, top-5) and lr against the epoch into png_path.

    With a per-step CSV (`steps_path`, when it exists) the train loss of every step is drawn
    faintly under the epoch averages, and the lr per step (the warm-up is visible).

    Uses matplotlib's Agg canvas directly (no pyplot, no global backend switch), imported
    here so that training never needs matplotlib before the end. The PNG is written to a
    temporary name and renamed, so an interrupted plot leaves no half-written image.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = read_metrics(csv_path) if os.path.exists(csv_path) else []
    steps = read_metrics(steps_path, STEP_COLUMNS) if steps_path and os.path.exists(steps_path) else []
    if not rows and not steps:
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
        if steps and title in ("loss", "learning rate"):
            column = "train_loss" if title == "loss" else "lr"
            points = [(row["epoch"], row[column]) for row in steps
                      if row[column] is not None and math.isfinite(row[column])]
            if points:
                xs, ys = zip(*points)
                axes.plot(xs, ys, linewidth=0.8, alpha=0.35 if title == "loss" else 1.0,
                          label="train (per step)" if title == "loss" else "lr")
            if title == "learning rate":
                series = ()  # the per-step lr replaces the per-epoch points
        for column, label in series:
            points = [(row["epoch"], row[column]) for row in rows
                      if row[column] is not None and math.isfinite(row[column])]
            if points:
                xs, ys = zip(*points)
                axes.plot(xs, ys, marker="o" if len(points) < 30 else None, markersize=3, label=label)
        if not axes.lines:  # e.g. accuracy without an evaluation: say so rather than an empty frame
            axes.text(0.5, 0.5, "no evaluation yet" if title == "accuracy" else "no complete epoch yet",
                      ha="center", va="center", transform=axes.transAxes, color="gray")
        axes.set_title(title)
        axes.set_xlabel("epoch")
        axes.grid(True, alpha=0.3)
        if len(axes.get_legend_handles_labels()[0]) > 1:
            axes.legend()
    figure.tight_layout()
    with atomic_path(png_path) as tmp:
        figure.savefig(tmp, format="png")
    return png_path
