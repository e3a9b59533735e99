"""Case 3, a wrong dataset layout: one `error:` line naming the path or the classes, exit 2, before any model
is built (MindSpore is not even imported) and before the run directory is created. check_dataset_layout
itself is tested in tests/data/test_dataset.py; here train.py and eval.py run as real processes."""
import os
import shutil

import pytest

from reliability_helpers import entry, mindspore_imported, user_error


def image_folder(root, splits=("train", "val"), classes=("0", "1", "2"), per_class=1):
    from PIL import Image

    for split in splits:
        for name in classes:
            os.makedirs(root / split / name)
            for i in range(per_class):
                Image.new("RGB", (8, 8), (int(name) * 40, 0, 0)).save(root / split / name / f"{i}.png")
    return root


def layouts(tmp_path):
    """name -> (data_path, the message that names the problem)."""
    missing = tmp_path / "missing"
    no_val = image_folder(tmp_path / "no_val", splits=("train",))
    empty_train = image_folder(tmp_path / "empty_train", splits=("val",))
    os.makedirs(empty_train / "train")
    no_images = image_folder(tmp_path / "no_images")
    for name in ("0", "1", "2"):
        shutil.rmtree(no_images / "train" / name)
        os.makedirs(no_images / "train" / name)
    differ = image_folder(tmp_path / "differ")
    os.rename(differ / "val" / "2", differ / "val" / "two")
    return {
        "missing path": (missing, f"dataset path not found: {missing}"),
        "missing split": (no_val, f"no val/ folder in {no_val}: it holds the folders train; expected "
                                  f"{no_val}/train/<class>/<image> and {no_val}/val/<class>/<image>"),
        "split without class folders": (
            empty_train, f"no class folders in {empty_train / 'train'} (expected {empty_train / 'train'}/<class>/<image>)"),
        "split without images": (no_images, f"no images (.jpg/.jpeg/.png/.bmp/.webp/.tif/.tiff) in "
                                            f"{no_images / 'train'}"),
        "class folders differ": (differ, f"class folders differ between splits; only in {differ / 'train'}: 2; "
                                         f"only in {differ / 'val'}: two"),
    }


@pytest.mark.parametrize("case", ["missing path", "missing split", "split without class folders",
                                  "split without images", "class folders differ"])
def test_train_py_names_the_path_before_building_anything(tmp_path, case):
    """Provokes: train.py on each kind of broken layout."""
    data_path, message = layouts(tmp_path)[case]
    result = entry("train.py", "--data_path", data_path, "--num_classes", "3", "--output_dir", tmp_path / "run",
                   probe_imports=True)
    assert user_error(result) == f"error: {message}"
    assert not mindspore_imported(result)
    assert not (tmp_path / "run").exists()


def test_a_class_count_other_than_num_classes_is_named_by_train_and_eval(tmp_path):
    """Provokes: 3 class folders with the config's num_classes 10, in train.py and in eval.py."""
    data = image_folder(tmp_path / "data")
    result = entry("train.py", "--data_path", data, "--output_dir", tmp_path / "run", probe_imports=True)
    assert user_error(result) == f"error: found 3 class folders in {data / 'train'}, but num_classes is 10"
    assert not mindspore_imported(result)
    checkpoint = tmp_path / "any.ckpt"
    checkpoint.write_bytes(b"unused: the layout is checked first")
    result = entry("eval.py", "--data_path", data, "--checkpoint", checkpoint, probe_imports=True)
    assert user_error(result) == f"error: found 3 class folders in {data / 'val'}, but num_classes is 10"
    assert not mindspore_imported(result)
