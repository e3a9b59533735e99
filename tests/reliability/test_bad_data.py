"""Case 2, bad files in the train and val folders: CMYK, grayscale, RGBA and 16-bit images are converted and
used; truncated, empty and non-image files are skipped, counted and listed (bad_files.txt, the run's log, eval.py's
report); with --strict_data the run stops with one line naming the first bad file it meets. The pipeline's handling
of each kind is tested in tests/data/test_dataset.py and tests/data/test_transforms.py; here train.py and eval.py
run for real on such a folder."""
import json
import os
import shutil

import numpy as np
import pytest
from PIL import Image

from reliability_helpers import TINY, entry, read_text, succeeded, user_error


def converted_copies(source, folder, stem):
    """The digit at `source` saved as CMYK JPEG, grayscale PNG, RGBA PNG and 16-bit grayscale PNG."""
    rgb = Image.open(source).convert("RGB")
    gray = np.asarray(rgb.convert("L"), dtype=np.uint16)
    images = {f"{stem}_cmyk.jpg": rgb.convert("CMYK"), f"{stem}_gray.png": rgb.convert("L"),
              f"{stem}_rgba.png": rgb.convert("RGBA"), f"{stem}_16bit.png": Image.fromarray(gray * 257)}
    for name, image in images.items():
        image.save(folder / name)
    assert Image.open(folder / f"{stem}_cmyk.jpg").mode == "CMYK"
    assert Image.open(folder / f"{stem}_16bit.png").mode == "I;16"
    return [str(folder / name) for name in images]


def unreadable_files(folder, stem, count=4):
    """A truncated PNG, an empty JPEG, a text file and random bytes, all named as images (the first `count`)."""
    good = sorted(p for p in os.listdir(folder) if p.endswith(".png"))[0]
    data = (folder / good).read_bytes()
    files = {f"{stem}_truncated.png": data[:len(data) // 2], f"{stem}_empty.jpg": b"",
             f"{stem}_notes.png": b"shopping list: milk, eggs\n",
             f"{stem}_noise.jpeg": np.random.default_rng(0).bytes(3000)}
    names = list(files)[:count]
    for name in names:
        (folder / name).write_bytes(files[name])
    return [str(folder / name) for name in names]


@pytest.fixture(scope="module")
def bad_data(tiny_digits, tmp_path_factory):
    """The tiny digits (60 train, 30 val) plus 4 converted + 4 unreadable train files and 4 + 2 val files."""
    root = tmp_path_factory.mktemp("bad_data") / "digits"
    shutil.copytree(tiny_digits, root)
    train, val = root / "train" / "3", root / "val" / "5"
    first = sorted(os.listdir(train))[0]
    converted = converted_copies(train / first, train, "x") + converted_copies(train / first, val, "x")
    unreadable = unreadable_files(train, "bad") + unreadable_files(val, "bad", count=2)
    return root, converted, unreadable


@pytest.mark.timeout(600)
def test_training_converts_odd_modes_and_skips_counts_and_lists_unreadable_files(bad_data, tmp_path):
    """Provokes: one epoch of train.py over the train folder with 4 converted and 4 unreadable files (the
    val split's bad files are eval.py's test below; evaluation during training uses the same loader)."""
    data, _, unreadable = bad_data
    out = tmp_path / "run"
    succeeded(entry("train.py", "--data_path", data, "--output_dir", out, *TINY, "--epochs", "1"))
    listed = [line.split("\t") for line in read_text(out / "bad_files.txt").splitlines()]
    assert sorted(path for path, _ in listed) == sorted(unreadable[:4])  # each once, none of the converted
    assert all(reason.startswith(f"unreadable image {path}: ") for path, reason in listed)
    shown = ", ".join(sorted(unreadable[:4])[:3])
    assert f"epoch 1: skipped 4 unreadable image(s) (4 in this run directory, listed in {out / 'bad_files.txt'}): " \
           f"{shown}, ... (1 more)" in read_text(out / "train.log")
    assert "epoch 1/1 average loss " in read_text(out / "train.log")  # 68 files: 8 full batches


@pytest.mark.timeout(600)
def test_eval_reports_how_many_images_it_scored_and_which_it_skipped(bad_data, tmp_path):
    """Provokes: eval.py over the val folder with 4 converted and 2 unreadable images."""
    import mindspore as ms

    from src.models import create_model

    data, _, unreadable = bad_data
    checkpoint = str(tmp_path / "nano.ckpt")
    ms.save_checkpoint(create_model("dm_nfnet_nano", num_classes=10), checkpoint)
    output = tmp_path / "eval.json"
    result = succeeded(entry("eval.py", "--data_path", data, "--checkpoint", checkpoint, "--output", output,
                             "--num_parallel_workers", "1", "--batch_size", "8"))
    listing = tmp_path / "eval_bad_files.txt"
    assert " on 34 images (raw weights of " in result.stdout
    assert f"skipped 2 unreadable image(s), listed in {listing}" in result.stdout
    with open(output) as f:
        report = json.load(f)
    assert (report["count"], report["unreadable"]) == (34, 2)
    assert sorted(line.split("\t")[0] for line in read_text(listing).splitlines()) == sorted(unreadable[4:])


@pytest.mark.timeout(600)
def test_strict_data_stops_training_naming_the_first_bad_file_it_meets(bad_data, tmp_path):
    """Provokes: train.py --strict_data true over the folder. With seed 4 the shuffled order starts with a bad
    file, so the run stops before the graph is compiled."""
    from src.data.sources import EpochShardSampler
    from src.data.folder import scan_image_folder

    data, _, unreadable = bad_data
    samples, _ = scan_image_folder(str(data / "train"))
    order = EpochShardSampler(len(samples), seed=4).epoch_indices(0)
    first_bad = next(samples[i][0] for i in order if samples[i][0] in unreadable)
    result = entry("train.py", "--data_path", data, "--output_dir", tmp_path / "run", *TINY, "--seed", "4",
                   "--strict_data", "true")
    assert user_error(result).startswith(f"error: unreadable image {first_bad}: ")
    assert not any(name.endswith(".ckpt") for name in os.listdir(tmp_path / "run"))
