"""ImageNet-layout folders: root/<split>/<class>/<image>, listed once and checked before any model is built.

`list_dataset` walks each split once; the class split, the data source (create_dataset(listing=...))
and a resumed run reuse that listing.

Nothing here imports MindSpore, so train.py / eval.py can validate the dataset
layout (and fail with one line naming the culprit) before paying for heavy imports.
"""
import collections
import hashlib
import json
import os
import re
import sys
from typing import NamedTuple

from src.errors import UserError

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")


class DatasetError(UserError):
    """A user-facing problem with the data: the message is one line naming the path."""


_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_TO_ESCAPE = re.compile(r"[\\\x00-\x1f\x7f]")
_ESCAPED = re.compile(r"\\(\\|n|r|t|x[0-9a-f]{2})")


def escape_name(name):
    """`name` for line-oriented output (a listing, a console line): backslash, newline, CR and tab as
    \\\\, \\n, \\r, \\t, other control characters as \\xNN (ls -b's style), so that one name stays one line."""
    return _TO_ESCAPE.sub(lambda m: _ESCAPES.get(m.group(), f"\\x{ord(m.group()):02x}"), str(name))


def unescape_name(text):
    """The name escape_name(name) was made from."""
    back = {v[1]: k for k, v in _ESCAPES.items()}
    return _ESCAPED.sub(lambda m: back.get(m.group(1)) or chr(int(m.group(1)[1:], 16)), text)


def _short_list(names, limit=5):
    names = sorted(names)
    text = ", ".join(names[:limit])
    if len(names) > limit:
        text += f", ... ({len(names) - limit} more)"
    return text


def find_classes(split_dir):
    """Sorted class-folder names of ``split_dir`` (hidden folders such as .ipynb_checkpoints are skipped)."""
    if not os.path.exists(split_dir):
        raise DatasetError(f"dataset path not found: {split_dir}")
    if not os.path.isdir(split_dir):
        raise DatasetError(f"dataset path is not a directory: {split_dir}")
    classes = sorted(e.name for e in os.scandir(split_dir) if e.is_dir() and not e.name.startswith("."))
    if not classes:
        raise DatasetError(f"no class folders in {split_dir} (expected {split_dir}/<class>/<image>)")
    return classes


def _identity(path):
    st = os.stat(path)  # follows links
    return st.st_dev, st.st_ino


def _list_images(class_dir, seen, skipped):
    """Image files under ``class_dir`` (recursively, like torchvision's ImageFolder), sorted by path.

    Links are followed, but no folder and no file is listed twice: ``seen`` holds the identities
    (device, inode) of the folders and files listed so far in the split, so a link back into the
    tree (a loop) or to something listed already (a duplicate) is skipped. Skipped entries go
    to ``skipped`` as (path, reason): those, broken links, files without read permission,
    folders that cannot be listed and files that are not images by their extension. Hidden
    names (.DS_Store, .ipynb_checkpoints) are ignored.
    """
    found = []

    def unlisted(err):
        skipped.append((err.filename, f"cannot list the folder ({err.strerror})"))

    for dirpath, dirnames, filenames in os.walk(class_dir, onerror=unlisted, followlinks=True):
        if dirpath == class_dir:
            seen.setdefault(_identity(dirpath), dirpath)
        kept = []
        for d in sorted(dirnames):
            path = os.path.join(dirpath, d)
            if d.startswith("."):
                continue
            key = _identity(path)
            if key in seen:
                skipped.append((path, f"a link to a folder listed already ({seen[key]}): loop or duplicate"))
                continue
            seen[key] = path
            kept.append(d)
        dirnames[:] = kept
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if name.startswith("."):
                continue
            if not name.lower().endswith(IMG_EXTENSIONS):
                skipped.append((path, "not an image (extension)"))
                continue
            try:
                key = _identity(path)
            except OSError as err:
                skipped.append((path, "broken link" if os.path.islink(path) else err.strerror))
                continue
            if key in seen:
                skipped.append((path, f"the same file as {seen[key]}"))
            elif not os.access(path, os.R_OK):
                skipped.append((path, "no read permission"))
            else:
                seen[key] = path
                found.append(path)
    return sorted(found)


