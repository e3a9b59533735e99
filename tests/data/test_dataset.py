"""Folder scanning, layout checks and the mindspore.dataset pipelines (src/data/folder.py, dataset.py)."""
import os

import numpy as np
import pytest
from PIL import Image

from src.data.folder import DatasetError, check_dataset_layout, scan_image_folder


def _write_image(path, value, size=(12, 10)):
    """A solid gray image whose pixel value identifies it (PNG: lossless)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.new("RGB", size, (value, value, value)).save(path)


def _make_split(root, split, counts, start=0, ext="png"):
    """``counts[c]`` images in class folder 'c<c>', valued start, start+1, ... in file order."""
    value = start
    for cls, count in enumerate(counts):
        for i in range(count):
            _write_image(os.path.join(root, split, f"c{cls}", f"img{i:03d}.{ext}"), value)
            value += 1
    return value


class PixelValue:
    """Eval 'transform' returning the image's identifying value as a (1, 1, 1) float32 array."""

    def __call__(self, img):
        return np.full((1, 1, 1), img.getpixel((0, 0))[0], dtype=np.float32)


def _collect(dataset, columns):
    rows = {c: [] for c in columns}
    batch_sizes = []
    for batch in dataset.create_dict_iterator(num_epochs=1, output_numpy=True):
        batch_sizes.append(len(batch[columns[0]]))
        for c in columns:
            rows[c].append(batch[c])
    return {c: np.concatenate(v) for c, v in rows.items()}, batch_sizes


# ----------------------------------------------------------------------------- scan / layout

def test_scan_lists_images_by_sorted_class_with_case_insensitive_extensions(tmp_path):
    _write_image(str(tmp_path / "b" / "x.PNG"), 1)
    _write_image(str(tmp_path / "a" / "y.png"), 2)
    _write_image(str(tmp_path / "a" / "sub" / "z.png"), 3)  # nested, as torchvision's ImageFolder
    Image.new("RGB", (4, 4)).save(str(tmp_path / "a" / "w.JPEG"), format="JPEG")
    (tmp_path / "a" / "notes.txt").write_text("not an image")
    _write_image(str(tmp_path / ".ipynb_checkpoints" / "q.png"), 4)  # hidden folder: not a class
    samples, classes = scan_image_folder(str(tmp_path))
    assert classes == ["a", "b"]
    names = [(os.path.relpath(p, tmp_path), c) for p, c in samples]
    assert names == [(os.path.join("a", "sub", "z.png"), 0), (os.path.join("a", "w.JPEG"), 0),
                     (os.path.join("a", "y.png"), 0), (os.path.join("b", "x.PNG"), 1)]


def test_scan_errors_name_the_path(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(DatasetError, match="not found: " + missing):
        scan_image_folder(missing)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="no class folders in .*empty"):
        scan_image_folder(str(tmp_path / "empty"))
    (tmp_path / "noimg" / "c0").mkdir(parents=True)
    (tmp_path / "noimg" / "c0" / "readme.txt").write_text("x")
    with pytest.raises(DatasetError, match="no images .* in .*noimg"):
        scan_image_folder(str(tmp_path / "noimg"))
    _write_image(str(tmp_path / "partial" / "c0" / "a.png"), 1)
    (tmp_path / "partial" / "c1").mkdir()
    with pytest.raises(DatasetError, match="class folders without images in .*partial: c1"):
        scan_image_folder(str(tmp_path / "partial"))


def test_check_dataset_layout_reports_mismatched_classes_and_count(tmp_path):
    root = str(tmp_path)
    _make_split(root, "train", [1, 1, 1])
    _make_split(root, "val", [1, 1])
    _write_image(os.path.join(root, "val", "extra", "a.png"), 1)
    with pytest.raises(DatasetError) as info:
        check_dataset_layout(root)
    message = str(info.value)
    assert "only in " + os.path.join(root, "train") + ": c2" in message
    assert "only in " + os.path.join(root, "val") + ": extra" in message
    assert "\n" not in message

    assert check_dataset_layout(root, val_split=None, num_classes=3) == ["c0", "c1", "c2"]
    with pytest.raises(DatasetError, match="found 3 class folders in .*train, but num_classes is 10"):
        check_dataset_layout(root, val_split=None, num_classes=10)
    with pytest.raises(DatasetError, match="not found: .*missing"):
        check_dataset_layout(str(tmp_path / "missing"))
    with pytest.raises(DatasetError, match="no test/ folder in .*: it holds the folders train, val; expected "
                                           ".*/train/<class>/<image> and .*/test/<class>/<image>"):
        check_dataset_layout(root, val_split="test")


