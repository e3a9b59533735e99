"""Training callbacks for mindspore.train.Model.train: progress, evaluation, checkpoints, NaN guard, stops.

Every callback reads and writes the run's one `RunState` (src/run/state.py: the position, the
stop reason and signal, the non-finite count, the best score, the epoch's numbers), given to each
at construction; none keeps a flag in cb_params. The run returns `state.result()`.

The one callback order (src/builders.py build_callbacks builds it; a subset keeps it):

    ProgressLogger      the step's loss and lr, the epoch's sums (epoch_so_far), its train loss row
    NonFiniteLossGuard  a diverged step stops the run before anything saves it
    StopOnSignal        a SIGTERM / Ctrl-C: the checkpoint of the position, then stop
    StepLimit           --max_steps: the same, or at an epoch's end that epoch's evaluation and save
    EvalCallback        the epoch's evaluation and best checkpoint, before its checkpoint and row
    BadFileReport       the epoch's unreadable files, its validation files included
    CheckpointCallback  the epoch's checkpoint, with the best score known
    MetricsCSV          the epoch's row: everything above has written its numbers into the state

    state = RunState(epoch_steps_before=skip_steps, epoch_so_far=so_far)
    callbacks = [ProgressLogger(..., state=state), NonFiniteLossGuard(..., state=state), ...]
    Model(train_cell).train(epochs, dataset, callbacks=callbacks, initial_epoch=resumed_epoch)

Only callbacks built with is_main=True (rank 0) print or write files.
"""
import math
import time

import numpy as np
from mindspore import Tensor
from mindspore.train import Callback

from src.run.state import SO_FAR_KEYS

__all__ = ["ProgressLogger", "EvalCallback", "CheckpointCallback", "NonFiniteLossGuard", "BadFileReport",
           "StopOnSignal", "StepLimit", "RunCallback", "step_loss"]


def step_loss(net_outputs):
    """The loss of one train step as a float.

    Train cells return the loss alone or a tuple whose first entry is the loss
    (loss-scale cells: (loss, overflow, scale)).
    """
    out = net_outputs[0] if isinstance(net_outputs, (tuple, list)) else net_outputs
    if isinstance(out, Tensor):
        out = out.asnumpy()
    return float(np.mean(out))


