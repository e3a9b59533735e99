"""Files that appear only complete: write a hidden temporary next to the target, then rename it.

Every writer of the project that replaces a file (checkpoints, config.yaml, curves.png, exported
models, .bin tensors, converted weights, the compiled CPU kernels) goes through `atomic_path`, so a
kill or a full disk at any moment leaves either the previous file or the new one under the
target's name, never a truncated file. The standard library only: every layer may import it.

The temporary is `.<stem>.partial-<pid>-<random><ext>` in the target's directory (the same
filesystem, so the rename is atomic on POSIX), keeps the target's extension (MindSpore's savers
append theirs to other names) and is recognised by run_dir.is_run_file and
checkpointing.remove_partial_files through PARTIAL_MARK.

`output_problem` is the entry points' one check of an output path before their work: not an
input, not a folder, not an existing file unless replacing it was asked for, writable.
"""
import contextlib
import glob
import json
import os
import uuid

PARTIAL_MARK = ".partial-"


def fsync_path(path):
    """Flush a file, or a directory's entries (making a rename durable), to disk; no-op where a
    directory cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        if os.path.isdir(path):
            return
        raise
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path, durable=True):
    """Yield a temporary path to write; when the block ends without an error, rename it over `path`.

    With `durable` the file is fsynced before the rename and the directory after it (checkpoints,
    configs: what a resume relies on after a power cut); without, only the rename's atomicity is
    kept (caches and bulk outputs that are cheap to remake). On any error (a full disk: OSError
    ENOSPC) the temporary and anything a library wrote beside it under the same stem are removed,
    `path` keeps its previous content and the error propagates unchanged.
    """
    directory, base = os.path.split(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    stem, ext = os.path.splitext(base)
    tmp_stem = os.path.join(directory, f".{stem}{PARTIAL_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")
    tmp = tmp_stem + ext
    try:
        yield tmp
        if durable:
            fsync_path(tmp)
        os.replace(tmp, path)
        if durable:
            fsync_path(directory)
    finally:
        for leftover in glob.glob(glob.escape(tmp_stem) + "*"):  # e.g. MindSpore's own <name>.tmp
            os.remove(leftover)


def write_atomic(path, data, durable=True):
    """Write `data` (bytes, or str as UTF-8) to `path` through atomic_path."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    with atomic_path(path, durable=durable) as tmp, open(tmp, "wb") as f:
        f.write(data)


def write_json(path, obj, durable=True):
    """`obj` as indented JSON with sorted keys (stable diffs), through atomic_path."""
    write_atomic(path, json.dumps(obj, indent=1, sort_keys=True) + "\n", durable=durable)


# --------------------------------------------------------------------------- outputs checked before the work
def output_problem(path, inputs=(), overwrite=False, make_parents=False, folder=False):
    """Why `path` may not be written as an output, or None; the entry points call it before any work and
    raise their one-line error with the reason (this module imports nothing of the project).

    Refused, in this order: the same file as one of `inputs` (by inode, os.path.samefile: another
    spelling, a symlink or a hard link of an input; `overwrite` does not lift this), a folder where a
    file goes (a file where a `folder` goes), an output `folder` equal to or inside an input folder,
    an existing file unless `overwrite`, and a parent folder that is missing (unless `make_parents`:
    then its nearest existing ancestor) or where no file can be created. The last is tried for real
    (a hidden PARTIAL_MARK file, removed at once): os.access says yes to root on a read-only mount.
    """
    inputs = [item for item in inputs if item and os.path.exists(item)]
    if os.path.exists(path):
        same = next((item for item in inputs if os.path.samefile(path, item)), None)
        if same is not None:
            return f"is the input {same}; name another {'folder' if folder else 'file'}"
    if folder:
        if os.path.exists(path) and not os.path.isdir(path):
            return "is a file, not a folder"
        inside = next((item for item in inputs if os.path.isdir(item) and _inside(path, item)), None)
        if inside is not None:
            return f"is inside the input folder {inside}; name a folder outside it"
    elif os.path.isdir(path):
        return "is a folder; name a file"
    elif os.path.lexists(path) and not overwrite:
        return "already exists; pass --overwrite to replace it"
    parent = path if folder else os.path.dirname(os.path.abspath(path))
    while make_parents and not os.path.lexists(parent) and os.path.dirname(parent) != parent:
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        return f"folder {parent} {'is not a folder' if os.path.lexists(parent) else 'does not exist'}"
    return _not_writable(parent)


def _inside(path, folder):
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return os.path.commonpath([path, folder]) == folder


def _not_writable(directory):
    probe = os.path.join(directory, f".output{PARTIAL_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as exc:
        return f"cannot write in folder {directory} ({exc.strerror})"
    os.remove(probe)
    return None