def describe_skipped(split_dir, skipped, limit=5):
    """One line: how many entries of a split were skipped, by reason, and the first few paths."""
    reasons = collections.Counter(reason.split(" (")[0].split(" as ")[0] for _, reason in skipped)
    counts = ", ".join(f"{n} {reason}" for reason, n in sorted(reasons.items()))
    shown = "; ".join(f"{escape_name(path)}: {reason}" for path, reason in skipped[:limit])
    more = f"; ... ({len(skipped) - limit} more)" if len(skipped) > limit else ""
    return f"{split_dir}: skipped {len(skipped)} entries ({counts}): {shown}{more}"


def scan_image_folder(split_dir, class_names=None, skipped=None):
    """List the images of one split.

    Returns ``(samples, classes)``: ``samples`` is a list of ``(path, class_index)``
    sorted by class then path, ``classes`` the sorted class-folder names (the class
    index is the position in this list, as in torchvision's ImageFolder). With
    ``class_names`` (a checkpoint's classes, in label order) the index is the folder's
    position in that list instead; the folders may be any subset of it.
    Only names ending in one of ``IMG_EXTENSIONS`` (any case) are images; whether
    they decode is checked when they are loaded (see ``sources.FolderSource``).

    Entries that are not listed (see ``_list_images``: loops, duplicates, broken links,
    unreadable files and folders, non-images) are appended to ``skipped`` as (path, reason).

    Raises DatasetError for a missing path, a split without class folders, a split
    without images, or class folders that hold no image.
    """
    classes = find_classes(split_dir)
    index_of = {name: i for i, name in enumerate(classes)}
    if class_names is not None:
        index_of = {name: i for i, name in enumerate(class_names)}
        unknown = [name for name in classes if name not in index_of]
        if unknown:
            raise DatasetError(f"class folders of {split_dir} that the model does not know: {_short_list(unknown)} "
                               f"(its {len(class_names)} classes: {_short_list(class_names)})")
    samples, empty, seen = [], [], {}
    skipped = [] if skipped is None else skipped
    for name in classes:
        index = index_of[name]
        files = _list_images(os.path.join(split_dir, name), seen, skipped)
        if not files:
            empty.append(name)
        samples.extend((path, index) for path in files)
    if not samples:
        raise DatasetError(f"no images ({'/'.join(IMG_EXTENSIONS)}) in {split_dir}")
    if empty:
        raise DatasetError(f"class folders without images in {split_dir}: {_short_list(empty)}")
    return samples, classes


def resolve_split(data_path, split):
    """(root, split) of the images to evaluate: ``data_path/split`` when it exists (a dataset root,
    or a MindRecord split), else ``data_path`` itself as a folder of class folders (its parent
    and its name)."""
    if os.path.isdir(os.path.join(data_path, split)) or is_mindrecord_split(data_path, split):
        return data_path, split
    path = os.path.abspath(data_path)
    return os.path.dirname(path), os.path.basename(path)


def _holds_images(folder):
    """True when ``folder`` has an image file directly in it."""
    try:
        return any(e.is_file() and e.name.lower().endswith(IMG_EXTENSIONS) for e in os.scandir(folder))
    except OSError:
        return False


def missing_split(data_path, split, splits):
    """One line for a dataset root without its ``split`` folder: what the root holds and the layout expected
    (``splits``: the split folders the caller reads, e.g. ["train", "val"])."""
    expected = " and ".join(f"{data_path}/{s}/<class>/<image>" for s in splits)
    folders = sorted(e.name for e in os.scandir(data_path) if e.is_dir() and not e.name.startswith("."))
    if folders and all(_holds_images(os.path.join(data_path, f)) for f in folders[:20]):
        found = (f"it holds class folders with images directly ({_short_list(folders)}): a single split, not a "
                 f"dataset root")
    elif folders:
        found = f"it holds the folders {_short_list(folders)}"
    else:
        found = "it holds no folders"
    return f"no {split}/ folder in {data_path}: {found}; expected {expected}"


class SplitListing(NamedTuple):
    """One split as listed once (list_dataset): what the class split, the data source and a resumed run reuse."""
    split_dir: str
    classes: list  # class names in label order: the sorted folders, or a converted split's stored list
    samples: object  # [(path, label), ...] in file order (scan_image_folder); None for a MindRecord split


