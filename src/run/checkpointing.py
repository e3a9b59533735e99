"""Crash-safe checkpoints of the whole training state, and finding them again to resume.

The file format (entries, names, the atomic writer, the readers) is src/checkpoint_file.py's;
here are the run's uses of it: `CheckpointManager` (periodic, best and mid-epoch checkpoints,
keep_max, resume), the resume checks and the output directory's preparation.
"""
import contextlib
import errno
import glob
import os
from typing import NamedTuple, Optional

import numpy as np
from mindspore import Tensor

from src.atomic import PARTIAL_MARK
from src.checkpoint_file import (BEST_KEY, EPOCH_KEY, EPOCH_STEP_KEY, METRIC_PREFIX, PERIODIC_NAME, SO_FAR_PREFIX, STEP_KEY,
                                 CheckpointError, OutputWriteError, best_name, is_metadata, load, periodic_name)
from src.checkpoint_file import save_checkpoint as save_checkpoint_atomic
from src.errors import UserError
from src.models.checkpoint import describe_mismatch

__all__ = ["CheckpointError", "CheckpointManager", "OutputWriteError", "ResumePoint", "save_checkpoint_atomic",
           "remove_partial_files", "read_checkpoint_meta", "find_latest_checkpoint", "load_training_state",
           "prepare_output_dir", "check_resume", "write_errors_reported", "CONFIG_DERIVED_PARAMS"]

# errno values of a write the filesystem refused: full, over quota, read-only, no permission, I/O, too large
_WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EFBIG}


# Parameters that the config recreates and a resume must not take from the checkpoint: the
# per-step learning-rate array (the position in it is the restored global_step). Restoring it
# would silently keep the old schedule when a resumed run changes base_lr or epochs.
CONFIG_DERIVED_PARAMS = ("learning_rate",)


# --------------------------------------------------------------------------- writing

def remove_partial_files(directory):
    """Delete temporary files left by a writer that was killed mid-save; returns their count."""
    removed = 0
    for leftover in glob.glob(os.path.join(directory, f".*{PARTIAL_MARK}*")):
        try:
            os.remove(leftover)
            removed += 1
        except OSError:
            pass
    return removed