def _format_seconds(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class RunCallback(Callback):
    """A callback of the run: `state` (src.run.state.RunState) is the run's, shared by all its callbacks."""

    def __init__(self, state):
        super().__init__()
        self.state = state

    def on_train_epoch_begin(self, run_context):
        self.state.begin_epoch(run_context.original_args())

    def _epoch_complete(self, cb_params):
        """False when the epoch was cut short by a stop, or its checkpoint is written already; not saved."""
        ended = self.state.epoch_steps(cb_params) >= cb_params.batch_num
        return ended and not self.state.diverged and not self.state.position_saved

    def _due(self, cb_params, interval, total_epochs):
        """Every `interval` epochs, after the last one and when StepLimit ended the run."""
        epoch = cb_params.cur_epoch_num
        return not epoch % interval or epoch == total_epochs or self.state.stop_reason == "step_limit"


class ProgressLogger(RunCallback):
    """A progress line every `log_interval` steps and an average-loss line per epoch.

    Progress: epoch, step/steps, loss of the step, lr, img/s over the interval, ETA.
    Epoch end: the average of the epoch's finite step losses (the seed's per-epoch
    line), the lr of its last step, its duration and throughput.

    Args:
        log_interval: steps between progress lines.
        steps_per_epoch: train steps per epoch (the dataset size).
        batch_size: images per train step over all devices, for img/s.
        lr_schedule: per-optimizer-step lr array (src.optim.schedulers), or None.
        total_epochs: the run's last epoch (for the ETA and "epoch 3/30").
        log_fn: where lines go.
        is_main: only rank 0 prints; the others still record the epoch numbers.
        accumulation_step: train steps per optimizer step, to index lr_schedule.
        max_steps: the step at which StepLimit ends the run (train.py --max_steps), or None:
            that step gets a progress line and the ETA counts to it.
        state: the run's RunState. Its epoch_so_far at the first epoch's beginning (a resumed
            mid-epoch run's sums of the steps run before, from the mid-epoch checkpoint) starts the
            epoch's sums: its average, images and seconds then cover all its steps.
    """

    def __init__(self, log_interval, steps_per_epoch, batch_size, lr_schedule, total_epochs,
                 log_fn=print, is_main=True, accumulation_step=1, max_steps=None, *, state):
        super().__init__(state)
        self.log_interval = max(1, int(log_interval))
        self.steps_per_epoch = int(steps_per_epoch)
        self.batch_size = int(batch_size)
        self.lr_schedule = None if lr_schedule is None else np.asarray(lr_schedule).reshape(-1)
        self.total_epochs = int(total_epochs)
        self.log_fn = log_fn
        self.is_main = is_main
        self.accumulation_step = max(1, int(accumulation_step))
        self.max_steps = max_steps
        self._clock_start = None  # end of this session's first step: excludes graph compilation
        self._clock_steps = 0

    def lr_at(self, global_step):
        """lr used by train step number `global_step` (1-based), or None without a schedule."""
        if self.lr_schedule is None or self.lr_schedule.size == 0:
            return None
        index = min((global_step - 1) // self.accumulation_step, self.lr_schedule.size - 1)
        return float(self.lr_schedule[max(index, 0)])

    def on_train_epoch_begin(self, run_context):
        super().on_train_epoch_begin(run_context)
        self._epoch_time = self._interval_time = time.time()
        self._interval_steps = 0
        before = self.state.epoch_so_far or {}
        self._loss_sum, self._seconds_before = float(before.get("loss_sum", 0.0)), float(before.get("seconds", 0.0))
        self._finite_steps, self._nonfinite_steps = int(before.get("finite_steps", 0)), \
            int(before.get("nonfinite_steps", 0))

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        now = time.time()
        loss = step_loss(cb.net_outputs)
        if math.isfinite(loss):
            self._loss_sum += loss
            self._finite_steps += 1
        else:
            self._nonfinite_steps += 1
        self._interval_steps += 1
        global_step = self.state.global_step(cb)
        self.state.step_record = {"step": global_step, "epoch": global_step / self.steps_per_epoch,
                                  "train_loss": loss, "lr": self.lr_at(global_step)}
        self.state.epoch_so_far = dict(zip(SO_FAR_KEYS, (self._loss_sum, self._finite_steps, self._nonfinite_steps,
                                                         self._seconds_before + now - self._epoch_time)))
        if self._clock_start is None:
            self._clock_start = now
        else:
            self._clock_steps += 1
        step = self.state.epoch_steps(cb)
        if step % self.log_interval and step != self.steps_per_epoch and global_step != self.max_steps:
            return
        if self.is_main:
            self.log_fn(self._progress_line(cb, step, loss, now))
        self._interval_time, self._interval_steps = now, 0

    def _progress_line(self, cb, step, loss, now):
        global_step = self.state.global_step(cb)
        parts = [f"epoch {cb.cur_epoch_num}/{self.total_epochs}", f"step {step}/{self.steps_per_epoch}",
                 f"loss {loss:.4f}"]
        lr = self.lr_at(global_step)
        if lr is not None:
            parts.append(f"lr {lr:.4e}")
        elapsed = now - self._interval_time
        if elapsed > 0:
            parts.append(f"{self._interval_steps * self.batch_size / elapsed:.1f} img/s")
        if self._clock_steps:
            last = self.total_epochs * self.steps_per_epoch
            remaining = min(last, self.max_steps or last) - global_step
            # wall time per step, evaluations and checkpoints included
            parts.append(f"ETA {_format_seconds(remaining * (now - self._clock_start) / self._clock_steps)}")
        return " ".join(parts)

    def on_train_epoch_end(self, run_context):
        cb = run_context.original_args()
        seconds = self._seconds_before + time.time() - self._epoch_time
        steps = self.state.epoch_steps(cb)
        average = self._loss_sum / self._finite_steps if self._finite_steps else float("nan")
        lr = self.lr_at(self.state.global_step(cb)) if steps else None
        # the steps whose loss is counted: a resume from a checkpoint without epoch_so_far counts its own only
        images = (self._finite_steps + self._nonfinite_steps) * self.batch_size
        # complete: the epoch's row is written now; a diverged run's last epoch is never resumed, so it is too
        self.state.epoch_record.update(train_loss=average, lr=lr, images=images, seconds=seconds,
                                       complete=steps >= self.steps_per_epoch or self.state.diverged)
        if not self.is_main:
            return
        line = (f"epoch {cb.cur_epoch_num}/{self.total_epochs} average loss {average:.4f} "
                f"over {self._finite_steps} steps")
        if lr is not None:
            line += f", lr {lr:.4e}"
        line += f", {seconds:.1f} s, {images / seconds if seconds > 0 else 0.0:.1f} img/s"
        if self._nonfinite_steps:
            line += f", {self._nonfinite_steps} non-finite steps left out"
        self.log_fn(line)


class NonFiniteLossGuard(RunCallback):
    """Stops training after `max_nonfinite_steps` consecutive non-finite step losses.

    A NaN or Inf loss is seen at once, at the end of its step (MindSpore's CPU backend
    can crawl for minutes on NaN tensors, so waiting for the epoch's end is not an
    option). Isolated non-finite steps are counted in the state's `nonfinite_steps` (with dynamic
    loss scaling the train cell skips their update); a run of `max_nonfinite_steps`
    (`consecutive_nonfinite`) stops the run as "diverged", so that no checkpoint is written from
    the non-finite weights, with a message naming the last good checkpoint: the run's result
    is then exit status 1.
    """

    def __init__(self, max_nonfinite_steps, checkpoint_manager=None, log_fn=print, is_main=True, *, state):
        super().__init__(state)
        if max_nonfinite_steps < 1:
            raise ValueError(f"max_nonfinite_steps must be >= 1, got {max_nonfinite_steps}")
        self.max_nonfinite_steps = int(max_nonfinite_steps)
        self.checkpoint_manager = checkpoint_manager
        self.log_fn = log_fn
        self.is_main = is_main

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        loss = step_loss(cb.net_outputs)
        state = self.state
        if math.isfinite(loss):
            state.consecutive_nonfinite = 0
            return
        state.consecutive_nonfinite += 1
        state.nonfinite_steps += 1
        in_a_row = state.consecutive_nonfinite
        where = f"epoch {cb.cur_epoch_num} step {state.global_step(cb)}"
        if in_a_row < self.max_nonfinite_steps:
            if self.is_main:
                self.log_fn(f"warning: non-finite loss {loss} at {where} "
                            f"({in_a_row}/{self.max_nonfinite_steps} in a row)")
            return
        last_good = self._last_good_checkpoint()
        state.stop("diverged", message=f"stopping: {in_a_row} consecutive non-finite losses (last {loss} at {where}); "
                   + (f"the last good checkpoint is {last_good} (continue with --resume auto)"
                      if last_good else "no checkpoint was written in this run")
                   + "; lower the lr, raise clipping or use loss scaling")
        if self.is_main:
            self.log_fn(state.message)
        run_context.request_stop()

    def _last_good_checkpoint(self):
        """This session's last checkpoint, else the one --resume auto would pick (e.g. the resumed one)."""
        manager = self.checkpoint_manager
        if manager is None:
            return None
        if manager.latest_path:
            return manager.latest_path
        from src.run.checkpointing import find_latest_checkpoint

        return find_latest_checkpoint(manager.output_dir, log_fn=lambda _: None)


class BadFileReport(Callback):
    """At each epoch end, logs the unreadable images skipped since the last report.

    The data pipeline's workers list every file they could not decode in `bad_file_log`
    (see src.data.sources); this puts their number and names in the run's log. Place it
    after EvalCallback so that the epoch's validation files are included. Files already
    listed when training starts (an earlier session of a resumed run) were reported then.
    """

    def __init__(self, bad_file_log, log_fn=print, is_main=True):
        super().__init__()
        from src.data.dataset import read_bad_file_log

        self.path = bad_file_log
        self.read = read_bad_file_log
        self.log_fn = log_fn
        self.is_main = is_main
        self.seen = set(read_bad_file_log(bad_file_log))

    def on_train_epoch_end(self, run_context):
        listed = self.read(self.path)
        new = [path for path in listed if path not in self.seen]
        self.seen.update(new)
        if new and self.is_main:
            shown = ", ".join(new[:3]) + (f", ... ({len(new) - 3} more)" if len(new) > 3 else "")
            self.log_fn(f"epoch {run_context.original_args().cur_epoch_num}: skipped {len(new)} unreadable "
                        f"image(s) ({len(listed)} in this run directory, listed in {self.path}): {shown}")


class EvalCallback(RunCallback):
    """Evaluates every `eval_interval` epochs (and after the last), keeps the best checkpoint.

    eval_fn() returns a metrics dict with at least "top1" (as
    src.trainers.evaluate.evaluate does: top1, top5, loss, count); which weights it scores
    (EMA or raw) is the caller's choice. Every rank calls eval_fn (distributed evaluation
    needs them all); only rank 0 logs, and the checkpoint manager writes only on rank 0.
    Epochs cut short by a stop request are not evaluated. This session's best top-1 and its
    epoch go into the state (best_top1, best_epoch), the scores into the epoch's record.

    Args:
        eval_fn: callable with no arguments returning the metrics dict.
        eval_interval: epochs between evaluations.
        checkpoint_manager: a CheckpointManager for the best checkpoint, or None.
        train_cell: the cell whose state the best checkpoint holds (default: the
            train network Model.train runs).
        total_epochs: the run's last epoch, always evaluated; None: only every interval.
    """

    def __init__(self, eval_fn, eval_interval, checkpoint_manager=None, train_cell=None,
                 total_epochs=None, log_fn=print, is_main=True, *, state):
        super().__init__(state)
        self.eval_fn = eval_fn
        self.eval_interval = max(1, int(eval_interval))
        self.checkpoint_manager = checkpoint_manager
        self.train_cell = train_cell
        self.total_epochs = total_epochs
        self.log_fn = log_fn
        self.is_main = is_main
        self.history = []  # one {"epoch": e, **metrics} per evaluation

    def on_train_epoch_end(self, run_context):
        cb = run_context.original_args()
        epoch = cb.cur_epoch_num
        if not self._due(cb, self.eval_interval, self.total_epochs):
            return
        if not self._epoch_complete(cb):
            return
        start = time.time()
        metrics = dict(self.eval_fn())
        seconds = time.time() - start
        top1 = float(metrics["top1"])
        if self.checkpoint_manager is not None:
            improved = self.checkpoint_manager.save_best(self.train_cell or cb.train_network, epoch,
                                                         self.state.global_step(cb), metrics)
        else:
            improved = self.state.best_top1 is None or top1 > self.state.best_top1
        if improved:
            self.state.best_top1, self.state.best_epoch = top1, epoch
        self.history.append({"epoch": epoch, **metrics})
        self.state.epoch_record.update(top1=top1, top5=metrics.get("top5"), val_loss=metrics.get("loss"))
        if self.is_main:
            self.log_fn(self._line(epoch, metrics, seconds, improved))

    def _line(self, epoch, metrics, seconds, improved):
        parts = [f"eval epoch {epoch}: top1 {metrics['top1']:.4f}"]
        for key in ("top5", "loss"):
            if metrics.get(key) is not None:
                parts.append(f"{key} {metrics[key]:.4f}")
        if metrics.get("count") is not None:
            parts.append(f"({metrics['count']} images, {seconds:.1f} s)")
        else:
            parts.append(f"({seconds:.1f} s)")
        if improved:
            saved = self.checkpoint_manager is not None
            parts.append("new best" + (f", saved {self.checkpoint_manager.best_path}" if saved else ""))
        elif self.state.best_epoch is not None:
            parts.append(f"best {self.state.best_top1:.4f} at epoch {self.state.best_epoch}")
        elif self.checkpoint_manager is not None and self.checkpoint_manager.best_top1 is not None:
            parts.append(f"best so far {self.checkpoint_manager.best_top1:.4f}")
        return " ".join(parts)


class CheckpointCallback(RunCallback):
    """Saves the whole train-cell state every `save_every_epochs` epochs and after the last.

    The checkpoint holds every Parameter of the train cell plus epoch_num, step_num and
    best_top1 (see src.run.checkpointing), enough for load_training_state to resume.
    Epochs cut short by a stop request, and diverged runs, are not saved: the previous
    complete checkpoint stays the latest.
    """

    def __init__(self, checkpoint_manager, save_every_epochs, train_cell=None, total_epochs=None,
                 log_fn=print, *, state):
        super().__init__(state)
        self.checkpoint_manager = checkpoint_manager
        self.save_every_epochs = max(1, int(save_every_epochs))
        self.train_cell = train_cell
        self.total_epochs = total_epochs
        self.log_fn = log_fn

    def on_train_epoch_end(self, run_context):
        cb = run_context.original_args()
        epoch = cb.cur_epoch_num
        if not self._due(cb, self.save_every_epochs, self.total_epochs):
            return
        if not self._epoch_complete(cb):
            if self.state.position_saved:
                return  # StopOnSignal / StepLimit has written the checkpoint
            if self.checkpoint_manager.is_main:
                reason = "training diverged" if self.state.diverged else "the epoch did not complete"
                self.log_fn(f"epoch {epoch}: {reason}, no checkpoint written")
            return
        start = time.time()
        path = self.checkpoint_manager.save(self.train_cell or cb.train_network, epoch, self.state.global_step(cb))
        if path is not None:
            self.log_fn(f"saved {path} ({time.time() - start:.1f} s)")


class _StopWithCheckpoint(RunCallback):
    """What StopOnSignal and StepLimit share: at the end of a step, a checkpoint of the exact position.

    A stop in the middle of an epoch writes the mid-epoch checkpoint (the epoch and the steps run
    in it, see CheckpointManager.save) and marks the state's position_saved, so that the cut epoch
    is neither evaluated nor saved again; `--resume auto` continues with the next step of that
    epoch, over its remaining batches, as if nothing had happened. In a distributed run `agree`
    (RunContext.max_over_ranks) keeps every rank until rank 0's checkpoint is complete.
    """

    def __init__(self, checkpoint_manager, train_cell=None, agree=None, log_fn=print, is_main=True, *, state):
        super().__init__(state)
        self.checkpoint_manager = checkpoint_manager
        self.train_cell = train_cell
        self.agree = agree
        self.log_fn = log_fn
        self.is_main = is_main
        self.path = None

    def _save_position(self, cb):
        """Write the checkpoint of the position reached; (epoch, steps run in it)."""
        epoch, step = cb.cur_epoch_num, self.state.epoch_steps(cb)
        self.state.position_saved = True
        mid_epoch = step < cb.batch_num
        self.path = self.checkpoint_manager.save(self.train_cell or cb.train_network, epoch, self.state.global_step(cb),
                                                 epoch_step=step if mid_epoch else None,
                                                 epoch_so_far=self.state.epoch_so_far if mid_epoch else None)
        if self.agree is not None:
            self.agree(0)  # no rank exits before rank 0's checkpoint is complete
        return epoch, step


class StopOnSignal(_StopWithCheckpoint):
    """At the end of the step in progress when a SIGTERM / Ctrl-C arrived: a checkpoint, then stop.

    `request` is a src.run.preemption.StopRequest. The checkpoint holds the exact position
    (_StopWithCheckpoint). In a distributed run `agree` also makes every rank see a signal that
    reached any of them at the same step: all ranks stop together. The state records the stop
    ("signal" and the signal: the run's exit status 128 + signum).
    """

    def __init__(self, request, checkpoint_manager, train_cell=None, agree=None, log_fn=print, is_main=True, *,
                 state):
        super().__init__(checkpoint_manager, train_cell=train_cell, agree=agree, log_fn=log_fn, is_main=is_main,
                         state=state)
        self.request = request

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        signum = self.request.signum or 0
        if self.agree is not None:
            signum = self.agree(signum)
        if not signum or self.state.diverged:
            return
        import signal

        from src.run.preemption import exit_status

        self.state.stop("signal", signum=signum)
        self.request.arm_second_ctrl_c()  # this step's graph runs installed MindSpore's SIGINT handler again
        epoch, step = self._save_position(cb)
        if self.is_main:
            self.log_fn(f"stopped by {signal.Signals(signum).name} after epoch {epoch} step {step}/{cb.batch_num}: "
                        f"saved {self.path}; continue with --resume auto (exit status {exit_status(signum)})")
        run_context.request_stop()


class StepLimit(_StopWithCheckpoint):
    """Ends training after `max_steps` train steps in all (train.py --max_steps: a smoke test, a short fine-tune).

    The stop comes at the end of the step that reaches the limit. In the middle of an epoch it
    writes the mid-epoch checkpoint, as a stop by a signal does (_StopWithCheckpoint): `--resume
    auto` continues with the next step of that epoch, and the run ends as the uninterrupted one.
    At the end of an epoch the epoch is evaluated and saved as the run's last (the state's
    stop_reason "step_limit" without position_saved). Steps are counted as the other callbacks
    count them, (epoch - 1) * steps_per_epoch + step; a step that diverged or was signalled
    (NonFiniteLossGuard and StopOnSignal come first) is theirs.
    """

    def __init__(self, max_steps, checkpoint_manager, train_cell=None, agree=None, log_fn=print, is_main=True, *,
                 state):
        super().__init__(checkpoint_manager, train_cell=train_cell, agree=agree, log_fn=log_fn, is_main=is_main,
                         state=state)
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.max_steps = int(max_steps)
        self._where = None

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        if self.state.stop_reason is not None or self.state.global_step(cb) < self.max_steps:
            return
        self.state.stop("step_limit")  # a whole epoch: its evaluation and checkpoint come at its end
        self._where = f"epoch {cb.cur_epoch_num} step {self.state.epoch_steps(cb)}/{cb.batch_num}"
        if self.state.epoch_steps(cb) < cb.batch_num:
            self._save_position(cb)
        run_context.request_stop()

    def on_train_end(self, run_context):
        if self._where is None:
            return
        path = self.path or self.checkpoint_manager.latest_path
        if self.is_main:
            self.log_fn(f"stopped at --max_steps {self.max_steps} after {self._where}: saved {path}; continue with "
                        "--resume auto (and a larger --max_steps, or none)")
        self._where = None
