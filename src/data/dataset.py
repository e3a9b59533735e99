"""Training and evaluation datasets over ImageNet-layout folders, through mindspore.dataset.

One image travels: ``scan_image_folder`` lists (path, class) pairs -> a sampler picks
keys -> ``GeneratorDataset`` yields the key -> ``map`` calls a random-access source
(TrainSource / EvalSource: ``source[key]`` loads the file with ``transforms.load_image``
and applies the Python transform) in ``num_parallel_workers`` worker processes ->
``batch`` -> (training) Mixup/CutMix per batch. Why the work runs in ``map`` rather than
in GeneratorDataset's own workers: see the measurements below. With DeepMind's mix scheme
(a mixup whose ``mixes_pairs`` is true, src/data/augment/deepmind_mix.py) each row is an image
pair, drawn from two independent shuffles, and the batch step mixes, augments and normalizes.

Columns:
    training:   image float32 (B, 3, H, W); label int32 (B,), or float32 (B, num_classes)
                soft targets when ``mixup`` is given (label smoothing then lives in them).
    evaluation: image float32 (B, 3, H, W); label int32 (B,); valid int32 (B,).
                ``valid`` is 0 for padding rows and for unreadable files, 1 otherwise:
                a metric that counts only valid rows scores every readable image of the
                split exactly once, with or without sharding and whatever the batch size.

Sharding. Training: every rank draws the same per-epoch permutation (from ``seed``
and the epoch) and takes every ``num_shards``-th entry starting at ``shard_id``;
the permutation is wrapped around so all ranks run the same number of steps.
Evaluation: rank r takes images r, r + S, r + 2S, ... in file order, and every shard is
padded with ``valid = 0`` rows to whole batches of ceil(N / S) rows or more: all batches
have one shape, so the evaluation graph is compiled once (a last partial batch recompiled
it: 7 s of a 20 s nano evaluation on 2 cores, measured).

Randomness. The training sampler's key is ``epoch * N + index``; the source seeds
NumPy's and Python's global random state from (seed, epoch, index) for that one
sample and restores it afterwards. Augmentations are thus the same whichever
worker (process or thread) runs them and however many there are, differ between
workers and epochs, and a run resumed at ``start_epoch`` redraws what the
uninterrupted run drew (exactly so with process workers or a single worker;
concurrent threads share the global state). Mixup is seeded per batch the same way.

Unreadable files (empty, truncated, corrupt, not an image) are found when loaded:
no up-front pass over 1.28M files is made. With ``strict_data`` the pipeline fails
on the first one with an UnreadableImageError naming it (MindSpore wraps it in a
RuntimeError; ``pipeline_data_error`` recovers the one-line message). Otherwise the file is reported once per worker
(a log warning, and a line appended to ``bad_file_log`` when given, so the main
process can count them: ``read_bad_file_log``); a training sample is replaced by the
next readable one in file order, an evaluation row is kept with ``valid = 0``.
"""
import contextlib
import logging
import math
import os
import random
import re
import threading

import numpy as np
import mindspore.dataset as ds

from .folder import DatasetError, IMG_EXTENSIONS, check_dataset_layout, scan_image_folder  # noqa: F401 (re-export)
from .folder import is_mindrecord_split, mindrecord_files, read_classes
from .transforms import UnreadableImageError, load_image

_logger = logging.getLogger(__name__)

# Consecutive unreadable files tolerated while looking for a substitute sample.
MAX_CONSECUTIVE_BAD = 32

