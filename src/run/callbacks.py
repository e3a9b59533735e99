"""Training callbacks for mindspore.train.Model.train: progress, evaluation, checkpoints, NaN guard.

Use them in this order, so that each epoch's evaluation is known when the epoch's
checkpoint and metrics row are written:

    callbacks = [ProgressLogger(...), NonFiniteLossGuard(...), EvalCallback(...),
                 CheckpointCallback(...), MetricsCSV(...)]
    Model(train_cell).train(epochs, dataset, callbacks=callbacks, initial_epoch=resumed_epoch)

The callbacks share per-epoch numbers through `epoch_record(cb_params)` (train loss, lr,
images, seconds, complete from ProgressLogger; top1, top5, val_loss from EvalCallback), which
MetricsCSV turns into one row per complete epoch. A mid-epoch checkpoint carries the cut epoch's
sums so far (`epoch_so_far`), so that its resumed epoch is recorded once, over all its steps. NonFiniteLossGuard marks a diverged run in cb_params so
that no later checkpoint replaces a good one with non-finite weights.

Steps are counted from the epoch number (epoch - 1) * steps_per_epoch + step, because
Model.train restarts cb_params.cur_step_num at 0 when it resumes at initial_epoch > 0.
Only callbacks built with is_main=True (rank 0) print or write files.
"""
import math
import time

import numpy as np
from mindspore import Tensor
from mindspore.train import Callback

__all__ = ["ProgressLogger", "EvalCallback", "CheckpointCallback", "NonFiniteLossGuard", "BadFileReport",
           "ResumePosition", "StopOnSignal", "StepLimit", "epoch_record", "epoch_so_far", "step_loss", "SO_FAR_KEYS",
           "DIVERGED", "PREEMPTED", "STEP_LIMIT_REACHED"]

# cb_params key set by NonFiniteLossGuard when it stops a run.
DIVERGED = "training_diverged"
# cb_params key set by StopOnSignal / StepLimit when they stop a run (they have written the checkpoint,
# mid-epoch or not).
PREEMPTED = "training_preempted"
# cb_params key set by StepLimit when its limit falls on an epoch's last step: that epoch is evaluated and saved.
STEP_LIMIT_REACHED = "step_limit_reached"
# cb_params key set by ResumePosition: steps of the current epoch run before this pass (a resumed epoch).
_STEPS_BEFORE = "epoch_steps_before"
_RECORD = "epoch_record"
_STEP_RECORD = "step_record"
_SO_FAR = "epoch_so_far"
# what epoch_so_far holds (a mid-epoch checkpoint stores it: src/checkpoint_file.py, SO_FAR_PREFIX)
SO_FAR_KEYS = ("loss_sum", "finite_steps", "nonfinite_steps", "seconds")


def epoch_record(cb_params):
    """The dict of numbers collected for the current epoch (created on first use)."""
    record = cb_params.get(_RECORD)
    if record is None or record.get("epoch") != cb_params.cur_epoch_num:
        record = {"epoch": cb_params.cur_epoch_num}
        cb_params[_RECORD] = record
    return record


def epoch_so_far(cb_params):
    """The current epoch's sums up to the last step (SO_FAR_KEYS), as ProgressLogger keeps them, or None."""
    return cb_params.get(_SO_FAR)


def step_record(cb_params):
    """The last train step's numbers (step, epoch as a fraction, train_loss, lr), or None."""
    return cb_params.get(_STEP_RECORD)


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


class _EpochCallback(Callback):
    """Tracks how many steps the current epoch has run, for callbacks acting at its end."""

    def on_train_epoch_begin(self, run_context):
        cb_params = run_context.original_args()
        self._epoch_start_step = cb_params.cur_step_num - cb_params.get(_STEPS_BEFORE, 0)

    def _epoch_steps(self, cb_params):
        return cb_params.cur_step_num - getattr(self, "_epoch_start_step", 0)

    def _epoch_complete(self, cb_params):
        """False when the epoch was cut short by a stop request, or its checkpoint is written already; not saved."""
        ended = self._epoch_steps(cb_params) >= cb_params.batch_num
        return ended and not cb_params.get(DIVERGED) and not cb_params.get(PREEMPTED)

    def _due(self, cb_params, interval, total_epochs):
        """Every `interval` epochs, after the last one and when StepLimit ended the run."""
        epoch = cb_params.cur_epoch_num
        return not epoch % interval or epoch == total_epochs or bool(cb_params.get(STEP_LIMIT_REACHED))

    def _global_step(self, cb_params):
        return (cb_params.cur_epoch_num - 1) * cb_params.batch_num + self._epoch_steps(cb_params)


