"""train.py's time to its first step on an ImageNet-shaped folder (issue 28: the dataset listed once).

    python benchmarks/startup.py --root /tmp/imagenet_shaped [--classes 1000 --train 128 --val 50] [--repo .]

Makes the folder when it is absent (``classes`` class folders, each with ``train`` + ``val`` 32x32
JPEGs of about 0.8 KB, written once; nothing is committed), then runs ``train.py`` of ``--repo``
(another checkout: the same measurement before a change) on it with the digits recipe for one
step (``--max_steps 1``, 1,000 classes) and prints, from the process start, when each line of its
output arrived: the run directory line (every input checked, the dataset listed), the first step
and the end. One run; the numbers are this machine's, with its file cache warm after the first.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from PIL import Image

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKS = (("run directory", "checked and listed"), ("step 1/", "first step"), ("stopped at --max_steps", "stopped"))


def make_folder(root, classes, train, val, seed=0):
    """root/{train,val}/n<id>/<k>.JPEG, random 32x32 images (one random image per class, varied per file)."""
    rng = np.random.default_rng(seed)
    for c in range(classes):
        base = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
        for split, count in (("train", train), ("val", val)):
            folder = os.path.join(root, split, f"n{c:08d}")
            os.makedirs(folder, exist_ok=True)
            for k in range(count):
                Image.fromarray(np.roll(base, k, axis=1)).save(os.path.join(folder, f"{k:04d}.JPEG"), quality=80)


def time_first_step(repo, data, classes):
    with tempfile.TemporaryDirectory(prefix="startup-") as out:  # the run's checkpoint is not kept
        cmd = [sys.executable, "train.py", "--config", "src/configs/dm_nfnet_nano_digits.yaml", "--data_path", data,
               "--num_classes", str(classes), "--epochs", "1", "--max_steps", "1", "--log_interval", "1",
               "--eval_while_train", "false", "--device_target", "CPU", "--output_dir", os.path.join(out, "run")]
        start = time.monotonic()
        seen = {}
        proc = subprocess.Popen(cmd, cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            for needle, name in MARKS:
                if needle in line and name not in seen:
                    seen[name] = time.monotonic() - start
        proc.wait()
        seen["exit"] = time.monotonic() - start
    return proc.returncode, seen


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="the ImageNet-shaped folder (made when absent)")
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--train", type=int, default=128, help="training images per class")
    parser.add_argument("--val", type=int, default=50, help="validation images per class")
    parser.add_argument("--repo", default=ROOT, help="the checkout whose train.py runs (default: this one)")
    args = parser.parse_args()
    if not os.path.isdir(os.path.join(args.root, "train")):
        begin = time.monotonic()
        make_folder(args.root, args.classes, args.train, args.val)
        print(f"made {args.root}: {args.classes} classes x ({args.train} + {args.val}) JPEGs in "
              f"{time.monotonic() - begin:.0f} s")
    status, seen = time_first_step(args.repo, args.root, args.classes)
    print(f"{args.repo}: exit {status}; " + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in seen.items()))
    return status


if __name__ == "__main__":
    sys.exit(main())