# Where the Python work runs. GeneratorDataset's own workers (source with the transform,
# num_parallel_workers=2) poll their result queues with 100 ms sleeps, which capped them
# near or below a single in-thread worker; a map() worker pool does not. Measured on this
# machine (2 CPU cores shared with other jobs, so +-30%; RandomResizedCrop + flip +
# RandAugment rand-m5-n4-mstd0.5-inc1 + normalize; 256 images, batch 32, steady-state
# epochs), img/s:
#                                  1 worker   2 processes   2 threads
#   GeneratorDataset workers:
#     64x64 PNG -> 56                 1,093          337         332
#     256x256 JPEG -> 192               254          282         298
#   map() workers (create_dataset):
#     64x64 PNG -> 56                 1,098        1,686       1,127
#     256x256 JPEG -> 192               229          416         290
# Processes win and are the default; they also keep the per-sample random draws exact
# (threads share the global random state).
DEFAULT_PYTHON_MULTIPROCESSING = True


class _seeded_random_state:
    """Context manager: seed NumPy's and Python's global RNGs from ``words``, restore them on exit.

    Holds a lock meanwhile: the per-sample map and the per-batch Mixup run in different
    pipeline threads of one process when there are no worker processes, and without the
    lock each would reseed the other's global state mid-draw (measured: two runs with the
    same seed then trained on different augmentations).
    """

    _lock = threading.RLock()

    def __init__(self, *words):
        self.state = np.random.SeedSequence([int(w) for w in words]).generate_state(2)

    def __enter__(self):
        self._lock.acquire()
        self.saved = (np.random.get_state(), random.getstate())
        np.random.seed(int(self.state[0]))
        random.seed(int(self.state[0]) << 32 | int(self.state[1]))

    def __exit__(self, *exc):
        np.random.set_state(self.saved[0])
        random.setstate(self.saved[1])
        self._lock.release()


def read_bad_file_log(path):
    """Sorted unique paths written to a ``bad_file_log`` by any worker (empty when none / no file)."""
    if not path or not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return sorted({line.split("\t", 1)[0] for line in f if line.strip()})


_WRAPPED_DATA_ERROR = re.compile(r"\b(?:UnreadableImageError|DatasetError): (?!Traceback)(.+)")


@contextlib.contextmanager
def reported_data_errors():
    """Within the block, an unreadable image raised from the pipeline (strict_data) becomes a
    one-line DatasetError naming the file, which the entry points print without a traceback."""
    try:
        yield
    except RuntimeError as exc:
        message = pipeline_data_error(exc)
        if message is None:
            raise
        raise DatasetError(message) from None


def pipeline_data_error(exc):
    """The one-line data error (e.g. 'unreadable image <path>: ...') inside ``exc``, or None.

    MindSpore re-raises an error from a dataset worker as a RuntimeError whose text holds
    the worker's traceback; train.py / eval.py use this to print just the culprit.
    """
    if isinstance(exc, DatasetError) and "\n" not in str(exc):
        return str(exc)
    found = _WRAPPED_DATA_ERROR.findall(str(exc))
    return found[-1].strip() if found else None


class _ImageFolderSource:
    """Loads samples by index, substituting readable neighbours for unreadable files (see module doc)."""

    def __init__(self, samples, transform, strict_data=False, bad_file_log=None):
        self.samples = list(samples)
        self.transform = transform
        self.strict_data = strict_data
        self.bad_file_log = bad_file_log
        self._reported = set()  # per process: report each bad file once

    def _report(self, err):
        if err.path in self._reported:
            return
        self._reported.add(err.path)
        _logger.warning("skipping %s", err)
        if self.bad_file_log:
            with open(self.bad_file_log, "a", encoding="utf-8") as f:  # short O_APPEND lines: atomic
                f.write(f"{err.path}\t{str(err).splitlines()[0]}\n")

    def load(self, index):
        """``(image, label, readable)``: image of sample ``index`` or of the next readable one."""
        n = len(self.samples)
        for step in range(min(n, MAX_CONSECUTIVE_BAD)):
            path, label = self.samples[(index + step) % n]
            try:
                image = load_image(path)
            except UnreadableImageError as err:
                if self.strict_data:
                    raise
                self._report(err)
                continue
            return image, label, step == 0
        raise DatasetError(f"{min(n, MAX_CONSECUTIVE_BAD)} consecutive unreadable images from "
                           f"{self.samples[index][0]}")


