"""Convert ImageNet-layout folders to MindRecord shards (the file names: src/data/folder.py).

    python -m src.data.to_mindrecord --data_path <root holding train/ val/> --output <dir> --shards N [--overwrite]

A converted dataset is a directory, given to training and evaluation as ``data_path``:

    <dir>/<split>.mindrecord               --shards 1
    <dir>/<split>.mindrecord0 ... N-1      --shards N (N > 1); each shard with its .db index
    <dir>/<split>.classes.json             class-folder names in label order; the files above, each with its
                                           size and the sha256 of its first 64 KiB

create_dataset reads ``<data_path>/<split>.mindrecord*`` when they exist (and
``<data_path>/<split>`` is not a folder), with the same transforms as the folder.
Rows, in the folder's order (class, then path): ``image`` the file's bytes as stored
(JPEG/PNG/..., decoded when read), ``label`` int32, ``index`` int64 (position in that
order), ``path`` (relative to the split folder). Files that do not decode are left out
and listed on stderr. Shards are written in parallel (FileWriter's parallel writer).

Nothing of an earlier conversion is lost by accident: an output that holds a split's files already
is refused (``--overwrite`` replaces exactly that split's old set, whatever its shard count). The
shards are written in a hidden folder inside the output and moved in when complete; the old set is
removed only then, and ``<split>.classes.json``, the record of the set, is written last: a run
stopped at any point leaves the old set, or a set the readers refuse (folder.mindrecord_set).
"""
import argparse
import os
import shutil
import sys
import tempfile

from src.atomic import PARTIAL_MARK, write_json
from src.errors import run_cli

from .folder import (DatasetError, classes_file, file_fingerprint, missing_split, scan_image_folder,
                     split_record_names)
from .transforms import UnreadableImageError, load_image

SCHEMA = {"image": {"type": "bytes"}, "label": {"type": "int32"}, "index": {"type": "int64"},
          "path": {"type": "string"}}
ROWS_PER_WRITE = 256


def _readable_bytes(path):
    """The file's bytes when it decodes as an image, else None."""
    try:
        load_image(path)
    except UnreadableImageError as err:
        print(f"skipping {err}", file=sys.stderr)
        return None
    with open(path, "rb") as f:
        return f.read()


def _inside(path, folder):
    path, folder = os.path.realpath(path), os.path.realpath(folder)
    return path == folder or path.startswith(folder + os.sep)


def check_output(data_path, split, output, overwrite=False):
    """Refuse, in one line, an ``output`` where ``split``'s shards would be lost or unread: inside the split's
    own image folder, beside a ``<split>/`` folder (which readers prefer), or holding a conversion of the
    split already (unless ``overwrite``). Returns the names of the old set to replace."""
    split_dir = os.path.join(data_path, split)
    if os.path.exists(output) and not os.path.isdir(output):
        raise DatasetError(f"--output {output} is not a directory")
    if _inside(output, split_dir):
        raise DatasetError(f"--output {output} is inside the images it converts ({split_dir}): give a folder "
                           f"outside {data_path}")
    if os.path.isdir(os.path.join(output, split)):
        raise DatasetError(f"--output {output} holds a {split}/ folder, which training and evaluation would read "
                           f"instead of the shards: give another --output")
    old = split_record_names(output, split)
    if old and not overwrite:
        more = f" and {len(old) - 1} more file{'s' if len(old) > 2 else ''}" if len(old) > 1 else ""
        raise DatasetError(f"--output {output} holds a conversion of {split} already ({os.path.join(output, old[0])}"
                           f"{more}): give --overwrite to replace it, or another --output")
    return old