class ProgressLogger(_EpochCallback):
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
        epoch_so_far: a resumed mid-epoch run's sums of the steps run before (SO_FAR_KEYS, from the
            mid-epoch checkpoint): the epoch's average, images and seconds then cover all its steps.
    """

    def __init__(self, log_interval, steps_per_epoch, batch_size, lr_schedule, total_epochs,
                 log_fn=print, is_main=True, accumulation_step=1, max_steps=None, epoch_so_far=None):
        super().__init__()
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
        self._so_far = dict(epoch_so_far or {})  # used by the first epoch (the resumed one) only

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
        before, self._so_far = self._so_far, {}
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
        global_step = self._global_step(cb)
        cb[_STEP_RECORD] = {"step": global_step, "epoch": global_step / self.steps_per_epoch, "train_loss": loss,
                            "lr": self.lr_at(global_step)}
        cb[_SO_FAR] = dict(zip(SO_FAR_KEYS, (self._loss_sum, self._finite_steps, self._nonfinite_steps,
                                             self._seconds_before + now - self._epoch_time)))
        if self._clock_start is None:
            self._clock_start = now
        else:
            self._clock_steps += 1
        step = self._epoch_steps(cb)
        if step % self.log_interval and step != self.steps_per_epoch and global_step != self.max_steps:
            return
        if self.is_main:
            self.log_fn(self._progress_line(cb, step, loss, now))
        self._interval_time, self._interval_steps = now, 0

    def _progress_line(self, cb, step, loss, now):
        global_step = self._global_step(cb)
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
        steps = self._epoch_steps(cb)
        average = self._loss_sum / self._finite_steps if self._finite_steps else float("nan")
        lr = self.lr_at(self._global_step(cb)) if steps else None
        # the steps whose loss is counted: a resume from a checkpoint without epoch_so_far counts its own only
        images = (self._finite_steps + self._nonfinite_steps) * self.batch_size
        # complete: the epoch's row is written now; a diverged run's last epoch is never resumed, so it is too
        epoch_record(cb).update(train_loss=average, lr=lr, images=images, seconds=seconds,
                                complete=steps >= self.steps_per_epoch or bool(cb.get(DIVERGED)))
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


class NonFiniteLossGuard(_EpochCallback):
    """Stops training after `max_nonfinite_steps` consecutive non-finite step losses.

    A NaN or Inf loss is seen at once, at the end of its step (MindSpore's CPU backend
    can crawl for minutes on NaN tensors, so waiting for the epoch's end is not an
    option). Isolated non-finite steps are counted in `nonfinite_steps` (with dynamic
    loss scaling the train cell skips their update); a run of `max_nonfinite_steps`
    requests a stop, sets cb_params[DIVERGED] so that no checkpoint is written from the
    non-finite weights, and names the last good checkpoint. `stopped` tells the caller
    to exit with an error.
    """

    def __init__(self, max_nonfinite_steps, checkpoint_manager=None, log_fn=print, is_main=True):
        super().__init__()
        if max_nonfinite_steps < 1:
            raise ValueError(f"max_nonfinite_steps must be >= 1, got {max_nonfinite_steps}")
        self.max_nonfinite_steps = int(max_nonfinite_steps)
        self.checkpoint_manager = checkpoint_manager
        self.log_fn = log_fn
        self.is_main = is_main
        self.consecutive = 0
        self.nonfinite_steps = 0
        self.stopped = False
        self.message = None

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        loss = step_loss(cb.net_outputs)
        if math.isfinite(loss):
            self.consecutive = 0
            return
        self.consecutive += 1
        self.nonfinite_steps += 1
        where = f"epoch {cb.cur_epoch_num} step {self._global_step(cb)}"
        if self.consecutive < self.max_nonfinite_steps:
            if self.is_main:
                self.log_fn(f"warning: non-finite loss {loss} at {where} "
                            f"({self.consecutive}/{self.max_nonfinite_steps} in a row)")
            return
        last_good = self._last_good_checkpoint()
        self.message = (f"stopping: {self.consecutive} consecutive non-finite losses (last {loss} at {where}); "
                        + (f"the last good checkpoint is {last_good} (continue with --resume auto)"
                           if last_good else "no checkpoint was written in this run")
                        + "; lower the lr, raise clipping or use loss scaling")
        self.stopped = True
        cb[DIVERGED] = True
        if self.is_main:
            self.log_fn(self.message)
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


class EvalCallback(_EpochCallback):
    """Evaluates every `eval_interval` epochs (and after the last), keeps the best checkpoint.

    eval_fn() returns a metrics dict with at least "top1" (as
    src.trainers.evaluate.evaluate does: top1, top5, loss, count); which weights it scores
    (EMA or raw) is the caller's choice. Every rank calls eval_fn (distributed evaluation
    needs them all); only rank 0 logs, and the checkpoint manager writes only on rank 0.
    Epochs cut short by a stop request are not evaluated.

    Args:
        eval_fn: callable with no arguments returning the metrics dict.
        eval_interval: epochs between evaluations.
        checkpoint_manager: a CheckpointManager for the best checkpoint, or None.
        train_cell: the cell whose state the best checkpoint holds (default: the
            train network Model.train runs).
        total_epochs: the run's last epoch, always evaluated; None: only every interval.
    """

    def __init__(self, eval_fn, eval_interval, checkpoint_manager=None, train_cell=None,
                 total_epochs=None, log_fn=print, is_main=True):
        super().__init__()
        self.eval_fn = eval_fn
        self.eval_interval = max(1, int(eval_interval))
        self.checkpoint_manager = checkpoint_manager
        self.train_cell = train_cell
        self.total_epochs = total_epochs
        self.log_fn = log_fn
        self.is_main = is_main
        self.history = []  # one {"epoch": e, **metrics} per evaluation
        self.best_top1 = None
        self.best_epoch = None

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
                                                         self._global_step(cb), metrics)
        else:
            improved = self.best_top1 is None or top1 > self.best_top1
        if improved:
            self.best_top1, self.best_epoch = top1, epoch
        self.history.append({"epoch": epoch, **metrics})
        epoch_record(cb).update(top1=top1, top5=metrics.get("top5"), val_loss=metrics.get("loss"))
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
        elif self.best_epoch is not None:
            parts.append(f"best {self.best_top1:.4f} at epoch {self.best_epoch}")
        elif self.checkpoint_manager is not None and self.checkpoint_manager.best_top1 is not None:
            parts.append(f"best so far {self.checkpoint_manager.best_top1:.4f}")
        return " ".join(parts)


class CheckpointCallback(_EpochCallback):
    """Saves the whole train-cell state every `save_every_epochs` epochs and after the last.

    The checkpoint holds every Parameter of the train cell plus epoch_num, step_num and
    best_top1 (see src.run.checkpointing), enough for load_training_state to resume.
    Epochs cut short by a stop request, and diverged runs, are not saved: the previous
    complete checkpoint stays the latest.
    """

    def __init__(self, checkpoint_manager, save_every_epochs, train_cell=None, total_epochs=None,
                 log_fn=print):
        super().__init__()
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
            if cb.get(PREEMPTED):
                return  # StopOnSignal has written the checkpoint
            if self.checkpoint_manager.is_main:
                reason = "training diverged" if cb.get(DIVERGED) else "the epoch did not complete"
                self.log_fn(f"epoch {epoch}: {reason}, no checkpoint written")
            return
        start = time.time()
        path = self.checkpoint_manager.save(self.train_cell or cb.train_network, epoch, self._global_step(cb))
        if path is not None:
            self.log_fn(f"saved {path} ({time.time() - start:.1f} s)")


class ResumePosition(Callback):
    """First in the callback list of a run resumed `skip_steps` steps into an epoch.

    That epoch's remaining steps run as a training pass of their own over a dataset of only
    those batches (train.py); this makes the callbacks count them as steps skip_steps + 1 ...
    of a `steps_per_epoch`-step epoch, so that step numbers, the lr shown and the checkpoint
    at the epoch's end are those of the uninterrupted run. `stop_requested` tells whether a
    pass ended on a stop request (then no further pass runs).
    """

    def __init__(self, steps_per_epoch, skip_steps=0):
        super().__init__()
        self.steps_per_epoch = int(steps_per_epoch)
        self.skip_steps = int(skip_steps)
        self.stop_requested = False

    def on_train_begin(self, run_context):
        run_context.original_args().batch_num = self.steps_per_epoch

    def on_train_epoch_begin(self, run_context):
        run_context.original_args()[_STEPS_BEFORE] = self.skip_steps
        self.skip_steps = 0

    def on_train_end(self, run_context):
        self.stop_requested = run_context.get_stop_requested()


class _StopWithCheckpoint(_EpochCallback):
    """What StopOnSignal and StepLimit share: at the end of a step, a checkpoint of the exact position.

    A stop in the middle of an epoch writes the mid-epoch checkpoint (the epoch and the steps run
    in it, see CheckpointManager.save) and sets cb_params[PREEMPTED], so that the cut epoch is
    neither evaluated nor saved again; `--resume auto` continues with the next step of that
    epoch, over its remaining batches, as if nothing had happened. In a distributed run `agree`
    (RunContext.max_over_ranks) keeps every rank until rank 0's checkpoint is complete.
    """

    def __init__(self, checkpoint_manager, train_cell=None, agree=None, log_fn=print, is_main=True):
        super().__init__()
        self.checkpoint_manager = checkpoint_manager
        self.train_cell = train_cell
        self.agree = agree
        self.log_fn = log_fn
        self.is_main = is_main
        self.path = None

    def _save_position(self, cb):
        """Write the checkpoint of the position reached; (epoch, steps run in it)."""
        epoch, step = cb.cur_epoch_num, self._epoch_steps(cb)
        cb[PREEMPTED] = True
        mid_epoch = step < cb.batch_num
        self.path = self.checkpoint_manager.save(self.train_cell or cb.train_network, epoch, self._global_step(cb),
                                                 epoch_step=step if mid_epoch else None,
                                                 epoch_so_far=epoch_so_far(cb) if mid_epoch else None)
        if self.agree is not None:
            self.agree(0)  # no rank exits before rank 0's checkpoint is complete
        return epoch, step


class StopOnSignal(_StopWithCheckpoint):
    """At the end of the step in progress when a SIGTERM / Ctrl-C arrived: a checkpoint, then stop.

    `request` is a src.run.preemption.StopRequest. The checkpoint holds the exact position
    (_StopWithCheckpoint). In a distributed run `agree` also makes every rank see a signal that
    reached any of them at the same step: all ranks stop together. `signum` is the signal that
    stopped the run, or None.
    """

    def __init__(self, request, checkpoint_manager, train_cell=None, agree=None, log_fn=print, is_main=True):
        super().__init__(checkpoint_manager, train_cell=train_cell, agree=agree, log_fn=log_fn, is_main=is_main)
        self.request = request
        self.signum = None

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        signum = self.request.signum or 0
        if self.agree is not None:
            signum = self.agree(signum)
        if not signum or cb.get(DIVERGED):
            return
        import signal

        from src.run.preemption import exit_status

        self.signum = signum
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
    At the end of an epoch the epoch is evaluated and saved as the run's last (STEP_LIMIT_REACHED).
    Steps are counted as the other callbacks count them, (epoch - 1) * steps_per_epoch + step;
    place it after NonFiniteLossGuard and StopOnSignal (a diverged or signalled step is theirs).
    `reached` tells whether the limit ended the run.
    """

    def __init__(self, max_steps, checkpoint_manager, train_cell=None, agree=None, log_fn=print, is_main=True):
        super().__init__(checkpoint_manager, train_cell=train_cell, agree=agree, log_fn=log_fn, is_main=is_main)
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.max_steps = int(max_steps)
        self.reached = False
        self._where = None

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        if self.reached or self._global_step(cb) < self.max_steps or cb.get(DIVERGED) or cb.get(PREEMPTED):
            return
        self.reached = True
        self._where = f"epoch {cb.cur_epoch_num} step {self._epoch_steps(cb)}/{cb.batch_num}"
        if self._epoch_steps(cb) < cb.batch_num:
            self._save_position(cb)
        else:
            cb[STEP_LIMIT_REACHED] = True  # a whole epoch: its evaluation and checkpoint come at its end
        run_context.request_stop()

    def on_train_end(self, run_context):
        if not self.reached or self._where is None:
            return
        path = self.path or self.checkpoint_manager.latest_path
        if self.is_main:
            self.log_fn(f"stopped at --max_steps {self.max_steps} after {self._where}: saved {path}; continue with "
                        "--resume auto (and a larger --max_steps, or none)")
        self._where = None  # said once, also when a resumed epoch's pass and the next one both end
