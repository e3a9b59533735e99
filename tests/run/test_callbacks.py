"""The training callbacks and the metrics log, driven by a real Model.train on the CPU.

A tiny Dense network is trained by a real TrainOneStepCell. `PoisonedLoss` adds a
non-trainable Parameter to the loss: set to NaN for chosen steps (by `PoisonSteps`), it
makes exactly those step losses non-finite while the gradients stay finite, so the run
can carry on or diverge as a test needs.
"""
import csv
import math
import os
import re

import numpy as np
import pytest
import mindspore as ms
from mindspore import Parameter, Tensor, nn
from mindspore.train import Callback, Model
import mindspore.dataset as ds

from src.run.callbacks import (CheckpointCallback, EvalCallback, NonFiniteLossGuard, ProgressLogger,
                                 step_loss)
from src.run.checkpointing import CheckpointManager, load_training_state, read_checkpoint_meta
from src.run.metrics_log import COLUMNS, MetricsCSV, plot_curves, read_metrics
from src.run.state import RunState

STEPS_PER_EPOCH, BATCH = 4, 4


class PoisonedLoss(nn.Cell):
    def __init__(self, network):
        super().__init__()
        self.network = network
        self.loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        self.poison = Parameter(Tensor(0.0, ms.float32), name="poison", requires_grad=False)

    def construct(self, x, y):
        return self.loss(self.network(x), y) + self.poison


class PoisonSteps(Callback):
    """Makes the loss of the given global steps (1-based) NaN; records every step's loss."""

    def __init__(self, cell, steps=()):
        super().__init__()
        self.cell, self.steps, self.losses = cell, set(steps), []

    def on_train_step_begin(self, run_context):
        step = len(self.losses) + 1
        self.cell.poison.set_data(Tensor(math.nan if step in self.steps else 0.0, ms.float32))

    def on_train_step_end(self, run_context):
        self.losses.append(step_loss(run_context.original_args().net_outputs))


def make_run(epochs, seed=0):
    ms.set_seed(seed)
    loss_cell = PoisonedLoss(nn.Dense(4, 3))
    lr = np.linspace(0.1, 0.01, epochs * STEPS_PER_EPOCH).astype(np.float32)
    opt = nn.Momentum(loss_cell.network.trainable_params(), learning_rate=lr, momentum=0.9)
    return nn.TrainOneStepCell(loss_cell, opt), loss_cell, lr


def make_dataset():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH * STEPS_PER_EPOCH, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0).astype(np.int32)
    return ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)


# --------------------------------------------------------------------------- progress

PROGRESS = re.compile(r"^epoch (\d+)/3 step (\d+)/4 loss (\S+) lr (\S+) (\S+) img/s( ETA \d+:\d\d:\d\d)?$")
EPOCH_END = re.compile(r"^epoch (\d+)/3 average loss (\S+) over (\d+) steps, lr (\S+), (\S+) s, (\S+) img/s$")


