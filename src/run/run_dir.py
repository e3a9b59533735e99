"""The run directory (output_dir): checked before any work, chosen, and never a user's files deleted.

No MindSpore here: train.py checks the path before the heavy imports.

A directory this project created holds the marker file `.nfnet_run`. Only such a directory is
ever cleared by --overwrite_output, and only of the files a run writes (RUN_FILES and the
checkpoint names below); anything else in it is kept and listed. A directory without the
marker is never cleared: the run goes to `<output_dir>-1` instead, or --overwrite_output is
refused with one line.
"""
import os
import re

from src.atomic import PARTIAL_MARK
from src.checkpoint_file import RUN_CHECKPOINT_NAME
from src.errors import UserError
from src.variants import VARIANTS

RUN_MARKER = ".nfnet_run"
# What train.py writes into a run directory (besides checkpoints).
RUN_FILES = ("config.yaml", "train.log", "metrics.csv", "metrics_steps.csv", "curves.png", "bad_files.txt",
             RUN_MARKER)
_RANK_LOG = re.compile(r"^train_rank\d+\.log$")
# hidden temporaries of an interrupted write (src/atomic.py: checkpoints, config.yaml, curves.png)
_TEMPORARY = re.compile(r"^\..*" + re.escape(PARTIAL_MARK))


def is_run_file(name):
    """True for a file name this project's train.py writes into a run directory."""
    if name in RUN_FILES or _RANK_LOG.match(name) or _TEMPORARY.match(name):
        return True
    match = RUN_CHECKPOINT_NAME.match(name)
    return bool(match and match["prefix"] in VARIANTS)


def is_project_dir(path):
    return os.path.isfile(os.path.join(path, RUN_MARKER))


def mark_project_dir(path):
    """Create the marker (idempotent): this directory was created by a run of this project."""
    marker = os.path.join(path, RUN_MARKER)
    if not os.path.exists(marker):
        with open(marker, "w", encoding="utf-8") as f:
            f.write("created by train.py of nfnet-mindspore; --overwrite_output may clear the run's files here\n")


def _nonempty_dir(path):
    return os.path.isdir(path) and bool(os.listdir(path))


def _is_inside(path, root):
    """True when `path` is `root` or lies under it (symbolic links resolved)."""
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def run_checkpoints(path):
    """Names of the checkpoints (epoch or best, any variant) a run left in directory `path`."""
    return sorted(n for n in os.listdir(path) if is_run_file(n) and n.endswith(".ckpt") and not n.startswith("."))


def _listed(names, limit=3):
    return ", ".join(names[:limit]) + (", ..." if len(names) > limit else "")


def check_output_dir(output_dir, overwrite=False, resume=None, data_path=None):
    """Refuse, in one line and before any work, an output_dir this run could not or must not use.

    A file in its place or on its path, a directory (or the nearest existing parent) this
    process cannot write, a directory inside `data_path` (it would become a class folder of the
    dataset), --overwrite_output on a non-empty directory without the marker. With `resume`
    (the --resume value: "auto" or a checkpoint path; True counts as "auto"), a non-empty
    output_dir is where the run continues, so it must be that run's directory: one holding
    checkpoints only when `resume` is auto or one of them, and one without the marker only
    when it holds nothing but a run's files, checkpoints among them (a run directory copied
    without its hidden marker; it is marked then). Creates nothing.
    """
    path = os.path.abspath(output_dir)
    probe = path
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    if not os.path.isdir(probe):
        what = "exists and is not a directory" if probe == path else f"cannot be created: {probe} is a file"
        raise UserError(f"output_dir {path} {what}")
    if data_path and _is_inside(path, data_path):
        raise UserError(f"output_dir {path} is inside data_path {os.path.abspath(data_path)}: the run directory "
                        "would become a folder of the dataset; choose an output_dir outside it")
    if not os.access(probe, os.W_OK | os.X_OK):
        where = "" if probe == path else f" (its parent {probe} is not)"
        raise UserError(f"output_dir {path} is not writable{where}: a read-only filesystem or no permission")
    if overwrite and not resume and _nonempty_dir(path) and not is_project_dir(path):
        raise UserError(f"--overwrite_output refused: {path} was not created by train.py (no {RUN_MARKER} "
                        "marker), nothing deleted; choose another output_dir or clear it yourself")
    if resume and _nonempty_dir(path):
        _check_resume_dir(path, "auto" if resume is True else str(resume))


def _check_resume_dir(path, resume):
    """check_output_dir's rules for a non-empty output_dir that a resumed run would write and prune in."""
    checkpoints = run_checkpoints(path)
    if resume != "auto" and checkpoints and not (
            os.path.isfile(resume) and os.path.samefile(os.path.dirname(os.path.abspath(resume)), path)):
        raise UserError(f"--resume {resume}: output_dir {path} holds another run's checkpoints "
                        f"({_listed(checkpoints)}), which this run would replace and prune; nothing written: "
                        "resume a run in its own directory (--output_dir the checkpoint's folder) or continue "
                        "into a new output_dir")
    if is_project_dir(path):
        return
    foreign = sorted(n for n in os.listdir(path) if not is_run_file(n))
    if foreign or not checkpoints:
        what = f"holds files train.py does not write ({_listed(foreign)})" if foreign else \
            "holds no checkpoint to resume"
        raise UserError(f"--resume {resume}: output_dir {path} was not created by train.py (no {RUN_MARKER} "
                        f"marker) and {what}; nothing written: choose a new output_dir, or the run directory "
                        "to continue")


def choose_output_suffix(output_dir, overwrite, resume, log_fn, data_path=None):
    """prepare_output_dir's decision on rank 0, carried out; 0 or the n of `<output_dir>-n`.

    missing or empty: created (and marked) and used; non-empty with `resume`: used; non-empty
    with `overwrite`: only a marked directory, cleared of the run files (see is_run_file),
    other files kept and listed; non-empty otherwise: the first free `<output_dir>-n`.
    """
    check_output_dir(output_dir, overwrite, resume, data_path)
    if not _nonempty_dir(output_dir):
        os.makedirs(output_dir, exist_ok=True)
        mark_project_dir(output_dir)
        return 0
    if resume:
        mark_project_dir(output_dir)  # check_output_dir let only a run's own directory through
        log_fn(f"output_dir {output_dir} exists: resuming in it")
        return 0
    if overwrite:
        names = sorted(os.listdir(output_dir))
        stale = [n for n in names if is_run_file(n) and n != RUN_MARKER
                 and os.path.isfile(os.path.join(output_dir, n))]
        kept = [n for n in names if n not in stale and n != RUN_MARKER]
        for name in stale:
            os.remove(os.path.join(output_dir, name))
        line = (f"output_dir {output_dir} exists: overwrite_output is set, deleted the {len(stale)} file(s) "
                "of the previous run")
        if kept:
            line += f"; kept {len(kept)} other(s): {', '.join(kept[:5])}" + (", ..." if len(kept) > 5 else "")
        log_fn(line)
        return 0
    suffix = 1
    while _nonempty_dir(f"{output_dir}-{suffix}") or os.path.exists(f"{output_dir}-{suffix}") \
            and not os.path.isdir(f"{output_dir}-{suffix}"):
        suffix += 1
    chosen = f"{output_dir}-{suffix}"
    os.makedirs(chosen, exist_ok=True)
    mark_project_dir(chosen)
    log_fn(f"output_dir {output_dir} is not empty: this run writes to {chosen} "
           "(--resume auto continues the old run, --overwrite_output reuses the directory)")
    return suffix
