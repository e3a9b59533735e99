"""Files that appear only complete: write a hidden temporary next to the target, then rename it.

Every writer of the project that replaces a file (checkpoints, config.yaml, curves.png, exported
models, .bin tensors, converted weights, the compiled CPU kernels) goes through `atomic_path`, so a
kill or a full disk at any moment leaves either the previous file or the new one under the
target's name, never a truncated file. The standard library only: every layer may import it.

The temporary is `.<stem>.partial-<pid>-<random><ext>` in the target's directory (the same
filesystem, so the rename is atomic on POSIX), keeps the target's extension (MindSpore's savers
append theirs to other names) and is recognised by run_dir.is_run_file and
checkpointing.remove_partial_files through PARTIAL_MARK.
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