class CheckpointManager:
    """The run's checkpoints: the last `keep_max` epoch checkpoints and one best checkpoint.

    Epoch checkpoints are `<prefix>-<epoch>_<step>.ckpt`; the best one is
    `<prefix>_best.ckpt`, replaced whenever the evaluation top-1 improves. Old epoch
    checkpoints are deleted only after the new one is complete, so a crash never leaves
    fewer complete checkpoints than before. `best_top1` is stored in every checkpoint and
    taken back by resume().

    With is_main=False (ranks other than 0) nothing is written and saves return None.
    `extra_meta` entries (the run's data settings) go into every checkpoint.
    """

    def __init__(self, output_dir, prefix, keep_max, is_main=True, run_meta=None, extra_meta=None):
        if keep_max < 1:
            raise ValueError(f"keep_max must be >= 1, got {keep_max}")
        self.prefix = prefix
        self.keep_max = keep_max
        self.is_main = is_main
        self.extra_meta = dict(extra_meta or {})
        self.best_top1 = None
        self.latest_path = None  # the last complete checkpoint this manager wrote
        self.run_meta = dict(run_meta or {})  # RUN_KEYS -> this run's values, stored in every checkpoint
        self.resume_point = ResumePoint(None)  # set by resume()
        self._resume_state = None  # (path, entries) that resume() read, until restore() applies them
        self.use_directory(output_dir)

    def use_directory(self, output_dir):
        """Save to `output_dir` from now on (train.py: the directory prepare_output_dir chose once every input
        was checked); rank 0 removes a killed writer's temporaries there. Creates nothing."""
        self.output_dir = os.path.abspath(output_dir)
        if self.is_main and os.path.isdir(self.output_dir):
            remove_partial_files(self.output_dir)

    @property
    def best_path(self):
        return os.path.join(self.output_dir, best_name(self.prefix))

    def epoch_path(self, epoch, step):
        return os.path.join(self.output_dir, periodic_name(self.prefix, epoch, step))

    def epoch_checkpoints(self):
        """Paths of this prefix's epoch checkpoints, oldest first (by epoch, then step)."""
        found = []
        for name in os.listdir(self.output_dir) if os.path.isdir(self.output_dir) else ():
            match = PERIODIC_NAME.match(name)
            if match and match["prefix"] == self.prefix:
                found.append((int(match["epoch"]), int(match["step"]), os.path.join(self.output_dir, name)))
        return [path for _, _, path in sorted(found)]

    def _meta(self, epoch, step):
        meta = {**self.extra_meta, EPOCH_KEY: int(epoch), STEP_KEY: int(step), **self.run_meta}
        if self.best_top1 is not None:
            meta[BEST_KEY] = float(self.best_top1)
        return meta

    def resume(self, source, share=None, log_fn=print):
        """Where this run continues, as rank 0 decides it: a ResumePoint (status, epoch, epoch_step, path).

        source: None (a fresh run), "auto" (the latest checkpoint in output_dir; a fresh run while
        there is none) or a checkpoint path. Rank 0 alone finds the checkpoint and reads it once,
        whole and CRC-checked; checks it against the run's shape (run_meta, check_resume: one-line
        refusals) and takes over its best_top1, so that the first evaluation does not replace a
        better best checkpoint. The state waits for restore(): the data pipeline needs the position
        before the train cell can exist. Every other rank learns the decision and the position
        through `share` (RunContext.from_main), with no path, and the state in restore().
        """
        path, stored, status, error = None, None, 0, None
        if self.is_main and source:
            try:
                if source == "auto":
                    path, stored = _latest_checkpoint(self.output_dir, lambda p: load(p, crc_check=True), log_fn)
                else:
                    path, stored = source, _read_state(source)
                if path:
                    status = 2 if check_resume(_metadata(stored), path, self.run_meta, log_fn) == "finished" else 1
            except UserError as exc:
                status, error = -1, exc
        share = share or int
        status = share(status)
        if error is not None:
            raise error
        if status < 0:
            raise UserError("rank 0 could not resume (its train.log says why)")
        meta = _metadata(stored) if stored else {}
        epoch, epoch_step = (share(int(meta.get(key, 0) or 0)) for key in (EPOCH_KEY, EPOCH_STEP_KEY))
        if status and self.is_main:
            self.best_top1 = meta.get(BEST_KEY)
            self._resume_state = (path, stored)
        elif source and not status:
            log_fn(f"--resume {source}: no checkpoint in {self.output_dir} yet, starting from scratch")
        so_far = {name[len(SO_FAR_PREFIX):]: value for name, value in meta.items() if name.startswith(SO_FAR_PREFIX)}
        self.resume_point = ResumePoint((None, "continue", "finished")[status], epoch, epoch_step, path,
                                        so_far if status and epoch_step else None)
        return self.resume_point

    def restore(self, train_cell, steps_per_epoch, share_parameters=None, log_fn=print):
        """Record the run's (micro-)steps per epoch, stored in every checkpoint, and after resume() put
        the checkpoint's state into `train_cell`.

        Rank 0 uses what resume() read (refused in one line when the data's steps per epoch
        changed); the other ranks get rank 0's values through `share_parameters`
        (RunContext.share_parameters): other nodes need not see rank 0's disk.
        """
        self.run_meta["steps_per_epoch"] = int(steps_per_epoch)
        if self.resume_point.status is None:
            return
        if self._resume_state is not None:
            (path, stored), self._resume_state = self._resume_state, None
            check_resume(_metadata(stored), path, dict(steps_per_epoch=steps_per_epoch))
            state = _apply_state(train_cell, stored, path)
            within = f" + {self.resume_point.epoch_step} step(s) of epoch {state['epoch'] + 1}" \
                if self.resume_point.epoch_step else ""
            log_fn(f"resumed from {path}: epoch {state['epoch']}{within}, step {state['global_step']}")
        if share_parameters is not None:
            share_parameters(train_cell)
        if not self.is_main:
            log_fn(f"resumed from rank 0's checkpoint: epoch {self.resume_point.epoch}, "
                   f"{self.resume_point.epoch_step} step(s) into the next")

    def kept(self):
        """What a failed write leaves to continue from, in words (for the error line)."""
        return describe_kept(self.output_dir, self.latest_path)

    def save(self, train_cell, epoch, step, epoch_step=None, epoch_so_far=None):
        """Write the epoch checkpoint of `train_cell`, then delete the ones beyond keep_max.

        With `epoch_step` (a run stopped by a signal), the checkpoint is taken `epoch_step`
        steps into epoch `epoch`: it stores epoch - 1 completed epochs and the position in the
        epoch, so that a resume continues with the next step (see check_resume), and the epoch's
        sums so far (`epoch_so_far`, a dict of numbers) that the resume gets back as ResumePoint.so_far.
        """
        if not self.is_main:
            return None
        meta = self._meta(epoch, step)
        if epoch_step is not None:
            meta.update({EPOCH_KEY: int(epoch) - 1, EPOCH_STEP_KEY: int(epoch_step)})
            meta.update({SO_FAR_PREFIX + key: value for key, value in (epoch_so_far or {}).items()})
        try:
            path = save_checkpoint_atomic(train_cell, self.epoch_path(epoch, step), meta)
        except OutputWriteError as exc:
            raise OutputWriteError(f"{exc}; {self.kept()}") from None
        self.latest_path = path
        older = [p for p in self.epoch_checkpoints() if p != path]
        for stale in older[:max(0, len(older) + 1 - self.keep_max)]:
            os.remove(stale)
        return path

    def save_best(self, train_cell, epoch, step, metrics):
        """Replace the best checkpoint when metrics["top1"] beats the best so far.

        Returns True when the best checkpoint was written (on rank 0) or would have been.
        """
        top1 = float(metrics["top1"])
        if self.best_top1 is not None and not top1 > self.best_top1:
            return False
        self.best_top1 = top1
        if self.is_main:
            meta = self._meta(epoch, step)
            meta.update({METRIC_PREFIX + key: value for key, value in metrics.items()
                         if isinstance(value, (int, float, np.number)) and not isinstance(value, bool)})
            try:
                save_checkpoint_atomic(train_cell, self.best_path, meta)
            except OutputWriteError as exc:
                raise OutputWriteError(f"{exc}; {self.kept()}") from None
        return True


