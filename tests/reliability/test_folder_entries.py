"""Case 14, odd entries in a class folder: other image formats, links (a loop back into the tree, a duplicate
file, a link to another class's folder, a broken link), files that are not images, files without read
permission. Every image is listed exactly once; everything else is skipped, counted and listed in one warning
line; eval.py scores each readable image once. Never a traceback, never silent."""
import json
import os
import shutil
import subprocess

import pytest
from PIL import Image

from reliability_helpers import ROOT, entry, succeeded

from src.data.folder import check_dataset_layout, scan_image_folder


@pytest.fixture()
def odd_split(tiny_digits, tmp_path):
    """val/<class> of tiny_digits (3 PNGs per class) plus odd entries in classes 0 and 1."""
    root = tmp_path / "data"
    shutil.copytree(tiny_digits, root)
    zero, one = root / "val" / "0", root / "val" / "1"
    first = sorted(zero.iterdir())[0]
    with Image.open(first) as img:
        for ext in ("jpg", "bmp", "tif", "webp"):
            img.convert("RGB").save(zero / f"other_format.{ext}")
    (zero / "notes.txt").write_text("not an image\n")
    (zero / "fake.png").write_text("a text file named like an image\n")  # found when loaded: skipped, counted
    os.symlink(".", zero / "again")  # a loop back into the tree
    os.symlink(first.name, zero / "duplicate.png")  # the same file twice
    os.symlink("../0", one / "linked_class")  # another class's folder: its files are listed already
    os.symlink("missing.png", zero / "broken.png")
    (zero / ".DS_Store").write_text("hidden: ignored")
    return root


def test_every_image_is_listed_once_and_every_other_entry_is_skipped_and_named(odd_split):
    """Provokes: the odd entries of odd_split."""
    zero = odd_split / "val" / "0"
    skipped = []
    samples, classes = scan_image_folder(str(odd_split / "val"), skipped=skipped)
    paths = [path for path, _ in samples]
    assert len(paths) == len(set(os.path.realpath(p) for p in paths)) == 30 + 4 + 1  # + 4 formats + fake.png
    first = os.path.realpath(zero / "duplicate.png")
    reasons = {os.path.relpath(path, odd_split / "val"): reason for path, reason in skipped}
    assert reasons == {
        "0/again": f"a link to a folder listed already ({zero}): loop or duplicate",
        "0/broken.png": "broken link",
        "0/duplicate.png": f"the same file as {first}",
        "0/notes.txt": "not an image (extension)",
        "1/linked_class": f"a link to a folder listed already ({zero}): loop or duplicate",
    }
    lines = []
    check_dataset_layout(str(odd_split), "train", "val", num_classes=10, warn=lines.append)
    assert len(lines) == 1 and lines[0].startswith(
        f"{odd_split / 'val'}: skipped 5 entries (2 a link to a folder listed already, 1 broken link, "
        "1 not an image, 1 the same file): ")
    for name in ("0/again", "0/broken.png", "0/duplicate.png", "0/notes.txt", "1/linked_class"):
        assert str(odd_split / "val" / name) in lines[0]


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file whatever its permissions")
def test_files_and_folders_without_read_permission_are_skipped_and_named(odd_split):
    """Provokes: a file with mode 000 and a sub-folder with mode 000."""
    zero = odd_split / "val" / "0"
    locked_file, locked_dir = zero / "locked.png", zero / "locked"
    shutil.copy(sorted(zero.iterdir())[0], locked_file)
    locked_dir.mkdir()
    locked_file.chmod(0)
    locked_dir.chmod(0)
    try:
        skipped = []
        scan_image_folder(str(odd_split / "val"), skipped=skipped)
    finally:
        locked_dir.chmod(0o755)
    reasons = dict(skipped)
    assert reasons[str(locked_file)] == "no read permission"
    assert reasons[str(locked_dir)].startswith("cannot list the folder (")


@pytest.mark.timeout(600)
def test_eval_scores_each_readable_image_once_and_reports_the_rest(odd_split, uninterrupted_run, tmp_path):
    """Provokes: eval.py on odd_split's val split (the issue's `val/a/again -> .` made it score 129 images for 9)."""
    output = tmp_path / "metrics.json"
    result = succeeded(entry("eval.py", "--data_path", odd_split, "--checkpoint",
                             uninterrupted_run / "dm_nfnet_nano-2_14.ckpt", "--num_parallel_workers", "1",
                             "--output", output))
    assert "Traceback" not in result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert any(line.startswith(f"warning: {odd_split / 'val'}: skipped 5 entries") for line in warnings), warnings
    with open(output) as f:
        metrics = json.load(f)
    assert metrics["count"] == 30 + 4  # every readable image once; fake.png is skipped when loaded
    assert f"unreadable image {odd_split / 'val' / '0' / 'fake.png'}" in result.stdout + result.stderr
