"""Per-step train loss and lr in metrics_steps.csv (so curves.png shows the warm-up), across a resume."""
import os

import numpy as np
import pytest
from mindspore.train import Callback, Model

from src.run.callbacks import ProgressLogger, step_loss
from src.run.metrics_log import STEP_COLUMNS, MetricsCSV, plot_curves, read_metrics
from src.run.state import RunState
from test_callbacks import BATCH, STEPS_PER_EPOCH, make_dataset, make_run


class RecordLosses(Callback):
    def __init__(self):
        super().__init__()
        self.losses = []

    def on_train_step_end(self, run_context):
        self.losses.append(step_loss(run_context.original_args().net_outputs))


@pytest.mark.timeout(120)
def test_every_step_loss_and_lr_are_written_and_drawn(tmp_path):
    path, steps_path, png = (str(tmp_path / n) for n in ("metrics.csv", "metrics_steps.csv", "curves.png"))
    recorded = RecordLosses()

    def run(first, last, append):
        train_cell, _, lr = make_run(epochs=3)
        state = RunState()
        logger = ProgressLogger(100, STEPS_PER_EPOCH, BATCH, lr, 3, log_fn=lambda line: None, state=state)
        Model(train_cell).train(last, make_dataset(), initial_epoch=first, callbacks=[
            logger, recorded, MetricsCSV(path, png, append=append, steps_path=steps_path, state=state)])
        return lr

    run(0, 1, append=False)
    lr = run(1, 3, append=True)  # resumed: steps 5..12 appended
    rows = read_metrics(steps_path, STEP_COLUMNS)
    assert [int(r["step"]) for r in rows] == list(range(1, 13))
    assert [r["epoch"] for r in rows] == pytest.approx([s / STEPS_PER_EPOCH for s in range(1, 13)])
    assert [r["lr"] for r in rows] == pytest.approx(lr.tolist(), rel=1e-6)  # one lr per step
    assert [r["train_loss"] for r in rows] == pytest.approx(recorded.losses, rel=1e-6)
    epochs = read_metrics(path)
    assert [r["train_loss"] for r in epochs] == pytest.approx(
        [np.mean(recorded.losses[i:i + STEPS_PER_EPOCH]) for i in range(0, 12, STEPS_PER_EPOCH)], rel=1e-6)
    with open(png, "rb") as f:
        assert f.read(4) == b"\x89PNG"
    assert plot_curves(path, str(tmp_path / "again.png"), steps_path) == str(tmp_path / "again.png")

    run(0, 1, append=False)  # a new run in a reused directory starts both files anew
    assert [int(r["step"]) for r in read_metrics(steps_path, STEP_COLUMNS)] == [1, 2, 3, 4]
    assert sorted(os.listdir(tmp_path)) == ["again.png", "curves.png", "metrics.csv", "metrics_steps.csv"]