def convert_split(data_path, split, output, shards=1, overwrite=False, scanned=None):
    """Write ``data_path/split`` as MindRecord shards under ``output``; returns (rows written, skipped).

    ``scanned``: the split's scan_image_folder result when the caller has it already.
    """
    from mindspore.mindrecord import FileWriter

    split_dir = os.path.join(data_path, split)
    samples, classes = scanned or scan_image_folder(split_dir)
    old = check_output(data_path, split, output, overwrite)
    os.makedirs(output, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{split}.mindrecord{PARTIAL_MARK}", dir=output)
    try:
        writer = FileWriter(os.path.join(staging, f"{split}.mindrecord"), shard_num=shards, overwrite=True)
        writer.add_schema(SCHEMA, f"{split} of {os.path.abspath(data_path)}")
        writer.add_index(["label"])
        written = skipped = 0
        rows = []
        for index, (path, label) in enumerate(samples):
            data = _readable_bytes(path)
            if data is None:
                skipped += 1
                continue
            rows.append({"image": data, "label": label, "index": index, "path": os.path.relpath(path, split_dir)})
            if len(rows) == ROWS_PER_WRITE:
                writer.write_raw_data(rows, parallel_writer=shards > 1)
                written += len(rows)
                rows = []
        if rows:
            writer.write_raw_data(rows, parallel_writer=shards > 1)
            written += len(rows)
        writer.commit()
        files = {name: file_fingerprint(os.path.join(staging, name)) for name in os.listdir(staging)}
        # the old set goes only now, its record first; the new record, written last, makes the new set valid
        for name in sorted(old, key=lambda n: n != os.path.basename(classes_file(output, split))):
            os.remove(os.path.join(output, name))
        for name in files:
            os.replace(os.path.join(staging, name), os.path.join(output, name))
        write_json(classes_file(output, split), {"classes": classes, "files": files, "rows": written})
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return written, skipped


def _check_split_name(split):
    if not split or split in (".", "..") or "/" in split or os.sep in split:
        raise DatasetError(f"--splits: '{split}' is not a folder name (give the names of folders in --data_path)")


def main(argv=None):
    parser = argparse.ArgumentParser(description="Convert ImageNet-layout folders to MindRecord shards.")
    parser.add_argument("--data_path", required=True, help="dataset root holding <split>/<class>/<image>")
    parser.add_argument("--output", required=True, help="directory for <split>.mindrecord* (the new data_path)")
    parser.add_argument("--shards", type=int, default=1, help="MindRecord files per split (1-1000)")
    parser.add_argument("--splits", nargs="+", default=None,
                        help="splits to convert (default: train and val, those that exist)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace a conversion of the same split in --output (all of its old files)")
    args = parser.parse_args(argv)
    if not 1 <= args.shards <= 1000:
        parser.error(f"--shards must be in [1, 1000], got {args.shards}")
    if not os.path.exists(args.data_path):
        raise DatasetError(f"dataset path not found: {args.data_path}")
    if not os.path.isdir(args.data_path):
        raise DatasetError(f"dataset path is not a directory: {args.data_path}")
    splits = args.splits or [s for s in ("train", "val") if os.path.isdir(os.path.join(args.data_path, s))]
    if not splits:
        raise DatasetError(missing_split(args.data_path, "train", ["train", "val"]) + " (or give --splits)")
    scanned = {}
    for split in splits:  # every input and the output checked before the first image is written
        _check_split_name(split)
        if not os.path.isdir(os.path.join(args.data_path, split)):
            raise DatasetError(missing_split(args.data_path, split, splits))
        scanned[split] = scan_image_folder(os.path.join(args.data_path, split))
        check_output(args.data_path, split, args.output, args.overwrite)
    for split in splits:
        written, skipped = convert_split(args.data_path, split, args.output, args.shards, args.overwrite,
                                         scanned[split])
        first = f"{split}.mindrecord" + ("0" if args.shards > 1 else "")
        print(f"{split}: {written} images -> {os.path.join(args.output, first)}"
              f"{f' (+{args.shards - 1} shards)' if args.shards > 1 else ''}"
              f"{f', {skipped} unreadable files left out' if skipped else ''}")
    return 0


if __name__ == "__main__":
    run_cli(main)
