"""MindRecord conversion and reading (src/data/to_mindrecord.py, create_dataset on converted files)."""
import hashlib
import os

import numpy as np
import pytest
from PIL import Image

from src.data import create_dataset
from src.data.to_mindrecord import main as convert, mindrecord_files, read_classes
from src.data.transforms import create_eval_transform


def _folder(root):
    """train: 3 classes x 4 JPEG/PNG images of varied sizes and noise; val: 7 images; one corrupt file."""
    rng = np.random.default_rng(0)
    for split, per_class in (("train", (4, 4, 4)), ("val", (3, 2, 2))):
        for cls, count in enumerate(per_class):
            os.makedirs(root / split / f"k{cls}")
            for i in range(count):
                pixels = rng.integers(0, 256, (20 + 3 * i, 24 + cls, 3), dtype=np.uint8)
                ext = "png" if (i + cls) % 2 else "jpg"
                Image.fromarray(pixels).save(root / split / f"k{cls}" / f"im{i}.{ext}")
    (root / "train" / "k1" / "broken.jpg").write_bytes(b"not an image")
    return root


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = _folder(tmp_path_factory.mktemp("folder"))
    out = tmp_path_factory.mktemp("mindrecord")
    assert convert(["--data_path", str(root), "--output", str(out), "--shards", "2"]) == 0
    return str(root), str(out)


def _rows(dataset, columns):
    rows = []
    for batch in dataset.create_dict_iterator(num_epochs=1, output_numpy=True):
        rows.extend(zip(*(batch[c] for c in columns)))
    return rows


def _key(image, label):
    return int(label), hashlib.sha1(np.ascontiguousarray(image).tobytes()).hexdigest()


def test_shards_hold_every_readable_file_byte_for_byte_with_its_label(converted):
    from mindspore.mindrecord import FileReader

    root, out = converted
    for split, expected in (("train", 12), ("val", 7)):
        files = mindrecord_files(out, split)
        assert [os.path.basename(f) for f in files] == [f"{split}.mindrecord0", f"{split}.mindrecord1"]
        assert read_classes(out, split) == ["k0", "k1", "k2"]
        rows = []
        reader = FileReader(files[0])
        for row in reader.get_next():
            rows.append(row)
        reader.close()
        assert len(rows) == expected  # broken.jpg left out
        for row in rows:
            with open(os.path.join(root, split, row["path"]), "rb") as f:
                assert row["image"] == f.read()
            assert row["label"] == int(row["path"].split("/")[0][1:])
        assert sorted(r["index"] for r in rows) == sorted({r["index"] for r in rows})


@pytest.mark.parametrize("split,is_training", [("val", False), ("train", True)])
def test_pipeline_reads_the_same_transformed_images_and_labels_as_the_folder(converted, split, is_training):
    root, out = converted
    transform = create_eval_transform(32, crop_pct=0, crop_mode="pixels")
    kw = dict(num_parallel_workers=1, drop_remainder=False) if is_training else dict(num_parallel_workers=1)
    columns = ["image", "label"] if is_training else ["image", "label", "valid"]

    def images(data_path, **shuffle):  # (image, label) rows; evaluation's padding rows left out
        rows = _rows(create_dataset(data_path, split, is_training, 4, transform, **shuffle, **kw), columns)
        return rows if is_training else [(i, l) for i, l, v in rows if v]

    folder = images(root, shuffle=False)
    record = images(out)
    assert len(record) == (12 if is_training else 7)
    assert record[0][0].shape == (3, 32, 32) and record[0][0].dtype == np.float32
    # training substitutes a readable neighbour for broken.jpg; the converter left it out
    folder_keys = sorted({_key(*r) for r in folder})
    assert sorted(_key(*r) for r in record) == folder_keys


def test_two_eval_shards_pad_to_equal_length_and_cover_each_image_once(converted):
    root, out = converted
    transform = create_eval_transform(32, crop_pct=0, crop_mode="pixels")
    whole = sorted(_key(i, l) for i, l, v in _rows(create_dataset(root, "val", False, 3, transform,
                                                                  num_parallel_workers=1),
                                                   ["image", "label", "valid"]) if v)
    shards = [_rows(create_dataset(out, "val", False, 3, transform, num_parallel_workers=1, num_shards=2,
                                   shard_id=r), ["image", "label", "valid"]) for r in (0, 1)]
    assert [len(s) for s in shards] == [6, 6]  # 7 images: ceil(7 / 2) = 4 rows, padded to 2 batches of 3
    assert sum(int(v) == 0 for s in shards for *_, v in s) == 5
    assert sorted(_key(i, l) for s in shards for i, l, v in s if v) == whole


def test_training_draws_the_same_augmentation_per_image_and_epoch_as_the_folder(converted):
    """Both sources seed a sample's draws from (seed, epoch, folder index): a MindRecord epoch holds the folder's
    augmented images (MindDataset orders them its own way), and differs from epoch to epoch."""
    from src.data.transforms import create_train_transform

    root, out = converted
    transform = create_train_transform(16, auto_augment="rand-m9-n3-mstd0.5-inc1", re_prob=0.5, re_mode="pixel")

    def epochs(data_path, **kw):
        dataset = create_dataset(data_path, "train", True, 4, transform, num_parallel_workers=2, drop_remainder=False,
                                 seed=7, **kw)
        iterator = dataset.create_tuple_iterator(num_epochs=2, output_numpy=True)
        return [sorted(_key(i, l) for image, label in iterator for i, l in zip(image, label)) for _ in range(2)]

    folder, record = epochs(root, shuffle=False), epochs(out)
    for folder_keys, record_keys in zip(folder, record):
        assert len(record_keys) == 12 and len(folder_keys) == 13  # the folder substitutes for broken.jpg
        assert set(record_keys) <= set(folder_keys)
    assert not set(record[0]) & set(record[1])
