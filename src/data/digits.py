"""The demo dataset: scikit-learn's bundled 8x8 handwritten digits as an ImageNet-layout folder.

``materialize_digits(root)`` writes root/train/<digit>/<id>.png and root/val/<digit>/<id>.png
(1,797 images, classes "0".."9", ``id`` = row in ``sklearn.datasets.load_digits``),
upscaled with PIL bicubic to ``image_size`` and saved as RGB PNG, split per class
with a fixed seed. Offline: the images ship inside scikit-learn.

    python -m src.data.digits --output data/digits [--image_size 64]
"""
import argparse
import json
import os
import shutil

import numpy as np
from PIL import Image

META_FILE = "digits_meta.json"  # written last: its presence marks a complete folder


def _load_sklearn_digits():
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise SystemExit("scikit-learn is needed for the digits demo data: "
                         "pip install -r requirements-demo.txt (make demo does this)") from None
    digits = load_digits()
    return digits.images, digits.target


def stratified_split(labels, val_fraction, seed):
    """Boolean mask of validation rows: round(val_fraction * count) random rows of every class."""
    rng = np.random.default_rng(seed)
    is_val = np.zeros(len(labels), dtype=bool)
    for cls in np.unique(labels):
        rows = np.flatnonzero(labels == cls)
        is_val[rng.permutation(rows)[:int(round(val_fraction * len(rows)))]] = True
    return is_val


def _to_rgb_image(image_8x8, image_size):
    """Digit intensities 0..16 -> 0..255 grayscale, bicubic upscale, replicated to RGB."""
    pixels = np.clip(np.rint(image_8x8 * (255.0 / 16.0)), 0, 255).astype(np.uint8)
    small = Image.fromarray(pixels)  # 2-D uint8: mode L
    return small.resize((image_size, image_size), Image.Resampling.BICUBIC).convert("RGB")


def _read_meta(root):
    try:
        with open(os.path.join(root, META_FILE), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def materialize_digits(root, image_size=64, val_fraction=0.2, seed=0):
    """Write the digits folder at ``root`` unless a complete one with these settings is there.

    The folder is built in a temporary sibling directory and renamed into place, so an
    interrupted run never leaves a partial dataset at ``root``. Returns ``root``.
    Raises FileExistsError if ``root`` exists but is not a complete digits folder with
    the same settings (it is never deleted or overwritten).
    """
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    root = os.path.abspath(root)
    wanted = {"image_size": int(image_size), "val_fraction": float(val_fraction), "seed": int(seed)}
    if os.path.exists(root):
        meta = _read_meta(root)
        if meta and {k: meta.get(k) for k in wanted} == wanted:
            return root
        raise FileExistsError(f"{root} exists and is not a digits folder made with {wanted}; "
                              "remove it or choose another --output")

    images, labels = _load_sklearn_digits()
    is_val = stratified_split(labels, val_fraction, seed)
    parent = os.path.dirname(root)
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(root)}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        for row, (image, label) in enumerate(zip(images, labels)):
            class_dir = os.path.join(tmp, "val" if is_val[row] else "train", str(int(label)))
            os.makedirs(class_dir, exist_ok=True)
            _to_rgb_image(image, image_size).save(os.path.join(class_dir, f"{row:04d}.png"))
        meta = dict(wanted, num_images=len(labels), num_train=int((~is_val).sum()), num_val=int(is_val.sum()))
        with open(os.path.join(tmp, META_FILE), "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=1)
        try:
            os.rename(tmp, root)
        except OSError:
            if not _read_meta(root):  # not a concurrent run that finished first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def main(argv=None):
    parser = argparse.ArgumentParser(description="Write scikit-learn's 8x8 digits as an ImageNet-layout folder.")
    parser.add_argument("--output", default="data/digits", help="dataset root to create (default: data/digits)")
    parser.add_argument("--image_size", type=int, default=64, help="side of the upscaled images (default: 64)")
    parser.add_argument("--val_fraction", type=float, default=0.2, help="validation share per class (default: 0.2)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the train/val split (default: 0)")
    args = parser.parse_args(argv)
    try:
        root = materialize_digits(args.output, args.image_size, args.val_fraction, args.seed)
    except (FileExistsError, ValueError) as exc:
        parser.exit(2, f"error: {exc}\n")
    meta = _read_meta(root)
    print(f"digits: {meta['num_train']} train / {meta['num_val']} val images of "
          f"{args.image_size}x{args.image_size} in {root}")


if __name__ == "__main__":
    main()
