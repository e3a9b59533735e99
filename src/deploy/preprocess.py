"""Images of an ImageNet-layout folder -> eval-transformed float32 NCHW .bin files + labels.json.

The transform is passed in (preprocess.py gives it src.data's create_eval_transform), so
the tensors a device sees are the ones eval.py feeds the network, bit for bit.
"""
import os
import sys

import numpy as np

from src.data.folder import scan_image_folder
from src.data.transforms import UnreadableImageError, load_image

from .binio import IMAGES_DIR, LABELS_FILE, SOURCES_FILE, bin_name, write_json, write_tensor
from .errors import DeployError
from src.run.progress import ProgressBar


def resolve_split_dir(data_path, val_split):
    """`data_path/val_split` when that folder exists (a dataset root), else `data_path` itself."""
    from src.data.folder import resolve_split

    return os.path.normpath(os.path.join(*resolve_split(data_path, val_split)))


def _prepare_output(output_path, overwrite):
    """Create output_path/images; refuse (or with `overwrite` clear) .bin files of an earlier run."""
    images_dir = os.path.join(output_path, IMAGES_DIR)
    if os.path.exists(output_path) and not os.path.isdir(output_path):
        raise DeployError(f"output path is a file, not a folder: {output_path}")
    os.makedirs(images_dir, exist_ok=True)
    stale = [f for f in os.listdir(images_dir) if f.endswith(".bin")]
    if stale and not overwrite:
        raise DeployError(f"{images_dir} already holds {len(stale)} .bin files; pass --overwrite to replace them")
    for name in stale:
        os.remove(os.path.join(images_dir, name))
    return images_dir


def preprocess_folder(split_dir, output_path, transform, batch_size=1, strict_data=False, overwrite=False,
                      progress=True, class_names=None):
    """Write every image of `split_dir` (<class>/<image>) through `transform` as .bin files.

    Images go in scan_image_folder's order (class, then path), `batch_size` per file; the
    last file is padded with zero images, and labels.json lists only its real images.
    An unreadable image is skipped with a warning (evaluation counts it as invalid too),
    or is an error with `strict_data`. Returns a summary dict: count, files, skipped,
    classes, images_dir, labels_path. class_names: the model's classes (labels are positions in it).
    """
    if batch_size < 1:
        raise DeployError(f"batch_size must be >= 1, got {batch_size}")
    samples, classes = scan_image_folder(split_dir, class_names)  # DatasetError (a UserError) names the folder
    images_dir = _prepare_output(output_path, overwrite)
    labels, sources, skipped = {}, {}, []
    batch, batch_labels, batch_sources = [], [], []
    bar = ProgressBar(len(samples), "preprocess") if progress else None

    def flush():
        name = bin_name(len(labels), batch_size)
        array = np.stack(batch)
        if len(batch) < batch_size:
            pad = np.zeros((batch_size - len(batch),) + array.shape[1:], array.dtype)
            array = np.concatenate([array, pad])
        write_tensor(os.path.join(images_dir, name + ".bin"), array)
        labels[name] = batch_labels[0] if batch_size == 1 else list(batch_labels)
        sources[name] = list(batch_sources)
        batch.clear(), batch_labels.clear(), batch_sources.clear()

    for path, label in samples:
        try:
            image = load_image(path)
        except UnreadableImageError as exc:
            if strict_data:
                raise
            skipped.append(path)
            print(f"warning: skipping {str(exc).splitlines()[0]}", file=sys.stderr, flush=True)
        else:
            batch.append(transform(image))
            batch_labels.append(int(label))
            batch_sources.append(os.path.relpath(path, split_dir))
            if len(batch) == batch_size:
                flush()
        if bar:
            bar.update()
    if batch:
        flush()
    if not labels:
        raise DeployError(f"no readable image in {split_dir} ({len(skipped)} unreadable)")
    labels_path = os.path.join(output_path, LABELS_FILE)
    write_json(labels_path, labels)
    write_json(os.path.join(output_path, SOURCES_FILE), sources)
    count = len(samples) - len(skipped)
    return dict(count=count, files=len(labels), skipped=skipped, classes=classes, images_dir=images_dir,
                labels_path=labels_path)
