"""Convert ImageNet-layout folders to MindRecord shards (the file names: src/data/folder.py).

    python -m src.data.to_mindrecord --data_path <root holding train/ val/> --output <dir> --shards N

A converted dataset is a directory, given to training and evaluation as ``data_path``:

    <dir>/<split>.mindrecord               --shards 1
    <dir>/<split>.mindrecord0 ... N-1      --shards N (N > 1); each shard with its .db index
    <dir>/<split>.classes.json             class-folder names, in label order

create_dataset reads ``<data_path>/<split>.mindrecord*`` when they exist (and
``<data_path>/<split>`` is not a folder), with the same transforms as the folder.
Rows, in the folder's order (class, then path): ``image`` the file's bytes as stored
(JPEG/PNG/..., decoded when read), ``label`` int32, ``index`` int64 (position in that
order), ``path`` (relative to the split folder). Files that do not decode are left out
and listed on stderr. Shards are written in parallel (FileWriter's parallel writer).
"""
import argparse
import json
import os
import sys

from src.atomic import write_atomic

from .folder import DatasetError, classes_file, mindrecord_files, scan_image_folder
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


def convert_split(data_path, split, output, shards=1):
    """Write ``data_path/split`` as MindRecord shards under ``output``; returns (rows written, skipped)."""
    from mindspore.mindrecord import FileWriter

    split_dir = os.path.join(data_path, split)
    samples, classes = scan_image_folder(split_dir)
    os.makedirs(output, exist_ok=True)
    writer = FileWriter(os.path.join(output, f"{split}.mindrecord"), shard_num=shards, overwrite=True)
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
    write_atomic(classes_file(output, split), json.dumps(classes) + "\n")
    return written, skipped


def main(argv=None):
    parser = argparse.ArgumentParser(description="Convert ImageNet-layout folders to MindRecord shards.")
    parser.add_argument("--data_path", required=True, help="dataset root holding <split>/<class>/<image>")
    parser.add_argument("--output", required=True, help="directory for <split>.mindrecord* (the new data_path)")
    parser.add_argument("--shards", type=int, default=1, help="MindRecord files per split (1-1000)")
    parser.add_argument("--splits", nargs="+", default=None,
                        help="splits to convert (default: train and val, those that exist)")
    args = parser.parse_args(argv)
    if not 1 <= args.shards <= 1000:
        parser.error(f"--shards must be in [1, 1000], got {args.shards}")
    splits = args.splits or [s for s in ("train", "val") if os.path.isdir(os.path.join(args.data_path, s))]
    if not splits:
        parser.error(f"no train/ or val/ folder in {args.data_path}: give --splits")
    for split in splits:
        try:
            written, skipped = convert_split(args.data_path, split, args.output, args.shards)
        except DatasetError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        print(f"{split}: {written} images -> {mindrecord_files(args.output, split)[0]}"
              f"{f' (+{args.shards - 1} shards)' if args.shards > 1 else ''}"
              f"{f', {skipped} unreadable files left out' if skipped else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