class ResumePoint(NamedTuple):
    """Where a run continues (CheckpointManager.resume): `status` None (nothing to resume), "continue" or
    "finished" (the checkpoint already holds the whole run); `epoch` epochs and `epoch_step` steps of the
    next one done; `path` the checkpoint and `so_far` the sums of those steps (a mid-epoch checkpoint's
    epoch_so_far: loss_sum, finite_steps, ...) on rank 0 only."""
    status: Optional[str]
    epoch: int = 0
    epoch_step: int = 0
    path: Optional[str] = None
    so_far: Optional[dict] = None


# --------------------------------------------------------------------------- reading

def _scalar(value):
    if isinstance(value, str) or not hasattr(value, "asnumpy"):
        return value
    array = value.asnumpy()
    return array.item() if array.size == 1 else array


def read_checkpoint_meta(path):
    """The metadata entries of a checkpoint (epoch_num, step_num, best_top1, metric_*).

    Raises CheckpointError for a missing or unreadable file; returns {} for a checkpoint
    without metadata (converted weights, a foreign file). Reading parses the whole file.
    """
    return _metadata(load(path, choice_func=is_metadata))


def _metadata(stored):
    return {name: _scalar(value) for name, value in stored.items() if is_metadata(name)}


def find_latest_checkpoint(output_dir, log_fn=print):
    """The checkpoint in `output_dir` with the highest stored (epoch_num, step_num), or None.

    Only visible *.ckpt files are considered: the hidden temporary files of an interrupted
    save never are. Order comes from the epoch/step stored in the files, not from
    modification times (a copied or touched file keeps its place). Epoch checkpoints are
    read newest name first and the first readable one ends their scan, so a resume reads
    one epoch checkpoint, plus any other checkpoint (the best one) whose name carries no
    epoch. Unreadable files are reported through log_fn and skipped.
    """
    return _latest_checkpoint(output_dir, read_checkpoint_meta, log_fn)[0]