# ----------------------------------------------------------------------------- samplers (no pipeline)

def test_training_shards_partition_each_epoch_and_reshuffle():
    from src.data.sources import EpochShardSampler

    n, shards = 11, 2
    samplers = [EpochShardSampler(n, shards, r, shuffle=True, seed=5) for r in range(shards)]
    epochs = []
    for _ in range(2):
        keys = [list(s) for s in samplers]
        assert [len(k) for k in keys] == [6, 6]  # ceil(11 / 2): equal step counts on every rank
        epoch, offset = len(epochs), len(epochs) * n
        indices = [k - offset for k in keys[0] + keys[1]]
        assert sorted(set(indices)) == list(range(n))  # every image this epoch; one wraps around
        epochs.append(indices)
        assert all(0 <= i < n for i in indices) and epoch == samplers[0].epoch - 1
    assert epochs[0] != epochs[1]
    resumed = EpochShardSampler(n, shards, 0, shuffle=True, seed=5, start_epoch=1)
    assert [k - n for k in resumed] == epochs[1][:6]


# ----------------------------------------------------------------------------- pipelines

@pytest.fixture(scope="module")
def id_folder(tmp_path_factory):
    """val: 11 images in 3 classes (4, 4, 3) whose pixel values are 0..10; train: 8 images (4, 4)."""
    root = str(tmp_path_factory.mktemp("idfolder"))
    _make_split(root, "val", [4, 4, 3])
    _make_split(root, "train", [4, 4], start=100)
    return root


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", [1, 2])
def test_eval_sees_every_image_once_when_batch_does_not_divide(id_folder, workers):
    from src.data.dataset import create_dataset

    ds = create_dataset(id_folder, "val", False, 3, PixelValue(), num_parallel_workers=workers)
    rows, batch_sizes = _collect(ds, ["image", "label", "valid"])
    assert batch_sizes == [3, 3, 3, 3]  # the last batch padded: one shape, one compiled graph
    assert rows["image"].reshape(-1)[:11].tolist() == list(range(11))
    assert rows["label"][:11].tolist() == [0] * 4 + [1] * 4 + [2] * 3
    assert rows["label"].dtype == np.int32
    assert rows["valid"].tolist() == [1] * 11 + [0]


@pytest.mark.timeout(300)
def test_sharded_eval_counts_every_image_exactly_once(id_folder):
    from src.data.dataset import create_dataset

    seen, total_rows = [], 0
    for shard_id in range(2):
        ds = create_dataset(id_folder, "val", False, 4, PixelValue(), num_parallel_workers=2,
                            num_shards=2, shard_id=shard_id)
        rows, batch_sizes = _collect(ds, ["image", "label", "valid"])
        assert batch_sizes == [4, 4]  # ceil(11 / 2) = 6 rows, padded to whole batches
        values = rows["image"].reshape(-1).astype(int)
        seen += values[rows["valid"] == 1].tolist()
        total_rows += len(values)
    assert total_rows == 16
    assert sorted(seen) == list(range(11))


@pytest.mark.timeout(300)
def test_training_batches_have_shapes_and_drop_the_remainder(id_folder):
    from src.data.dataset import create_dataset
    from src.data.transforms import create_train_transform

    ds = create_dataset(id_folder, "train", True, 3, create_train_transform(16), num_parallel_workers=2)
    assert ds.get_dataset_size() == 2  # 8 images, batch 3, remainder dropped
    rows, batch_sizes = _collect(ds, ["image", "label"])
    assert batch_sizes == [3, 3]
    assert rows["image"].shape == (6, 3, 16, 16) and rows["image"].dtype == np.float32
    assert rows["label"].dtype == np.int32 and set(rows["label"].tolist()) <= {0, 1}
    sharded = create_dataset(id_folder, "train", True, 2, create_train_transform(16), num_parallel_workers=2,
                             num_shards=2, shard_id=1)
    assert sharded.get_dataset_size() == 2  # 4 of the 8 images on this rank
    assert _collect(sharded, ["image", "label"])[1] == [2, 2]


