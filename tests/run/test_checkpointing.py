"""Atomic checkpoints, rotation, best checkpoint, resume state and the run directory.

Every test uses real MindSpore on the CPU: a tiny network trained by a real
TrainOneStepCell through Model.train. `StatefulTrainCell` stands in for the train-step
cell of src/trainers: on top of weights and momentum it carries the other state a resume
must restore (EMA weights "ema.<name>", a loss scale and an overflow counter).
"""
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import mindspore as ms
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops
from mindspore.train import Model
import mindspore.dataset as ds

from src.errors import UserError
from src.run.checkpointing import (CheckpointError, CheckpointManager, find_latest_checkpoint,
                                     load_training_state, prepare_output_dir, read_checkpoint_meta,
                                     save_checkpoint_atomic)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS_PER_EPOCH = 4


class StatefulTrainCell(nn.TrainOneStepCell):
    """TrainOneStepCell plus EMA weights, a loss scale and an overflow counter."""

    def __init__(self, network, optimizer, ema_decay=0.5):
        super().__init__(network, optimizer)
        self.ema = ParameterTuple(Parameter(Tensor(p.asnumpy()), name="ema." + p.name, requires_grad=False)
                                  for p in self.weights)
        self.loss_scale = Parameter(Tensor(128.0, ms.float32), name="loss_scale", requires_grad=False)
        self.overflow_count = Parameter(Tensor(0, ms.int32), name="overflow_count", requires_grad=False)
        self.ema_decay = ema_decay

    def construct(self, *inputs):
        loss = super().construct(*inputs)
        for ema, weight in zip(self.ema, self.weights):
            ops.assign(ema, ema * self.ema_decay + weight * (1 - self.ema_decay))
        ops.assign_add(self.overflow_count, ops.cast(ops.logical_not(ops.isfinite(loss)), ms.int32))
        return loss


def make_train_cell(seed=0, out=3, epochs=4, cell_class=StatefulTrainCell):
    ms.set_seed(seed)
    net = nn.Dense(4, out)
    lr = np.linspace(0.2, 0.05, epochs * STEPS_PER_EPOCH).astype(np.float32)
    opt = nn.Momentum(net.trainable_params(), learning_rate=lr, momentum=0.9)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    return cell_class(nn.WithLossCell(net, loss), opt)


def make_dataset():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4 * STEPS_PER_EPOCH, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 0).astype(np.int32)
    return ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(4)


def state_of(cell):
    return {p.name: p.asnumpy().copy() for _, p in cell.parameters_and_names()}


def weights_only(path):
    net = nn.Dense(4, 3)
    ms.save_checkpoint(net, path)
    return path


# --------------------------------------------------------------------------- atomic save

WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    import mindspore as ms
    from mindspore import Tensor
    from src.run.checkpointing import save_checkpoint_atomic
    ms.set_device("CPU")
    out = sys.argv[1]
    small = [{"name": "w", "data": Tensor(np.ones((4, 4), np.float32))}]
    save_checkpoint_atomic(small, out + "/run-1_4.ckpt", {"epoch_num": 1, "step_num": 4})
    big = [{"name": f"w{i}", "data": Tensor(np.full((1000, 1000), i, np.float32))} for i in range(48)]
    print("first saved", flush=True)
    save_checkpoint_atomic(big, out + "/run-2_8.ckpt", {"epoch_num": 2, "step_num": 8})
    print("second saved", flush=True)