class _Keys:
    """What GeneratorDataset itself yields: the sampler's key, as a one-column row."""

    def __init__(self, length):
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, key):
        return (np.int64(key),)


class TrainSource(_ImageFolderSource):
    """Random-access training source: key ``epoch * N + index`` -> (image, label int32)."""

    def __init__(self, samples, transform, seed=0, strict_data=False, bad_file_log=None):
        super().__init__(samples, transform, strict_data, bad_file_log)
        self.seed = seed

    def __len__(self):
        return len(self.samples)

    def __call__(self, key):
        return self[int(key)]

    def __getitem__(self, key):
        epoch, index = divmod(int(key), len(self.samples))
        with _seeded_random_state(self.seed, epoch, index):
            image, label, _ = self.load(index)
            return self.transform(image), np.int32(label)


class PairTrainSource(TrainSource):
    """Training source of image pairs: key ``(epoch * N + a) * N + b`` -> (image a, image b, label a, label b).

    Image a draws its augmentation from (seed, epoch, a), image b from (seed, epoch, b, 1).
    """

    def __getitem__(self, key):
        n = len(self.samples)
        rest, b = divmod(int(key), n)
        epoch, a = divmod(rest, n)
        with _seeded_random_state(self.seed, epoch, a):
            image_a, label_a, _ = self.load(a)
            image_a = self.transform(image_a)
        with _seeded_random_state(self.seed, epoch, b, 1):
            image_b, label_b, _ = self.load(b)
            image_b = self.transform(image_b)
        return image_a, image_b, np.int32(label_a), np.int32(label_b)


class EvalSource(_ImageFolderSource):
    """Random-access evaluation source for shard ``shard_id`` of ``num_shards``: (image, label, valid).

    Row i is image ``shard_id + i * num_shards``; rows past the end of the split
    (padding every shard to whole batches of at least ceil(N / num_shards) rows) and
    unreadable files carry a readable stand-in image with valid = 0.
    """

    def __init__(self, samples, transform, num_shards=1, shard_id=0, strict_data=False, bad_file_log=None,
                 batch_size=1):
        super().__init__(samples, transform, strict_data, bad_file_log)
        self.num_shards = num_shards
        self.shard_id = shard_id
        self.batch_size = batch_size

    def __len__(self):
        return _padded_rows(len(self.samples), self.num_shards, self.batch_size)

    def __call__(self, row):
        return self[int(row)]

    def __getitem__(self, row):
        index = self.shard_id + int(row) * self.num_shards
        in_split = index < len(self.samples)
        image, label, readable = self.load(index % len(self.samples))
        return self.transform(image), np.int32(label), np.int32(in_split and readable)


def _padded_rows(total, num_shards, batch_size):
    """Rows per evaluation shard: ceil(total / num_shards), rounded up to whole batches."""
    return math.ceil(math.ceil(total / num_shards) / batch_size) * batch_size


