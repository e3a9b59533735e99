"""The run state: what the training callbacks know together, and the result a run returns.

One `RunState` is made per run (train.py) and given to every callback of src/run/callbacks.py and
src/run/metrics_log.py; they read and write it instead of flags in MindSpore's cb_params:

- the position: the epoch, the steps run in it (a resumed epoch counts the steps before the
  resume), the global step;
- how the run stops: `stop_reason` (None, "diverged", "signal", "step_limit"), the signal, whether
  the stop wrote the checkpoint of its position (`position_saved`: the cut epoch is then neither
  evaluated nor saved again), the message of a diverged run;
- counts and scores: non-finite steps (all, and in a row), this session's best top-1 and its epoch;
- what the epoch's row and the step rows are made of: `epoch_record` (train loss, lr, images,
  seconds, complete; top1, top5, val_loss), `step_record`, `epoch_so_far` (the epoch's sums so far,
  which a mid-epoch checkpoint carries: SO_FAR_KEYS).

`result()` gives the `RunResult` that the run returns and train.py turns into its exit status.
Steps are counted from the epoch number, (epoch - 1) * steps_per_epoch + step, because
Model.train restarts cb_params.cur_step_num at 0 when it resumes at initial_epoch > 0.
Nothing here imports MindSpore.
"""
from typing import NamedTuple

from src.run.preemption import exit_status

__all__ = ["RunState", "RunResult", "SO_FAR_KEYS", "STOP_REASONS"]

# what epoch_so_far holds (a mid-epoch checkpoint stores it: src/checkpoint_file.py, SO_FAR_PREFIX)
SO_FAR_KEYS = ("loss_sum", "finite_steps", "nonfinite_steps", "seconds")
STOP_REASONS = ("diverged", "signal", "step_limit")


class RunResult(NamedTuple):
    """How a run ended: `status` is the process exit status (0 done or stopped at --max_steps, 1 diverged,
    128 + signum stopped by a signal); `stop_reason` one of STOP_REASONS or None; `message` the diverged
    run's line (or None)."""
    status: int
    stop_reason: object
    message: object


class RunState:
    """The shared state of one run's callbacks (see the module docstring).

    Args:
        epoch_steps_before: steps of the first epoch run before this session (a mid-epoch resume).
        epoch_so_far: that epoch's sums up to them (SO_FAR_KEYS, from the mid-epoch checkpoint), or None.
    """

    def __init__(self, epoch_steps_before=0, epoch_so_far=None):
        self.epoch = None  # cb_params.cur_epoch_num of the epoch in progress
        self.stop_reason = None
        self.signum = None
        self.position_saved = False
        self.message = None
        self.nonfinite_steps = 0
        self.consecutive_nonfinite = 0
        self.best_top1 = None
        self.best_epoch = None
        self.epoch_record = {}
        self.step_record = None
        self.epoch_so_far = dict(epoch_so_far) if epoch_so_far else None
        self._steps_before = int(epoch_steps_before)
        self._epoch_start = 0

    def begin_epoch(self, cb_params):
        """At an epoch's beginning (every callback calls it; the first call of an epoch counts)."""
        if cb_params.cur_epoch_num == self.epoch:
            return
        if self.epoch is not None:
            self.epoch_so_far = None  # the resumed sums belong to the first epoch only
        self.epoch = cb_params.cur_epoch_num
        self._epoch_start = cb_params.cur_step_num - self._steps_before
        self._steps_before = 0
        self.epoch_record = {"epoch": self.epoch}

    def epoch_steps(self, cb_params):
        """Steps run in the current epoch, those before a resume included."""
        return cb_params.cur_step_num - self._epoch_start

    def global_step(self, cb_params):
        return (cb_params.cur_epoch_num - 1) * cb_params.batch_num + self.epoch_steps(cb_params)

    def stop(self, reason, signum=None, message=None):
        """Record why the run stops (the callback that decided requests the stop from Model.train)."""
        if reason not in STOP_REASONS:
            raise ValueError(f"unknown stop reason {reason!r}, use one of {STOP_REASONS}")
        self.stop_reason, self.signum, self.message = reason, signum, message

    @property
    def diverged(self):
        return self.stop_reason == "diverged"

    def result(self):
        """The RunResult of the run so far."""
        if self.diverged:
            status = 1
        elif self.stop_reason == "signal":
            status = exit_status(self.signum)
        else:
            status = 0
        return RunResult(status, self.stop_reason, self.message)