def _latest_checkpoint(output_dir, read, log_fn):
    """(path, read(path)) of find_latest_checkpoint's choice, or (None, None); `read` returns a
    checkpoint's entries (metadata at least) or raises CheckpointError."""
    if not os.path.isdir(output_dir):
        return None, None
    named, unnamed = [], []
    for name in sorted(os.listdir(output_dir)):
        path = os.path.join(output_dir, name)
        if name.startswith(".") or not name.endswith(".ckpt") or not os.path.isfile(path):
            continue
        match = PERIODIC_NAME.match(name)
        if match:
            named.append(((int(match["epoch"]), int(match["step"])), path))
        else:
            unnamed.append(path)
    named.sort(reverse=True)

    def candidate(path, rank):
        try:
            entries = read(path)
        except CheckpointError as exc:
            log_fn(f"skipping {exc}")
            return None
        if EPOCH_KEY not in entries:
            return None
        return (int(_scalar(entries[EPOCH_KEY])), int(_scalar(entries.get(STEP_KEY, 0))), rank, path), path, entries

    best = None  # only the leading candidate's entries are kept (a whole state when read is load)
    for path in [path for _, path in named] + unnamed:
        is_named = path not in unnamed
        if is_named and best is not None:
            continue  # the newest readable epoch checkpoint ends their scan
        found = candidate(path, 1 if is_named else 0)  # an epoch checkpoint wins a tie with the best
        if found and (best is None or found[0] > best[0]):
            best = found
    return (best[1], best[2]) if best else (None, None)


def check_resume(meta, path, settings, log_fn=print):
    """Whether and how a run continues from the checkpoint at `path` whose metadata is `meta`.

    `settings` holds this run's RUN_KEYS values (those not known yet may be left out).
    Raises CheckpointError, one line naming the setting and both values, when a setting that
    decides the step count or the schedule differs (batch_size, device_num, accumulation_step,
    steps_per_epoch) or `epochs` is below the epoch reached; returns "finished" when the
    checkpoint already holds the whole run (epochs reached, no epoch in progress); logs a
    longer `epochs` as a changed schedule and returns "continue". Checkpoints written before
    these entries existed are only checked for the epoch.
    """
    done, in_epoch = int(meta.get(EPOCH_KEY, 0)), int(meta.get(EPOCH_STEP_KEY, 0) or 0)
    reached = done + (1 if in_epoch else 0)
    epochs = settings.get("epochs")
    if epochs is not None and epochs < reached:
        raise CheckpointError(f"cannot resume: epochs {epochs} is below the {reached} epoch(s) {path} has reached "
                              f"(set --epochs {reached} or more)")
    words = {"device_num": "device count", "steps_per_epoch": "steps per epoch (the training data changed)"}
    for key in ("batch_size", "device_num", "accumulation_step", "steps_per_epoch"):
        if key in settings and key in meta and int(meta[key]) != int(settings[key]):
            raise CheckpointError(f"cannot resume: {words.get(key, key)} is {settings[key]} but {meta[key]} in "
                                  f"{path}; the step count and the lr schedule depend on it: resume with "
                                  f"{key} {meta[key]}, or start a new run in another output_dir")
    if epochs is not None and done == epochs and not in_epoch:
        return "finished"
    if epochs is not None and "epochs" in meta and int(meta["epochs"]) != epochs:
        log_fn(f"schedule changed: epochs {int(meta['epochs'])} -> {epochs}; the lr schedule is rebuilt for "
               f"{epochs} epochs and continues at step {int(meta.get(STEP_KEY, 0))}")
    return "continue"


def describe_kept(output_dir, latest=None):
    """What is left in output_dir to continue from after a failed write, in words."""
    latest = latest or find_latest_checkpoint(output_dir, log_fn=lambda _: None)
    return (f"kept the last complete checkpoint {latest} (continue with --resume auto once the problem is fixed)"
            if latest else "no checkpoint of this run was complete yet")