def list_dataset(data_path, train_split="train", val_split="val", num_classes=None, class_names=None, warn=None,
                 skipped=None):
    """List ``data_path/<train_split>`` and ``data_path/<val_split>`` once, checked, before a model is built.

    Returns {split: SplitListing} for the splits that are not None (eval.py needs only the validation split);
    create_dataset(listing=...) reads its images from that listing instead of walking the folder again.
    Raises DatasetError when a split is missing or empty, when the class folders differ between the splits
    (naming the classes only in one of them), or when their number differs from ``num_classes``. With
    ``class_names`` (a checkpoint's classes) the folders must be a subset of them instead, in any number.
    Entries skipped in a split (see ``scan_image_folder``) are reported in one `warning:` line per split
    through ``warn`` (default: stderr), and appended to ``skipped`` as (path, reason) when given (eval.py
    lists them in its bad_files.txt).
    """
    if warn is None:
        def warn(line):
            print(f"warning: {line}", file=sys.stderr, flush=True)
    if not os.path.isdir(data_path):
        raise DatasetError(f"dataset path not found: {data_path}")
    listing = {}
    for split in (train_split, val_split):
        if split is None:
            continue
        split_dir = os.path.join(data_path, split)
        if is_mindrecord_split(data_path, split):  # converted by src.data.to_mindrecord
            listing[split] = SplitListing(split_dir, read_classes(data_path, split), None)
        elif not os.path.exists(split_dir):
            raise DatasetError(missing_split(data_path, split, [s for s in (train_split, val_split) if s]))
        else:
            entries = []
            samples, classes = scan_image_folder(split_dir, class_names, entries)
            listing[split] = SplitListing(split_dir, classes, samples)
            if entries:
                warn(describe_skipped(split_dir, entries))
            if skipped is not None:
                skipped.extend(entries)
    if not listing:
        raise DatasetError("check_dataset_layout needs at least one split")
    first, *rest = listing.values()
    for other in rest:
        only_first, only_other = set(first.classes) - set(other.classes), set(other.classes) - set(first.classes)
        if only_first or only_other:
            parts = [f"only in {d}: {_short_list(names)}"
                     for d, names in ((first.split_dir, only_first), (other.split_dir, only_other)) if names]
            raise DatasetError("class folders differ between splits; " + "; ".join(parts))
    if num_classes is not None and class_names is None and len(first.classes) != num_classes:
        raise DatasetError(f"found {len(first.classes)} class folders in {first.split_dir}, but num_classes is "
                           f"{num_classes}")
    return listing


def check_dataset_layout(data_path, train_split="train", val_split="val", **checks):
    """The sorted class names of the first split given, checked as list_dataset checks (same arguments)."""
    return next(iter(list_dataset(data_path, train_split, val_split, **checks).values())).classes


# --------------------------------------------------------------------------- converted (MindRecord) splits
# The on-disk names src/data/to_mindrecord.py writes and the loader reads: <split>.mindrecord (one
# shard) or <split>.mindrecord0 ... N-1, each with its <shard>.db index, and <split>.classes.json,
# written last: the class names in label order and the conversion's set of files, each with its size
# and the sha256 of its first 64 KiB (file_fingerprint). A split is read only when the files on disk
# are exactly that set: same names, sizes and fingerprints.
MANIFEST_KEYS = ("classes", "files", "rows")
FINGERPRINT_BYTES = 1 << 16
_AGAIN = "convert the images again (python -m src.data.to_mindrecord ... --overwrite)"


def classes_file(data_path, split):
    """Path of a converted split's class list (and record of its files)."""
    return os.path.join(data_path, f"{split}.classes.json")


def file_fingerprint(path):
    """{"bytes": size, "head_sha256": sha256 of the first 64 KiB}: what a conversion records of each of its
    files. A shard's first bytes are its header (its pages and their sizes), a .db's the start of its index:
    another conversion's file or a damaged header differs there. Cheap: 64 KiB read per file."""
    with open(path, "rb") as f:
        head = f.read(FINGERPRINT_BYTES)
    return {"bytes": os.path.getsize(path), "head_sha256": hashlib.sha256(head).hexdigest()}


