"""The demo dataset folder (src/data/digits.py)."""
import os
import sys

import numpy as np
import pytest
from PIL import Image

from src.data import digits
from src.data.folder import check_dataset_layout, scan_image_folder

pytest.importorskip("sklearn")


def _relative_files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root)
                  for f in files if f.endswith(".png"))


@pytest.fixture(scope="module")
def digits_root(tmp_path_factory):
    return digits.materialize_digits(str(tmp_path_factory.mktemp("d") / "digits"), image_size=24)


def test_digits_folder_has_all_images_in_ten_classes_per_split(digits_root):
    train, train_classes = scan_image_folder(os.path.join(digits_root, "train"))
    val, val_classes = scan_image_folder(os.path.join(digits_root, "val"))
    assert len(train) + len(val) == 1797
    assert (len(train), len(val)) == (1438, 359)
    assert train_classes == val_classes == [str(d) for d in range(10)]
    assert check_dataset_layout(digits_root, num_classes=10) == train_classes
    names = {os.path.basename(p) for p, _ in train + val}
    assert len(names) == 1797  # each sklearn row exactly once


def test_digits_split_is_stratified(digits_root):
    _, labels = digits._load_sklearn_digits()
    val, _ = scan_image_folder(os.path.join(digits_root, "val"))
    per_class = np.bincount([c for _, c in val], minlength=10)
    expected = [int(round(0.2 * n)) for n in np.bincount(labels)]
    assert per_class.tolist() == expected


def test_digits_images_are_rgb_png_of_image_size_with_full_range(digits_root):
    path = os.path.join(digits_root, "train", "0", sorted(os.listdir(os.path.join(digits_root, "train", "0")))[0])
    with Image.open(path) as img:
        assert img.format == "PNG" and img.mode == "RGB" and img.size == (24, 24)
        arr = np.asarray(img)
    assert np.array_equal(arr[..., 0], arr[..., 2])
    assert arr.min() == 0 and arr.max() >= 240  # 0..16 scaled to 0..255


def test_digits_split_is_deterministic_and_rerun_is_a_no_op(digits_root, tmp_path):
    before = {f: os.path.getmtime(os.path.join(digits_root, f)) for f in _relative_files(digits_root)}
    assert digits.materialize_digits(digits_root, image_size=24) == digits_root
    assert {f: os.path.getmtime(os.path.join(digits_root, f)) for f in _relative_files(digits_root)} == before
    other = digits.materialize_digits(str(tmp_path / "again"), image_size=24)
    assert _relative_files(other) == sorted(before)


def test_digits_refuses_to_touch_a_different_existing_folder(digits_root, tmp_path):
    with pytest.raises(FileExistsError, match="not a digits folder"):
        digits.materialize_digits(digits_root, image_size=32)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("user data")
    with pytest.raises(FileExistsError, match="mine"):
        digits.materialize_digits(str(tmp_path / "mine"))
    assert (tmp_path / "mine" / "keep.txt").read_text() == "user data"


def test_interrupted_digits_run_leaves_no_partial_folder(tmp_path, monkeypatch):
    calls = {"n": 0}
    original = digits._to_rgb_image

    def failing(image, size):
        calls["n"] += 1
        if calls["n"] == 100:
            raise KeyboardInterrupt
        return original(image, size)

    monkeypatch.setattr(digits, "_to_rgb_image", failing)
    with pytest.raises(KeyboardInterrupt):
        digits.materialize_digits(str(tmp_path / "out"), image_size=8)
    assert os.listdir(tmp_path) == []


def test_digits_without_scikit_learn_exits_with_install_hint(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(SystemExit, match="scikit-learn is needed"):
        digits.materialize_digits(str(tmp_path / "out"), image_size=8)


def test_digits_cli_writes_the_folder_and_reports_counts(tmp_path, capsys):
    digits.main(["--output", str(tmp_path / "cli"), "--image_size", "8"])
    assert "1438 train / 359 val images of 8x8" in capsys.readouterr().out
    nines = tmp_path / "cli" / "val" / "9"
    with Image.open(str(nines / sorted(os.listdir(nines))[0])) as img:
        assert img.size == (8, 8)