class EpochShardSampler(ds.Sampler):
    """Per-epoch shuffled (or ordered) shard of ``range(num_items)``, yielded as ``epoch * num_items + index``.

    Each ``__iter__`` call is one epoch, counted from ``start_epoch``. The order is a
    permutation seeded by (seed, epoch), identical on every rank; it is wrapped
    around to a multiple of ``num_shards`` so every shard has ceil(N / num_shards) items.
    ``skip`` leaves out the first items of every epoch's shard: a sampler for the rest of an
    epoch that a stopped run had begun (MindSpore fixes the item count per pass, so that
    rest is a pipeline of its own).

    With ``pairs`` each item is a pair (a, b) of indices from two independent permutations,
    yielded as ``(epoch * num_items + a) * num_items + b`` (see PairTrainSource).
    """

    def __init__(self, num_items, num_shards=1, shard_id=0, shuffle=True, seed=0, start_epoch=0, pairs=False,
                 skip=0):
        self.num_items = num_items
        self.pairs = pairs
        self.num_shards = num_shards
        self.shard_id = shard_id
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = start_epoch
        self.skip = int(skip)
        super().__init__()

    def __len__(self):
        return math.ceil(self.num_items / self.num_shards) - self.skip

    def epoch_indices(self, epoch, stream=0):
        """This shard's indices of ``epoch``; ``stream`` 1 is the second, independent permutation of pairs."""
        words = [self.seed, epoch] + ([stream] if stream else [])
        if self.shuffle:
            order = np.random.default_rng(words).permutation(self.num_items)
        else:  # unshuffled pairs take image i with image i + N/2, never with itself
            order = np.roll(np.arange(self.num_items), -(self.num_items // 2) if stream else 0)
        order = np.resize(order, math.ceil(self.num_items / self.num_shards) * self.num_shards)  # wraps around
        return order[self.shard_id::self.num_shards]

    def __iter__(self):
        epoch = self.epoch
        self.epoch += 1
        offset = epoch * self.num_items
        first = self.epoch_indices(epoch)[self.skip:]
        if not self.pairs:
            return iter([offset + int(i) for i in first])
        second = self.epoch_indices(epoch, stream=1)[self.skip:]
        return iter([(offset + int(a)) * self.num_items + int(b) for a, b in zip(first, second)])


class MixupBatch:
    """``per_batch_map`` of the training batch: stacks the batch and applies ``mixup``, seeded per batch."""

    def __init__(self, mixup, seed=0, start_epoch=0, skip_batches=0):
        self.mixup = mixup
        self.seed = seed
        self.start_epoch = start_epoch
        self.skip_batches = skip_batches  # batches of each epoch left out (see EpochShardSampler's skip)

    def __call__(self, images, labels, batch_info):
        x = np.stack(images).astype(np.float32, copy=False)
        y = np.asarray(labels, dtype=np.int64)
        epoch = self.start_epoch + batch_info.get_epoch_num()
        # the 2**31 word keeps mixup draws apart from the per-sample draws of the same epoch
        with _seeded_random_state(self.seed, epoch, self.skip_batches + batch_info.get_batch_num(), 2 ** 31):
            x, targets = self.mixup(x, y)
        x = np.asarray(x, dtype=np.float32)
        targets = np.asarray(targets, dtype=np.float32)
        return list(x), list(targets)


class MixPairsBatch:
    """``per_batch_map`` of DeepMind's mix scheme: (images, mix_images, labels, mix_labels) -> (images, targets),
    seeded per batch like MixupBatch."""

    def __init__(self, mix, seed=0, start_epoch=0, skip_batches=0):
        self.mix = mix
        self.seed = seed
        self.start_epoch = start_epoch
        self.skip_batches = skip_batches  # batches of each epoch left out (see EpochShardSampler's skip)

    def __call__(self, images, mix_images, labels, mix_labels, batch_info):
        epoch = self.start_epoch + batch_info.get_epoch_num()
        with _seeded_random_state(self.seed, epoch, self.skip_batches + batch_info.get_batch_num(), 2 ** 31):
            x, targets = self.mix(np.stack(images), np.stack(mix_images), np.asarray(labels), np.asarray(mix_labels))
        return list(np.asarray(x, dtype=np.float32)), list(np.asarray(targets, dtype=np.float32))


def create_mixup(mix_up=0.0, cutmix=0.0, cutmix_minmax=None, mixup_prob=1.0, switch_prob=0.5,
                 mixup_mode="batch", label_smoothing=0.1, num_classes=1000, mix_scheme="timm", augment=None):
    """The batch-level Mixup/CutMix callable for ``create_dataset(mixup=...)``, or None when both are off.

    ``mix_scheme`` 'deepmind' gives DeepMindMixupCutMix (Mixup alpha ``mix_up``, CutMix on when ``cutmix``
    > 0; mixup_prob, switch_prob, mixup_mode and cutmix_minmax unused) with ``augment`` (e.g. RandAugment)
    applied after mixing; the training transform must then stop before normalization.
    """
    if mix_up <= 0 and cutmix <= 0 and cutmix_minmax is None:
        return None
    if mix_scheme == "deepmind":
        from .augment import DeepMindMixupCutMix

        return DeepMindMixupCutMix(mixup_alpha=mix_up, cutmix=cutmix > 0, num_classes=num_classes,
                                   label_smoothing=label_smoothing, augment=augment)
    if mix_scheme != "timm":
        raise ValueError(f"unknown mix_scheme {mix_scheme!r}, use 'timm' or 'deepmind'")
    from .augment import Mixup

    return Mixup(mixup_alpha=mix_up, cutmix_alpha=cutmix, cutmix_minmax=cutmix_minmax, prob=mixup_prob,
                 switch_prob=switch_prob, mode=mixup_mode, label_smoothing=label_smoothing,
                 num_classes=num_classes)


def create_dataset(data_path, split, is_training, batch_size, transform, num_parallel_workers=2, shuffle=None,
                   num_shards=None, shard_id=None, drop_remainder=None, seed=0, mixup=None, strict_data=False,
                   start_epoch=0, bad_file_log=None, python_multiprocessing=DEFAULT_PYTHON_MULTIPROCESSING,
                   skip_batches=0, class_names=None):
    """Batched mindspore.dataset pipeline over ``data_path/split`` (columns: see the module docstring).

    Args:
        data_path: dataset root holding ``split/<class>/<image>``, or a directory of MindRecord files
            written by src.data.to_mindrecord (``<split>.mindrecord*``: read with the same transforms).
        split: split folder name, e.g. 'train' or 'val'.
        is_training: training pipeline (shuffled, drops the last partial batch, optional mixup)
            or evaluation pipeline (file order, never drops or repeats an image, ``valid`` column).
        batch_size: images per batch on this rank.
        transform: ``(PIL RGB image) -> float32 CHW array``, e.g. create_train_transform(...).
        num_parallel_workers: workers that load and transform images (1 = in the pipeline thread).
        shuffle: reshuffle every epoch; default ``is_training``.
        num_shards, shard_id: this rank's shard when distributed (both or neither).
        drop_remainder: training only (default True); evaluation never drops.
        seed: seed of the shuffle order and of the per-sample / per-batch random draws.
        mixup: batch-level callable ``(x_nchw, int_labels) -> (x, soft_targets)`` (see create_mixup);
            training only.
        strict_data: fail on the first unreadable file instead of skipping it.
        start_epoch: epoch the pipeline's first pass counts as (resume), for the shuffle and the draws.
        bad_file_log: text file that workers append unreadable paths to (see read_bad_file_log).
        python_multiprocessing: process workers (default, measured faster) or threads.
        skip_batches: training only: leave out the first batches of each epoch (the rest of an epoch
            that a stopped run had begun; image folders only).
        class_names: the model's classes in label order (from its checkpoint): a folder's label is
            its position there (the folders may be a subset); default: the sorted folder names.
    """
    if (num_shards is None) != (shard_id is None):
        raise ValueError("num_shards and shard_id must be given together")
    num_shards, shard_id = (1, 0) if num_shards is None else (int(num_shards), int(shard_id))
    if not 0 <= shard_id < num_shards:
        raise ValueError(f"shard_id {shard_id} is not in [0, {num_shards})")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if not is_training and drop_remainder:
        raise ValueError("evaluation never drops images: drop_remainder must be False/None")
    if not is_training and mixup is not None:
        raise ValueError("mixup applies to training only")
    workers = max(1, int(num_parallel_workers))
    if is_mindrecord_split(data_path, split):
        if skip_batches:
            raise DatasetError(f"{data_path}: a MindRecord split cannot resume in the middle of an epoch")
        stored = read_classes(data_path, split)
        if class_names is not None and list(stored) != list(class_names):
            raise DatasetError(f"{os.path.join(data_path, split)}: its classes ({len(stored)}) are not the model's "
                               f"({len(class_names)}) in the same order; convert the image folder again")
        if is_training and getattr(mixup, "mixes_pairs", False):
            raise DatasetError(f"{data_path}: MindRecord training data does not support mix_scheme deepmind "
                               f"(image pairs); use the image folder")
        return _create_mindrecord_dataset(mindrecord_files(data_path, split), is_training, batch_size, transform,
                                          workers, shuffle, num_shards, shard_id, drop_remainder, mixup, seed,
                                          start_epoch, python_multiprocessing)
    split_dir = os.path.join(data_path, split)
    samples, _ = scan_image_folder(split_dir, class_names)

    def load_in_workers(source, columns, **sampling):
        return _load_in_workers(source, columns, workers, python_multiprocessing, **sampling)

    if not is_training:
        source = EvalSource(samples, transform, num_shards, shard_id, strict_data, bad_file_log, batch_size)
        dataset = load_in_workers(source, ["image", "label", "valid"], shuffle=False)
        return dataset.batch(batch_size, drop_remainder=False)

    shuffle = True if shuffle is None else shuffle
    drop_remainder = True if drop_remainder is None else drop_remainder
    pairs = getattr(mixup, "mixes_pairs", False)
    sampler = EpochShardSampler(len(samples), num_shards, shard_id, shuffle, seed, start_epoch, pairs=pairs,
                                skip=skip_batches * batch_size)
    if drop_remainder and len(sampler) < batch_size:
        raise DatasetError(f"{split_dir}: {len(sampler)} images per shard, fewer than one batch of {batch_size}")
    if pairs:
        columns = ["image", "mix_image", "label", "mix_label"]
        source = PairTrainSource(samples, transform, seed, strict_data, bad_file_log)
        dataset = load_in_workers(source, columns, sampler=sampler)
        # the batch step augments every image: worker processes run it in parallel, threads one at a time
        return dataset.batch(batch_size, drop_remainder=drop_remainder, num_parallel_workers=workers,
                             python_multiprocessing=python_multiprocessing and workers > 1,
                             input_columns=columns, output_columns=["image", "label"],
                             per_batch_map=MixPairsBatch(mixup, seed, start_epoch, skip_batches))
    source = TrainSource(samples, transform, seed, strict_data, bad_file_log)
    dataset = load_in_workers(source, ["image", "label"], sampler=sampler)
    if mixup is None:
        return dataset.batch(batch_size, drop_remainder=drop_remainder)
    # one batch worker: the per-batch seeding of the global random state must not interleave
    return dataset.batch(batch_size, drop_remainder=drop_remainder, num_parallel_workers=1,
                         input_columns=["image", "label"], output_columns=["image", "label"],
                         per_batch_map=MixupBatch(mixup, seed, start_epoch, skip_batches))


def _load_in_workers(source, columns, workers, python_multiprocessing, **sampling):
    """GeneratorDataset of the sampler's keys, mapped through `source` in `workers` workers (see the module doc)."""
    keys = ds.GeneratorDataset(_Keys(len(source)), ["key"], **sampling)
    return keys.map(source, input_columns=["key"], output_columns=columns, num_parallel_workers=workers,
                    python_multiprocessing=python_multiprocessing and workers > 1)


def create_file_dataset(paths, batch_size, transform, num_parallel_workers=2, strict_data=False, bad_file_log=None,
                        python_multiprocessing=DEFAULT_PYTHON_MULTIPROCESSING):
    """The evaluation pipeline over a list of image files (predict.py): columns image, index, valid.

    `index` is the row's position in `paths`; `valid` is 0 for an unreadable file (skipped and
    listed in bad_file_log, or an error with strict_data, as in evaluation).
    """
    if not paths:
        raise DatasetError("no images to read")
    source = EvalSource([(path, i) for i, path in enumerate(paths)], transform, strict_data=strict_data,
                        bad_file_log=bad_file_log)
    dataset = _load_in_workers(source, ["image", "index", "valid"], max(1, int(num_parallel_workers)),
                               python_multiprocessing, shuffle=False)
    return dataset.batch(batch_size, drop_remainder=False)


class MindRecordDecode:
    """``map`` of a MindRecord split: (encoded bytes, label, index) -> transformed image, label[, valid].

    ``index`` is the row's position in the converted folder (-1 for evaluation padding rows,
    which get valid = 0). Training augmentations draw from the worker's random state (the
    shuffle is MindDataset's, seeded by mindspore.dataset's seed), not per (seed, epoch, index).
    """

    def __init__(self, transform, with_valid):
        self.transform = transform
        self.with_valid = with_valid

    def __call__(self, image, label, index):
        import io

        try:
            decoded = load_image(io.BytesIO(np.asarray(image).tobytes()))
        except UnreadableImageError as err:
            raise DatasetError(f"unreadable image in MindRecord row {int(index)}: {err}") from err
        out = (self.transform(decoded), np.int32(label))
        return out + (np.int32(int(index) >= 0),) if self.with_valid else out


def _create_mindrecord_dataset(files, is_training, batch_size, transform, workers, shuffle, num_shards, shard_id,
                               drop_remainder, mixup, seed, start_epoch, python_multiprocessing):
    """create_dataset over MindRecord files (see src/data/to_mindrecord.py): same columns, same sharding contract."""
    columns = ["image", "label", "index"]
    total = ds.MindDataset(files, columns_list=columns, shuffle=False).get_dataset_size()
    sharding = dict(num_shards=num_shards, shard_id=shard_id) if num_shards > 1 else {}
    multiprocessing = python_multiprocessing and workers > 1
    if not is_training:
        padding = num_shards * _padded_rows(total, num_shards, batch_size) - total
        if padding:
            first = next(ds.MindDataset(files, columns_list=columns, shuffle=False).create_dict_iterator(
                num_epochs=1, output_numpy=True))
            sharding.update(num_shards=num_shards, shard_id=shard_id, num_padded=padding,
                            padded_sample={"image": first["image"].tobytes(), "label": 0, "index": -1})
        dataset = ds.MindDataset(files, columns_list=columns, shuffle=False, **sharding)
        dataset = dataset.map(MindRecordDecode(transform, with_valid=True), input_columns=columns,
                              output_columns=["image", "label", "valid"], num_parallel_workers=workers,
                              python_multiprocessing=multiprocessing)
        return dataset.batch(batch_size, drop_remainder=False)
    shuffle = True if shuffle is None else shuffle
    drop_remainder = True if drop_remainder is None else drop_remainder
    if drop_remainder and math.ceil(total / num_shards) < batch_size:
        raise DatasetError(f"{files[0]}: {math.ceil(total / num_shards)} images per shard, fewer than one batch "
                           f"of {batch_size}")
    dataset = ds.MindDataset(files, columns_list=columns, shuffle=shuffle, **sharding)
    dataset = dataset.map(MindRecordDecode(transform, with_valid=False), input_columns=columns,
                          output_columns=["image", "label"], num_parallel_workers=workers,
                          python_multiprocessing=multiprocessing)
    if mixup is None:
        return dataset.batch(batch_size, drop_remainder=drop_remainder)
    return dataset.batch(batch_size, drop_remainder=drop_remainder, num_parallel_workers=1,
                         input_columns=["image", "label"], output_columns=["image", "label"],
                         per_batch_map=MixupBatch(mixup, seed, start_epoch))