""")


@pytest.mark.timeout(180)
def test_writer_killed_mid_save_leaves_previous_checkpoint_and_no_visible_partial(tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT, GLOG_v="3")
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert child.stdout.readline().strip() == "first saved"
        deadline = time.time() + 60
        partial = []
        while not partial and time.time() < deadline:  # the 192 MB save is under way
            partial = [n for n in os.listdir(tmp_path) if n.startswith(".")
                       and os.path.getsize(tmp_path / n) > 0]
            time.sleep(0.002)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
    names = os.listdir(tmp_path)
    hidden = [n for n in names if n.startswith(".")]
    assert partial and hidden, "the kill should have landed during the second save"
    assert sorted(n for n in names if not n.startswith(".")) == ["run-1_4.ckpt"]
    assert read_checkpoint_meta(str(tmp_path / "run-1_4.ckpt"))["epoch_num"] == 1
    assert find_latest_checkpoint(str(tmp_path)) == str(tmp_path / "run-1_4.ckpt")
    CheckpointManager(str(tmp_path), "run", keep_max=2)  # a new run cleans up after the killed writer
    assert os.listdir(tmp_path) == ["run-1_4.ckpt"]


def test_atomic_save_appends_suffix_replaces_old_file_and_stores_exact_metadata(tmp_path):
    net = nn.Dense(4, 3)
    first = save_checkpoint_atomic(net, str(tmp_path / "model"), {"epoch_num": 1, "best_top1": 0.1})
    assert first == str(tmp_path / "model.ckpt")
    second = save_checkpoint_atomic(net, first, {"epoch_num": 2, "best_top1": 0.83471234567})
    assert second == first and os.listdir(tmp_path) == ["model.ckpt"]
    meta = read_checkpoint_meta(first)
    assert meta["epoch_num"] == 2
    assert meta["best_top1"] == 0.83471234567  # float64, not rounded to float32


# --------------------------------------------------------------------------- manager

def test_manager_keeps_only_the_last_keep_max_epoch_checkpoints(tmp_path):
    cell = nn.Dense(4, 3)
    manager = CheckpointManager(str(tmp_path), "nano", keep_max=2)
    manager.save_best(cell, 1, 4, {"top1": 0.5})
    for epoch in range(1, 6):
        manager.save(cell, epoch, epoch * STEPS_PER_EPOCH)
    assert sorted(os.listdir(tmp_path)) == ["nano-4_16.ckpt", "nano-5_20.ckpt", "nano_best.ckpt"]
    assert manager.latest_path == str(tmp_path / "nano-5_20.ckpt")
    assert read_checkpoint_meta(manager.latest_path) == {"epoch_num": 5, "step_num": 20, "best_top1": 0.5}


def test_best_checkpoint_tracks_the_maximum_top1(tmp_path):
    cell = nn.Dense(4, 3)
    manager = CheckpointManager(str(tmp_path), "nano", keep_max=1)
    top1s = [0.5, 0.75, 0.625, 0.875, 0.875, 0.25]
    saved = [manager.save_best(cell, epoch, epoch * 4, {"top1": t, "top5": 1.0, "loss": 1.5, "count": 90})
             for epoch, t in enumerate(top1s, start=1)]
    assert saved == [True, True, False, True, False, False]
    meta = read_checkpoint_meta(manager.best_path)
    assert meta["epoch_num"] == 4 and meta["step_num"] == 16
    assert meta["metric_top1"] == 0.875 and meta["metric_loss"] == 1.5 and meta["metric_count"] == 90
    assert manager.best_top1 == 0.875


# --------------------------------------------------------------------------- finding the latest

def test_find_latest_ignores_partial_files_and_orders_by_stored_epoch_not_mtime(tmp_path):
    cell = nn.Dense(4, 3)
    out = str(tmp_path)
    for epoch in (2, 9, 10):  # "10" sorts before "2" and "9" as text
        save_checkpoint_atomic(cell, f"{out}/run-{epoch}_{epoch * 4}.ckpt",
                               {"epoch_num": epoch, "step_num": epoch * 4})
    old = time.time() - 3600
    os.utime(f"{out}/run-10_40.ckpt", (old, old))  # the newest checkpoint has the oldest mtime
    for junk in (".run-11_44.partial-123-abcd.ckpt", ".run-11_44.partial-123-abcd.tmp", "run-12_48.tmp"):
        (tmp_path / junk).write_bytes(b"\0" * 1000)
    weights_only(f"{out}/pretrained.ckpt")  # weights without training state are no candidate
    assert find_latest_checkpoint(out) == f"{out}/run-10_40.ckpt"

    (tmp_path / "run-11_44.ckpt").write_bytes(b"\x0a\x05trunc")  # a visible but corrupt file
    messages = []
    assert find_latest_checkpoint(out, log_fn=messages.append) == f"{out}/run-10_40.ckpt"
    assert len(messages) == 1 and "run-11_44.ckpt" in messages[0]

    save_checkpoint_atomic(cell, f"{out}/run_best.ckpt", {"epoch_num": 10, "step_num": 40})
    assert find_latest_checkpoint(out) == f"{out}/run-10_40.ckpt"  # tie: the epoch checkpoint
    save_checkpoint_atomic(cell, f"{out}/run_best.ckpt", {"epoch_num": 11, "step_num": 44})
    assert find_latest_checkpoint(out) == f"{out}/run_best.ckpt"
    assert find_latest_checkpoint(f"{out}/missing") is None


# --------------------------------------------------------------------------- resume

@pytest.mark.timeout(120)
def test_the_manager_resumes_from_one_read_of_the_checkpoint(tmp_path, monkeypatch):
    """resume() finds and reads the checkpoint (best_top1 taken over), restore() applies that same read."""
    trained = make_train_cell(seed=0)
    Model(trained).train(2, make_dataset())
    writer = CheckpointManager(str(tmp_path), "run", keep_max=3, run_meta=dict(batch_size=4, epochs=4))
    writer.best_top1 = 0.75
    writer.restore(trained, STEPS_PER_EPOCH)  # a fresh run: records its steps per epoch only
    path = writer.save(trained, 2, 2 * STEPS_PER_EPOCH)

    reads = []
    real_load = ms.load_checkpoint
    monkeypatch.setattr(ms, "load_checkpoint", lambda name, *a, **k: reads.append(name) or real_load(name, *a, **k))
    manager = CheckpointManager(str(tmp_path), "run", keep_max=3, run_meta=dict(batch_size=4, epochs=4))
    point = manager.resume("auto", log_fn=lambda _: None)
    assert (point.status, point.epoch, point.epoch_step, point.path) == ("continue", 2, 0, path)
    assert manager.best_top1 == 0.75
    resumed = make_train_cell(seed=1)
    manager.restore(resumed, STEPS_PER_EPOCH, log_fn=lambda _: None)
    assert reads == [path]
    assert manager.run_meta["steps_per_epoch"] == STEPS_PER_EPOCH
    for name, value in state_of(trained).items():
        if name != "learning_rate":
            np.testing.assert_array_equal(state_of(resumed)[name], value, err_msg=name)
    with pytest.raises(CheckpointError, match="steps per epoch"):  # the data changed since
        again = CheckpointManager(str(tmp_path), "run", keep_max=3, run_meta=dict(batch_size=4, epochs=4))
        again.resume(path, log_fn=lambda _: None)
        again.restore(make_train_cell(seed=1), STEPS_PER_EPOCH + 1)
    finished = CheckpointManager(str(tmp_path), "run", keep_max=3, run_meta=dict(batch_size=4, epochs=2))
    assert finished.resume("auto", log_fn=lambda _: None).status == "finished"



@pytest.mark.timeout(120)
def test_load_training_state_restores_every_parameter_and_training_continues_identically(tmp_path):
    trained = make_train_cell(seed=0)
    Model(trained).train(2, make_dataset())
    manager = CheckpointManager(str(tmp_path), "run", keep_max=3)
    manager.best_top1 = 0.75
    path = manager.save(trained, 2, 2 * STEPS_PER_EPOCH)
    saved = state_of(trained)

    resumed = make_train_cell(seed=1)
    assert not np.array_equal(state_of(resumed)["weight"], saved["weight"])
    state = load_training_state(resumed, path)
    assert state == {"epoch": 2, "global_step": 8, "best_top1": 0.75, "metrics": {}, "path": path}
    restored = state_of(resumed)
    # every Parameter but the config-derived learning-rate array, bit for bit
    names = set(saved) - {"learning_rate"}
    assert {"weight", "moments.weight", "global_step", "ema.weight", "loss_scale", "overflow_count"} <= names
    for name in names:
        np.testing.assert_array_equal(restored[name], saved[name], err_msg=name)
    assert int(restored["global_step"][0]) == 8

    Model(trained).train(4, make_dataset(), initial_epoch=2)
    Model(resumed).train(4, make_dataset(), initial_epoch=2)
    for name, value in state_of(trained).items():
        np.testing.assert_array_equal(state_of(resumed)[name], value, err_msg=name)


def test_load_training_state_names_mismatches_in_one_line_and_changes_nothing(tmp_path):
    cell = make_train_cell(out=3)
    path = CheckpointManager(str(tmp_path), "run", keep_max=1).save(cell, 1, 4)
    other = make_train_cell(out=5, cell_class=nn.TrainOneStepCell)  # another head, no EMA
    before = state_of(other)
    with pytest.raises(CheckpointError) as info:
        load_training_state(other, path)
    message = str(info.value)
    assert "\n" not in message and "not a training state of this network" in message
    assert "4 unexpected (ema.bias, ema.weight, loss_scale, overflow_count)" in message
    assert "mis-shaped" in message and "weight (3, 4) vs (5, 4)" in message
    for name, value in state_of(other).items():
        np.testing.assert_array_equal(value, before[name])


@pytest.mark.parametrize("content, expected", [
    (None, "checkpoint not found"),
    (b"", "is empty (0 bytes)"),
    (b"this is not a checkpoint" * 10, "is not a readable MindSpore checkpoint"),
    ("weights", "holds no training state"),
])
def test_load_training_state_rejects_missing_corrupt_and_weight_only_files(tmp_path, content, expected):
    path = str(tmp_path / "bad.ckpt")
    if content == "weights":
        weights_only(path)
    elif content is not None:
        (tmp_path / "bad.ckpt").write_bytes(content)
    with pytest.raises(CheckpointError) as info:
        load_training_state(make_train_cell(), path)
    assert expected in str(info.value) and path in str(info.value) and "\n" not in str(info.value)


# --------------------------------------------------------------------------- output directory

def test_prepare_output_dir_never_overwrites_an_existing_run(tmp_path):
    messages = []
    run = str(tmp_path / "run")
    assert prepare_output_dir(run, log_fn=messages.append) == run and os.path.isdir(run)
    assert os.listdir(run) == [".nfnet_run"]  # the marker: this project created the directory
    (tmp_path / "run" / "dm_nfnet_f0-3_12.ckpt").write_bytes(b"old")
    (tmp_path / "run" / "metrics.csv").write_text("old")
    (tmp_path / "run" / "notes.txt").write_text("the user's")
    assert messages == []

    assert prepare_output_dir(run, log_fn=messages.append) == run + "-1"
    assert os.path.isdir(run + "-1") and "writes to " + run + "-1" in messages[-1]
    (tmp_path / "run-1" / "log.txt").write_text("second run")
    assert prepare_output_dir(run, log_fn=messages.append) == run + "-2"
    # another rank takes rank 0's decision (here: suffix 2) without looking, and creates it on its own disk
    assert prepare_output_dir(str(tmp_path / "node1"), is_main=False, share=lambda _: 2) == str(tmp_path / "node1-2")
    assert os.path.isdir(tmp_path / "node1-2")
    assert (tmp_path / "run" / "dm_nfnet_f0-3_12.ckpt").read_bytes() == b"old"

    assert prepare_output_dir(run, resume=True, log_fn=messages.append) == run
    assert sorted(os.listdir(run)) == [".nfnet_run", "dm_nfnet_f0-3_12.ckpt", "metrics.csv", "notes.txt"]
    # overwriting deletes the run's files only: the user's notes stay
    assert prepare_output_dir(run, overwrite=True, log_fn=messages.append) == run
    assert sorted(os.listdir(run)) == [".nfnet_run", "notes.txt"]
    assert "deleted the 2 file(s) of the previous run; kept 1 other(s): notes.txt" in messages[-1]
    # a directory this project did not create is never cleared
    user = tmp_path / "mine"
    user.mkdir()
    (user / "dm_nfnet_f0-1_1.ckpt").write_bytes(b"the user's")
    with pytest.raises(UserError, match=f"--overwrite_output refused: {user} was not created by train.py"):
        prepare_output_dir(str(user), overwrite=True)
    assert os.listdir(user) == ["dm_nfnet_f0-1_1.ckpt"]

    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="exists and is not a directory"):
        prepare_output_dir(str(tmp_path / "file"))
    with pytest.raises(UserError, match="cannot be created: .*file is a file"):
        prepare_output_dir(str(tmp_path / "file" / "sub"))
    # rank 0's failure reaches the other ranks as -1: they stop too instead of waiting for it
    with pytest.raises(UserError, match="rank 0 could not prepare output_dir"):
        prepare_output_dir(run, is_main=False, share=lambda _: -1)
    with pytest.raises(ValueError, match="pass share"):
        prepare_output_dir(run, is_main=False)


def test_a_resumed_run_writes_only_in_its_own_run_directory(tmp_path):
    """check_output_dir's resume rules (train.py runs them before MindSpore starts): the marked directory of a
    run, or an unmarked one holding nothing but a run's files with a checkpoint (adopted: marked); never one with
    another run's checkpoints unless resuming one of them, never inside data_path."""
    from src.run.run_dir import check_output_dir

    def refused(path, resume, match, data_path=None):
        with pytest.raises(UserError, match=match):
            check_output_dir(str(path), resume=resume, data_path=data_path)

    copied = tmp_path / "copied"  # a run directory copied without its hidden marker
    copied.mkdir()
    (copied / "dm_nfnet_f0-3_12.ckpt").write_bytes(b"a run's")
    (copied / "train.log").write_text("a run's log\n")
    assert prepare_output_dir(str(copied), resume="auto", log_fn=lambda _: None) == str(copied)
    assert sorted(os.listdir(copied)) == [".nfnet_run", "dm_nfnet_f0-3_12.ckpt", "train.log"]
    check_output_dir(str(copied), resume=str(copied / "dm_nfnet_f0-3_12.ckpt"))  # that very run
    elsewhere = tmp_path / "elsewhere.ckpt"
    elsewhere.write_bytes(b"another run's")
    refused(copied, str(elsewhere), r"output_dir .*copied holds another run's checkpoints \(dm_nfnet_f0-3_12.ckpt\)")
    check_output_dir(str(tmp_path / "new"), resume=str(elsewhere))  # continued into a new directory

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.yaml").write_text("the user's")
    refused(mine, "auto", "no .nfnet_run marker.* holds no checkpoint to resume")
    (mine / "dm_nfnet_f0-1_4.ckpt").write_bytes(b"x")
    (mine / "notes.txt").write_text("the user's")
    refused(mine, "auto", r"holds files train.py does not write \(notes.txt\)")
    assert sorted(os.listdir(mine)) == ["config.yaml", "dm_nfnet_f0-1_4.ckpt", "notes.txt"]

    data = tmp_path / "data"
    (data / "val" / "3").mkdir(parents=True)
    refused(data / "val" / "3", None, "is inside data_path", data_path=str(data))
    refused(data, None, "is inside data_path", data_path=str(data))
    check_output_dir(str(tmp_path / "data-runs"), data_path=str(data))  # a sibling whose name starts alike