def _first_epoch(root, workers, multiprocessing, seed=0, **kw):
    from src.data.dataset import create_dataset
    from src.data.transforms import create_train_transform

    ds = create_dataset(root, "train", True, 4, create_train_transform(8), num_parallel_workers=workers,
                        python_multiprocessing=multiprocessing, seed=seed, **kw)
    return _collect(ds, ["image", "label"])[0]


@pytest.mark.timeout(300)
def test_training_augmentation_is_reproducible_with_any_worker_count(id_folder):
    single = _first_epoch(id_folder, 1, False)
    processes = _first_epoch(id_folder, 2, True)
    assert np.array_equal(single["label"], processes["label"])
    assert np.array_equal(single["image"], processes["image"])
    other_seed = _first_epoch(id_folder, 1, False, seed=1)
    assert not np.array_equal(single["image"], other_seed["image"])


@pytest.fixture(scope="module")
def noise_folder(tmp_path_factory):
    """train: 9 random-noise PNGs of varied sizes in 2 classes: every augmentation draw shows in the pixels."""
    root = tmp_path_factory.mktemp("noise")
    rng = np.random.default_rng(0)
    for i in range(9):
        os.makedirs(root / "train" / f"c{i % 2}", exist_ok=True)
        pixels = rng.integers(0, 256, (20 + i, 24 - i, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / "train" / f"c{i % 2}" / f"{i}.png")
    return str(root)


def _epochs(root, workers, multiprocessing, mixup=None, epochs=2, seed=3):
    """Both epochs' batches of the full training transform (RandAugment, random erasing in pixel mode)."""
    from src.data.dataset import create_dataset
    from src.data.transforms import create_train_transform

    transform = create_train_transform(12, auto_augment="rand-m9-n3-mstd0.5-inc1", re_prob=0.5, re_mode="pixel")
    ds = create_dataset(root, "train", True, 2, transform, num_parallel_workers=workers, seed=seed,
                        python_multiprocessing=multiprocessing, mixup=mixup)
    iterator = ds.create_tuple_iterator(num_epochs=epochs, output_numpy=True)
    return [[(image, label) for image, label in iterator] for _ in range(epochs)]


@pytest.mark.timeout(300)
def test_each_sample_is_a_pure_function_of_seed_epoch_and_index(noise_folder):
    """The pipeline's image = the transform applied with sample_rng(seed, epoch, index): no other state."""
    from src.data.augment.random_state import sample_rng
    from src.data.sources import EpochShardSampler
    from src.data.transforms import create_train_transform, load_image

    samples, _ = scan_image_folder(os.path.join(noise_folder, "train"))
    transform = create_train_transform(12, auto_augment="rand-m9-n3-mstd0.5-inc1", re_prob=0.5, re_mode="pixel")
    np.random.seed(123)  # the global state plays no part
    for epoch, batches in enumerate(_epochs(noise_folder, 2, True)):
        images = np.concatenate([image for image, _ in batches])
        order = EpochShardSampler(len(samples), seed=3).epoch_indices(epoch)[:len(images)]
        expected = [transform(load_image(samples[i][0]), rng=sample_rng(3, epoch, i)) for i in order]
        np.testing.assert_array_equal(images, np.stack(expected))
        assert np.concatenate([label for _, label in batches]).tolist() == [samples[i][1] for i in order]


@pytest.mark.timeout(300)
def test_batches_are_the_same_with_one_or_two_workers_processes_or_threads_and_run_to_run(noise_folder):
    from src.data.dataset import create_mixup

    mixup = create_mixup(mix_up=0.8, cutmix=1.0, num_classes=2)
    single = _epochs(noise_folder, 1, False, mixup)
    for workers, multiprocessing in ((2, True), (2, False), (1, False)):  # MindSpore allows up to cpu_count
        other = _epochs(noise_folder, workers, multiprocessing, mixup)
        for batches, other_batches in zip(single, other):
            assert len(batches) == len(other_batches) == 4  # 9 images, batch 2, remainder dropped
            for (image, label), (other_image, other_label) in zip(batches, other_batches):
                np.testing.assert_array_equal(image, other_image)
                np.testing.assert_array_equal(label, other_label)
    first, second = (np.concatenate([image for image, _ in batches]) for batches in single)
    assert not np.array_equal(first, second)  # epochs draw differently
    assert not np.array_equal(first, np.concatenate([i for i, _ in _epochs(noise_folder, 1, False, mixup, 1, 4)[0]]))


def random_mixup(x, labels, rng):
    """Mixup with a lambda drawn from the batch's generator (as the project's Mixup draws)."""
    lam = np.float32(rng.beta(0.8, 0.8))
    one_hot = np.eye(2, dtype=np.float32)[labels]
    return lam * x + (1 - lam) * x[::-1], lam * one_hot + (1 - lam) * one_hot[::-1]


@pytest.mark.timeout(300)
def test_pipeline_resumed_at_start_epoch_redraws_the_uninterrupted_epoch(id_folder):
    from src.data.dataset import create_dataset
    from src.data.transforms import create_train_transform

    def pipeline(start_epoch):
        return create_dataset(id_folder, "train", True, 4, create_train_transform(8), num_parallel_workers=1,
                              mixup=random_mixup, start_epoch=start_epoch)

    straight = pipeline(0).create_tuple_iterator(num_epochs=2, output_numpy=True)
    epoch0 = [b for b in straight]
    epoch1 = [b for b in straight]
    resumed = [b for b in pipeline(1).create_tuple_iterator(num_epochs=1, output_numpy=True)]
    assert len(epoch1) == len(resumed) == 2
    for a, b in zip(epoch1, resumed):
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.array_equal(epoch0[0][0], epoch1[0][0])


class CountedTransform:
    """The training transform, counting its calls (one per image transformed; the map runs in-thread)."""

    def __init__(self, transform):
        self.transform, self.calls = transform, 0

    def __call__(self, img, rng):
        self.calls += 1
        return self.transform(img, rng)


@pytest.mark.timeout(300)
def test_pipeline_started_mid_epoch_is_one_pass_of_the_uninterrupted_batches(id_folder):
    """start_step: the first pass is the epoch's batches from start_step on (the same images, labels and Mixup
    draws as the uninterrupted run's), the next pass a whole epoch; the batches before are not transformed."""
    from src.data.dataset import create_dataset
    from src.data.transforms import create_train_transform

    def pipeline(start_epoch, start_step=0):
        transform = CountedTransform(create_train_transform(8))
        return transform, create_dataset(id_folder, "train", True, 2, transform, num_parallel_workers=1,
                                         mixup=random_mixup, start_epoch=start_epoch, start_step=start_step)

    def passes(dataset, n):
        iterator = dataset.create_tuple_iterator(num_epochs=n, output_numpy=True)
        return [[b for b in iterator] for _ in range(n)]

    straight = passes(pipeline(0)[1], 3)
    transform, resumed = pipeline(1, start_step=1)
    assert resumed.get_dataset_size() == 4
    got = passes(resumed, 2)
    assert [len(p) for p in got] == [3, 4]
    for a, b in zip(got[0] + got[1], straight[1][1:] + straight[2]):
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert transform.calls == 3 * 2 + 4 * 2  # the skipped batch's 2 images are not transformed


def fake_mixup(x, labels):
    """Mixes each image with the batch reversed at lambda 0.75: soft targets of 10 classes."""
    one_hot = np.eye(10, dtype=np.float32)[labels]
    return 0.75 * x + 0.25 * x[::-1], 0.75 * one_hot + 0.25 * one_hot[::-1]


@pytest.mark.timeout(300)
def test_training_with_mixup_yields_soft_targets(id_folder):
    from src.data.dataset import create_dataset
    from src.data.transforms import create_train_transform

    ds = create_dataset(id_folder, "train", True, 4, create_train_transform(16), num_parallel_workers=1,
                        mixup=fake_mixup)
    rows, batch_sizes = _collect(ds, ["image", "label"])
    assert batch_sizes == [4, 4]
    assert rows["image"].shape == (8, 3, 16, 16) and rows["image"].dtype == np.float32
    assert rows["label"].shape == (8, 10) and rows["label"].dtype == np.float32
    assert np.allclose(rows["label"].sum(axis=1), 1.0)
    assert set(np.round(rows["label"].max(axis=1), 4).tolist()) <= {0.75, 1.0}


@pytest.mark.timeout(300)
def test_full_training_pipeline_with_project_augment_yields_smoothed_soft_targets(id_folder):
    from src.data.dataset import create_dataset, create_mixup
    from src.data.transforms import create_train_transform

    mixup = create_mixup(mix_up=0.8, cutmix=1.0, label_smoothing=0.1, num_classes=2)
    assert create_mixup(mix_up=0.0, cutmix=0.0) is None
    transform = create_train_transform(16, auto_augment="rand-m5-n4-mstd0.5-inc1", re_prob=0.25)
    ds = create_dataset(id_folder, "train", True, 4, transform, num_parallel_workers=2, mixup=mixup)
    rows, _ = _collect(ds, ["image", "label"])
    assert rows["image"].shape == (8, 3, 16, 16) and rows["image"].dtype == np.float32
    assert rows["label"].shape == (8, 2) and rows["label"].dtype == np.float32
    assert np.allclose(rows["label"].sum(axis=1), 1.0, atol=1e-6)
    assert rows["label"].min() >= 0.05 - 1e-6  # smoothing 0.1 over 2 classes: off value 0.05


def test_create_dataset_rejects_dropping_or_mixing_in_evaluation(id_folder):
    from src.data.dataset import create_dataset

    with pytest.raises(ValueError, match="never drops"):
        create_dataset(id_folder, "val", False, 4, PixelValue(), drop_remainder=True)
    with pytest.raises(ValueError, match="training only"):
        create_dataset(id_folder, "val", False, 4, PixelValue(), mixup=fake_mixup)
    with pytest.raises(ValueError, match="together"):
        create_dataset(id_folder, "val", False, 4, PixelValue(), num_shards=2)
    with pytest.raises(DatasetError, match="fewer than one batch of 9"):
        create_dataset(id_folder, "train", True, 9, PixelValue())


# ----------------------------------------------------------------------------- unreadable files

@pytest.fixture()
def bad_folder(tmp_path):
    """val: 6 images (values 0..5) in 2 classes, of which c0/img001 is truncated and c1/img000 empty."""
    root = str(tmp_path / "bad")
    _make_split(root, "val", [3, 3])
    truncated = os.path.join(root, "val", "c0", "img001.png")
    data = open(truncated, "rb").read()
    open(truncated, "wb").write(data[: len(data) // 2])
    empty = os.path.join(root, "val", "c1", "img000.png")
    open(empty, "wb").close()
    return root, truncated, empty


@pytest.mark.timeout(300)
def test_eval_marks_unreadable_files_invalid_and_logs_them(bad_folder, tmp_path):
    from src.data.dataset import create_dataset, read_bad_file_log

    root, truncated, empty = bad_folder
    log = str(tmp_path / "bad.txt")
    ds = create_dataset(root, "val", False, 4, PixelValue(), num_parallel_workers=2, bad_file_log=log)
    rows, _ = _collect(ds, ["image", "label", "valid"])
    assert rows["valid"].tolist() == [1, 0, 1, 0, 1, 1, 0, 0]  # 6 images, padded to 2 batches of 4
    assert rows["image"].reshape(-1)[rows["valid"] == 1].tolist() == [0, 2, 4, 5]
    assert read_bad_file_log(log) == sorted([truncated, empty])


@pytest.mark.timeout(300)
def test_training_replaces_unreadable_files_with_the_next_readable_one(bad_folder, tmp_path):
    from src.data.dataset import create_dataset, read_bad_file_log

    root, truncated, empty = bad_folder
    log = str(tmp_path / "bad.txt")
    ds = create_dataset(root, "val", True, 6, PixelValue(), num_parallel_workers=1, shuffle=False,
                        bad_file_log=log)
    rows, _ = _collect(ds, ["image", "label"])
    # file order 0..5: 1 -> 2 and 3 -> 4, with the substitute's label
    assert rows["image"].reshape(-1).tolist() == [0, 2, 2, 4, 4, 5]
    assert rows["label"].tolist() == [0, 0, 0, 1, 1, 1]
    assert read_bad_file_log(log) == sorted([truncated, empty])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("workers", [1, 2])
def test_strict_data_fails_naming_the_first_bad_file(bad_folder, workers):
    from src.data.dataset import create_dataset, pipeline_data_error

    root, truncated, _ = bad_folder
    ds = create_dataset(root, "val", False, 2, PixelValue(), num_parallel_workers=workers, strict_data=True)
    with pytest.raises(Exception) as info:
        _collect(ds, ["image", "label", "valid"])
    # MindSpore wraps the worker's error in a RuntimeError with tracebacks; the one line is recoverable
    assert pipeline_data_error(info.value).startswith("unreadable image " + truncated + ": ")
    assert "\n" not in pipeline_data_error(info.value)