def split_record_names(data_path, split):
    """Sorted names in ``data_path`` that belong to a converted ``split``: shards, their .db indexes and the class
    list, of any conversion (what `to_mindrecord --overwrite` removes)."""
    pattern = re.compile(re.escape(split) + r"\.(mindrecord[0-9]*(\.db)?|classes\.json)")
    try:
        return sorted(e.name for e in os.scandir(data_path) if pattern.fullmatch(e.name))
    except OSError:
        return []


def is_mindrecord_split(data_path, split):
    """True when ``data_path/split`` is a converted MindRecord split rather than a folder."""
    return not os.path.isdir(os.path.join(data_path, split)) and bool(split_record_names(data_path, split))


def _read_record(data_path, split):
    """The checked contents of ``<split>.classes.json``: {"classes": [...], "files": {name: bytes}, "rows": n}."""
    path = classes_file(data_path, split)
    if not os.path.isfile(path):
        raise DatasetError(f"{path}: missing (src.data.to_mindrecord writes it last, beside {split}.mindrecord*: the "
                           f"conversion did not finish or the file was removed); {_AGAIN}")
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise DatasetError(f"{path}: cannot be read as JSON ({err}); {_AGAIN}") from None
    if isinstance(record, list):
        raise DatasetError(f"{path}: a class list without the conversion's files (written by an older "
                           f"to_mindrecord); {_AGAIN}")
    files = record.get("files") if isinstance(record, dict) else None
    if (not isinstance(files, dict) or not files or not isinstance(record.get("classes"), list)
            or not all(isinstance(entry, dict) and isinstance(entry.get("bytes"), int)
                       and isinstance(entry.get("head_sha256"), str) for entry in files.values())):
        raise DatasetError(f"{path}: not a record of src.data.to_mindrecord (keys {', '.join(MANIFEST_KEYS)}); "
                           f"{_AGAIN}")
    return record


def mindrecord_set(data_path, split):
    """(files, classes) of a converted split: its MindRecord shards (sorted by shard) and class names.

    Checked against the record in ``<split>.classes.json`` before anything is read (stat calls only):
    every recorded file exists at its recorded size (a missing .db, a truncated or grown shard) with its
    recorded first 64 KiB (another conversion's file of the same name, a damaged header), and no other
    file of the split's names is beside them (an earlier conversion's shards). Raises DatasetError naming
    the file.
    """
    record = _read_record(data_path, split)
    manifest = classes_file(data_path, split)
    recorded = record["files"]
    for name, entry in sorted(recorded.items()):
        path = os.path.join(data_path, name)
        if not os.path.isfile(path):
            what = f"the index of {name[:-3]}" if name.endswith(".db") else "a shard"
            raise DatasetError(f"MindRecord file missing: {path} ({what}, one of the {len(recorded)} files recorded "
                               f"in {manifest}); {_AGAIN}")
        try:
            found = file_fingerprint(path)
        except OSError as err:
            raise DatasetError(f"MindRecord file {path} cannot be read ({err.strerror})") from None
        if found["bytes"] != entry["bytes"]:
            raise DatasetError(f"MindRecord file {path} is {found['bytes']} bytes, the conversion wrote "
                               f"{entry['bytes']} (recorded in {manifest}): truncated or changed; {_AGAIN}")
        if found["head_sha256"] != entry["head_sha256"]:
            raise DatasetError(f"MindRecord file {path} is not the one the conversion recorded in {manifest} (its "
                               f"first 64 KiB differ: a file of another conversion, or a damaged header); {_AGAIN}")
    names = set(recorded) | {os.path.basename(manifest)}
    for name in split_record_names(data_path, split):
        if name not in names:
            raise DatasetError(f"{os.path.join(data_path, name)} is not one of the files of the conversion recorded "
                               f"in {manifest} ({_short_list(recorded)}): a leftover of another conversion? Remove "
                               f"it, or {_AGAIN}")
    shards = sorted((n for n in recorded if not n.endswith(".db")), key=lambda n: (len(n), n))
    return [os.path.join(data_path, n) for n in shards], list(record["classes"])


def mindrecord_files(data_path, split):
    """The checked MindRecord shards of a converted ``split`` (see mindrecord_set), sorted by shard."""
    return mindrecord_set(data_path, split)[0]


def read_classes(data_path, split):
    """Class names of a converted split, in label order (its files checked: mindrecord_set)."""
    return mindrecord_set(data_path, split)[1]