@pytest.mark.timeout(120)
def test_progress_lines_carry_epoch_step_loss_lr_speed_eta_and_the_epoch_average():
    train_cell, loss_cell, lr = make_run(epochs=3)
    lines = []
    recorder = PoisonSteps(loss_cell)
    logger = ProgressLogger(log_interval=2, steps_per_epoch=STEPS_PER_EPOCH, batch_size=BATCH,
                            lr_schedule=lr, total_epochs=3, log_fn=lines.append, state=RunState())
    Model(train_cell).train(3, make_dataset(), callbacks=[recorder, logger])

    progress = [PROGRESS.match(line) for line in lines if " step " in line]
    averages = [EPOCH_END.match(line) for line in lines if "average loss" in line]
    assert len(progress) == 6 and all(progress) and len(averages) == 3 and all(averages)
    for index, match in enumerate(progress):
        epoch, step = int(match[1]), int(match[2])
        global_step = (epoch - 1) * STEPS_PER_EPOCH + step
        assert (epoch, step) == (index // 2 + 1, 2 * (index % 2) + 2)
        assert float(match[3]) == pytest.approx(recorder.losses[global_step - 1], abs=5e-5)
        assert float(match[4]) == pytest.approx(lr[global_step - 1], rel=1e-4)
        assert float(match[5]) > 0
        assert match[6] is not None  # the first line (step 2) already knows one step's time
    assert progress[-1][6] == " ETA 0:00:00"
    for epoch, match in enumerate(averages, start=1):
        epoch_losses = recorder.losses[(epoch - 1) * STEPS_PER_EPOCH: epoch * STEPS_PER_EPOCH]
        assert int(match[1]) == epoch and int(match[3]) == STEPS_PER_EPOCH
        assert float(match[2]) == pytest.approx(np.mean(epoch_losses), abs=5e-5)
        assert float(match[4]) == pytest.approx(lr[epoch * STEPS_PER_EPOCH - 1], rel=1e-4)


def test_progress_logger_on_other_ranks_prints_nothing():
    train_cell, _, lr = make_run(epochs=1)
    lines = []
    logger = ProgressLogger(1, STEPS_PER_EPOCH, BATCH, lr, 1, log_fn=lines.append, is_main=False, state=RunState())
    Model(train_cell).train(1, make_dataset(), callbacks=[logger])
    assert lines == []


# --------------------------------------------------------------------------- non-finite losses

@pytest.mark.timeout(120)
def test_guard_counts_isolated_nonfinite_steps_and_stops_after_n_in_a_row_keeping_last_checkpoint(tmp_path):
    train_cell, loss_cell, lr = make_run(epochs=4)
    manager = CheckpointManager(str(tmp_path), "run", keep_max=5)
    lines = []
    # steps 3 and 5, 6 are isolated (at most 2 in a row); 8, 9, 10 are 3 in a row
    poison = PoisonSteps(loss_cell, steps={3, 5, 6, 8, 9, 10})
    state = RunState()  # the callbacks' shared state: the guard's stop reaches the saver through it
    guard = NonFiniteLossGuard(3, checkpoint_manager=manager, log_fn=lines.append, state=state)
    saver = CheckpointCallback(manager, save_every_epochs=1, total_epochs=4, log_fn=lines.append, state=state)
    logger = ProgressLogger(100, STEPS_PER_EPOCH, BATCH, lr, 4, log_fn=lines.append, state=state)
    Model(train_cell).train(4, make_dataset(), callbacks=[poison, logger, guard, saver])

    assert len(poison.losses) == 10  # stopped right after step 10, in epoch 3
    assert state.diverged and state.nonfinite_steps == 6 and state.consecutive_nonfinite == 3
    assert state.result() == (1, "diverged", state.message)  # the run's exit status: 1
    assert sorted(os.listdir(tmp_path)) == ["run-1_4.ckpt", "run-2_8.ckpt"]
    assert state.message in lines and "\n" not in state.message
    assert "3 consecutive non-finite losses (last nan at epoch 3 step 10)" in state.message
    assert f"the last good checkpoint is {tmp_path / 'run-2_8.ckpt'}" in state.message
    assert "epoch 3: training diverged, no checkpoint written" in lines
    # the epoch-2 average leaves its non-finite steps 5, 6 and 8 out
    epoch2 = [line for line in lines if line.startswith("epoch 2/4 average loss")][0]
    assert "over 1 steps" in epoch2 and epoch2.endswith("3 non-finite steps left out")
    assert float(epoch2.split()[4]) == pytest.approx(poison.losses[6], abs=5e-5)
    state = load_training_state(make_run(epochs=4)[0], str(tmp_path / "run-2_8.ckpt"))
    assert state["epoch"] == 2 and state["global_step"] == 8


# --------------------------------------------------------------------------- eval, checkpoints, metrics

@pytest.mark.timeout(120)
def test_eval_every_interval_keeps_best_and_last_checkpoints_and_one_csv_row_per_epoch(tmp_path):
    train_cell, loss_cell, lr = make_run(epochs=5)
    scripted = iter([{"top1": 0.5, "top5": 0.9, "loss": 1.25, "count": 16},
                     {"top1": 0.875, "top5": 1.0, "loss": 0.5, "count": 16},
                     {"top1": 0.75, "top5": 1.0, "loss": 0.75, "count": 16}])
    manager = CheckpointManager(str(tmp_path), "run", keep_max=2)
    lines = []
    state = RunState()
    callbacks = [
        ProgressLogger(100, STEPS_PER_EPOCH, BATCH, lr, 5, log_fn=lines.append, state=state),
        EvalCallback(lambda: next(scripted), eval_interval=2, checkpoint_manager=manager,
                     total_epochs=5, log_fn=lines.append, state=state),
        CheckpointCallback(manager, save_every_epochs=1, total_epochs=5, log_fn=lines.append, state=state),
        MetricsCSV(str(tmp_path / "metrics.csv"), png_path=str(tmp_path / "curves.png"), state=state),
    ]
    Model(train_cell).train(5, make_dataset(), callbacks=callbacks)

    evaluated = callbacks[1]
    assert [h["epoch"] for h in evaluated.history] == [2, 4, 5]  # every 2nd epoch and the last
    assert (state.best_top1, state.best_epoch) == (0.875, 4)
    eval_lines = [line for line in lines if line.startswith("eval epoch")]
    assert eval_lines[1] == (f"eval epoch 4: top1 0.8750 top5 1.0000 loss 0.5000 (16 images, "
                             f"{eval_lines[1].split('images, ')[1].split(' s)')[0]} s) new best, "
                             f"saved {manager.best_path}")
    assert eval_lines[2].endswith("best 0.8750 at epoch 4")
    assert sorted(os.listdir(tmp_path)) == ["curves.png", "metrics.csv", "run-4_16.ckpt", "run-5_20.ckpt",
                                            "run_best.ckpt"]
    best = read_checkpoint_meta(manager.best_path)
    assert (best["epoch_num"], best["step_num"], best["metric_top1"]) == (4, 16, 0.875)
    assert read_checkpoint_meta(str(tmp_path / "run-5_20.ckpt"))["best_top1"] == 0.875

    rows = read_metrics(str(tmp_path / "metrics.csv"))
    averages = [float(line.split()[4]) for line in lines if "average loss" in line]
    assert [r["epoch"] for r in rows] == [1, 2, 3, 4, 5]
    assert [r["top1"] for r in rows] == [None, 0.5, None, 0.875, 0.75]
    assert [r["val_loss"] for r in rows] == [None, 1.25, None, 0.5, 0.75]
    assert [r["images"] for r in rows] == [16] * 5
    for row, average, epoch in zip(rows, averages, range(1, 6)):
        assert row["train_loss"] == pytest.approx(average, abs=5e-5)
        assert row["lr"] == pytest.approx(lr[epoch * STEPS_PER_EPOCH - 1], rel=1e-6)
        assert row["seconds"] > 0
    png = (tmp_path / "curves.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000


@pytest.mark.timeout(120)
def test_metrics_csv_appends_across_a_resume_with_one_header(tmp_path):
    path = str(tmp_path / "metrics.csv")

    said = []

    def run(first, last, append):
        train_cell, _, lr = make_run(epochs=4)
        state = RunState()
        logger = ProgressLogger(100, STEPS_PER_EPOCH, BATCH, lr, 4, log_fn=lambda line: None, state=state)
        Model(train_cell).train(last, make_dataset(), initial_epoch=first,
                                callbacks=[logger, MetricsCSV(path, append=append, log_fn=said.append, state=state)])

    run(0, 2, append=False)
    with open(path, "ab") as f:
        f.write(b"3,1.2")  # a row cut by a kill: no newline
    run(2, 4, append=True)
    with open(path, newline="") as f:
        table = list(csv.reader(f))
    assert table[0] == list(COLUMNS) and [r[0] for r in table[1:]] == ["1", "2", "3", "4"]  # the cut row dropped
    assert said == [f"{path}: its last line was cut by a killed run (5 bytes of an unfinished row): dropped that "
                    "row, appending after the complete ones"]
    assert [r["epoch"] for r in read_metrics(path)] == [1, 2, 3, 4]

    run(0, 1, append=False)  # a new run in a reused directory starts the file anew
    assert [r["epoch"] for r in read_metrics(path)] == [1]


def test_metrics_csv_refuses_a_file_with_other_columns(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("step,loss\n1,2.0\n")
    with pytest.raises(ValueError, match="has columns step,loss"):
        MetricsCSV(str(path), state=RunState())


def test_plot_curves_uses_the_last_row_of_each_epoch_and_writes_a_png(tmp_path):
    csv_path, png_path = tmp_path / "m.csv", tmp_path / "c.png"
    csv_path.write_text("epoch,train_loss,lr,top1,top5,val_loss,images,seconds\n"
                        "1,2.0,0.1,,,,16,1.0\n2,nan,0.05,0.5,0.9,1.0,16,1.0\n"
                        "2,1.5,0.05,0.6,0.9,1.0,16,1.0\n3,1.0,0.01,0.7,1.0,0.8,16,1.0\n")
    assert [r["train_loss"] for r in read_metrics(str(csv_path))] == [2.0, 1.5, 1.0]
    assert plot_curves(str(csv_path), str(png_path)) == str(png_path)
    png = png_path.read_bytes()
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
    assert sorted(os.listdir(tmp_path)) == ["c.png", "m.csv"]  # no temporary file left