@contextlib.contextmanager
def write_errors_reported(kept):
    """Within the block, a write the filesystem refuses (full, read-only, permission) becomes one
    OutputWriteError line naming the path and `kept()`: what is left to continue from."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in _WRITE_ERRNOS:
            raise
        raise OutputWriteError(f"cannot write {exc.filename or 'a file of the run'}: {exc.strerror}; "
                               f"{kept()}") from None


def load_training_state(train_cell, path, skip=CONFIG_DERIVED_PARAMS):
    """Restore every Parameter of `train_cell` from the checkpoint at `path`.

    The checkpoint must hold exactly the train cell's Parameters (by Parameter name:
    network weights, optimizer state, EMA copies, loss scale, counters) with the same
    shapes; otherwise nothing is changed and a one-line CheckpointError lists the
    missing, unexpected and mis-shaped names (shortened). Names in `skip` are neither
    required nor restored (see CONFIG_DERIVED_PARAMS).

    Returns:
        dict(epoch=epochs completed, global_step=train steps completed, best_top1=best
        evaluation top-1 so far or None, metrics={name: value} of a best checkpoint, path).
    """
    return _apply_state(train_cell, _read_state(path), path, skip)


def _read_state(path):
    """Every entry of a training checkpoint (CRC-checked); CheckpointError for anything else."""
    stored = load(path, crc_check=True)
    if EPOCH_KEY not in stored:
        raise CheckpointError(f"{path} holds no training state (no {EPOCH_KEY!r} entry): "
                              "use it as pretrained weights instead of resuming from it")
    return stored


def _apply_state(train_cell, stored, path, skip=CONFIG_DERIVED_PARAMS):
    own = {}
    for _, param in train_cell.parameters_and_names():
        own.setdefault(param.name, param)
    state = {name: value for name, value in stored.items() if not is_metadata(name) and name not in skip}
    own = {name: param for name, param in own.items() if name not in skip}
    missing = set(own) - set(state)
    unexpected = set(state) - set(own)
    misshaped = [f"{name} {tuple(state[name].shape)} vs {tuple(own[name].shape)}"
                 for name in sorted(set(own) & set(state))
                 if not isinstance(state[name], str) and tuple(state[name].shape) != tuple(own[name].shape)]
    if missing or unexpected or misshaped:
        raise CheckpointError(f"{path} is not a training state of this network: "
                              + describe_mismatch(missing, unexpected, misshaped))
    for name, param in own.items():
        param.set_data(Tensor(state[name].asnumpy().reshape(param.shape), dtype=param.dtype))
    meta = _metadata(stored)
    return {
        "epoch": int(meta[EPOCH_KEY]),
        "global_step": int(meta.get(STEP_KEY, 0)),
        "best_top1": meta.get(BEST_KEY),
        "metrics": {name[len(METRIC_PREFIX):]: value for name, value in meta.items()
                    if name.startswith(METRIC_PREFIX)},
        "path": os.path.abspath(path),
    }


# --------------------------------------------------------------------------- the run directory

def prepare_output_dir(output_dir, overwrite=False, resume=None, is_main=True, share=None, log_fn=print,
                       data_path=None):
    """The directory this run writes to; an existing non-empty one is never silently reused.

    Rank 0 (is_main) decides (src.run.run_dir.choose_output_suffix: fresh, resumed,
    overwritten only when this project created it, else `<output_dir>-n`). Other ranks must
    not look for themselves: rank 0 may already have created or filled the directory by then.
    They get rank 0's decision through `share` (RunContext.from_main: rank 0's integer on every
    rank), as the suffix number (0: output_dir itself, -1: rank 0 failed and raises the error),
    and create that directory themselves: on another node without a shared filesystem it does
    not exist yet, and each rank writes its own log there. `resume` is the --resume value and
    `data_path` the dataset root (run_dir.check_output_dir's rules).
    """
    from src.run.run_dir import choose_output_suffix, mark_project_dir

    output_dir = os.path.normpath(output_dir)
    if not is_main and share is None:
        raise ValueError("a rank other than 0 learns the output directory from rank 0: pass share")
    suffix, error = 0, None
    if is_main:
        try:
            suffix = choose_output_suffix(output_dir, overwrite, resume, log_fn, data_path)
        except (UserError, OSError) as exc:
            suffix, error = -1, exc
    if share is not None:
        suffix = share(suffix)
    if isinstance(error, OSError):
        raise OutputWriteError(f"cannot prepare output_dir {output_dir}: {error.strerror or error}") from None
    if error is not None:
        raise error
    if suffix < 0:
        raise UserError(f"rank 0 could not prepare output_dir {output_dir} (its log says why)")
    chosen = f"{output_dir}-{suffix}" if suffix else output_dir
    if not is_main:  # marked too: a later --resume auto of this rank's node uses it (run_dir.check_output_dir)
        os.makedirs(chosen, exist_ok=True)
        mark_project_dir(chosen)
    return chosen
