"""The one loader: rows of a source (sources.py: image folder or MindRecord) -> mapped, batched, mixed.

One image travels: the source's dataset yields a row (a sampler's key, or a MindRecord row)
-> ``map`` reads it into a decoded image (the source's ``read``) and applies the Python
transform with the sample's own random generator, in ``num_parallel_workers`` worker
processes -> ``batch`` -> (training) Mixup/CutMix per batch. Why the work runs in ``map``
rather than in GeneratorDataset's own workers: see the measurements below. With DeepMind's mix
scheme (a mixup whose ``mixes_pairs`` is true, src/data/augment/deepmind_mix.py) each row is an
image pair, drawn from two independent shuffles, and the batch step mixes, augments and normalizes.

Columns:
    training:   image float32 (B, 3, H, W); label int32 (B,), or float32 (B, num_classes)
                soft targets when ``mixup`` is given (label smoothing then lives in them).
    evaluation: image float32 (B, 3, H, W); label int32 (B,); valid int32 (B,).
                ``valid`` is 0 for padding rows and for unreadable files, 1 otherwise:
                a metric that counts only valid rows scores every readable image of the
                split exactly once, with or without sharding and whatever the batch size.
Sharding and unreadable files: see sources.py.

Randomness. Every training sample gets its own ``np.random.RandomState`` seeded from
(seed, epoch, index) (augment/random_state.py ``sample_rng``), passed to the transform's
``rng``; every Mixup/CutMix batch one seeded from (seed, epoch, batch, 2**31), the last word
keeping the two apart. No global random state is seeded or read, so a sample's augmentation is
a pure function of those words: the same with any number of worker processes or threads, in
any timing, different between epochs, and a run resumed at ``start_epoch`` (or in the middle
of an epoch, ``start_step``) redraws what the uninterrupted run drew. The order of the rows
is the source's (a folder's: seeded by (seed, epoch); a MindRecord's: MindDataset's shuffle).

Errors: with ``strict_data`` an unreadable image fails the pipeline; MindSpore wraps the
worker's error in a RuntimeError, and ``pipeline_data_error`` recovers the one-line message.
"""
import contextlib
import os
import re

import numpy as np

from .augment.random_state import call_step, sample_rng, takes_rng
from .folder import DatasetError, IMG_EXTENSIONS, check_dataset_layout, scan_image_folder  # noqa: F401 (re-export)
from .folder import is_mindrecord_split, mindrecord_files, read_classes
from .sources import FolderSource, MindRecordSource, read_bad_file_log  # noqa: F401 (re-export)

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
# Processes win and are the default (threads give the same samples, slower: the GIL).
DEFAULT_PYTHON_MULTIPROCESSING = True
# Mixup/CutMix draws per batch from (seed, epoch, batch, MIX_STREAM): apart from the per-sample draws.
MIX_STREAM = 2 ** 31


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


class LoadAndTransform:
    """``map`` of the loader: a source's row -> transformed image(s), label(s)[, valid].

    Each sample's image goes through ``transform`` with a generator seeded from (seed, *words)
    when ``seed`` is not None (training); evaluation draws nothing and builds none.
    """

    def __init__(self, read, transform, seed=None, with_valid=False):
        self.read = read
        self.transform = transform
        self.seed = seed
        self.with_valid = with_valid
        self.random = seed is not None and takes_rng(transform)

    def _transform(self, sample):
        rng = sample_rng(self.seed, *sample.words) if self.random else None
        return call_step(self.transform, sample.image, rng, self.random)

    def __call__(self, *row):
        samples = self.read(*row)
        out = [self._transform(s) for s in samples] + [np.int32(s.label) for s in samples]
        if self.with_valid:
            out.append(np.int32(all(s.valid for s in samples)))
        return tuple(out)


class MixBatch:
    """``per_batch_map`` of the training batch: stacks it and applies ``mixup`` with the batch's own generator.

    (images, labels) -> (images, soft targets). ``start_step``: the batch the pipeline's first pass begins at
    (create_dataset); MindSpore numbers that pass's batches from 0 (measured, fast recovery), so they are
    counted from ``start_step`` and draw what the uninterrupted epoch's batches drew.
    """

    def __init__(self, mixup, seed=0, start_epoch=0, start_step=0):
        self.mixup = mixup
        self.seed = seed
        self.start_epoch = start_epoch
        self.start_step = start_step
        self.random = takes_rng(mixup)

    def __call__(self, images, labels, batch_info):  # MindSpore checks the arguments against the columns
        return self.mix(batch_info, np.stack(images).astype(np.float32, copy=False), np.asarray(labels, np.int64))

    def mix(self, batch_info, *batch):
        passes = batch_info.get_epoch_num()
        step = batch_info.get_batch_num() + (0 if passes else self.start_step)
        rng = sample_rng(self.seed, self.start_epoch + passes, step, MIX_STREAM)
        x, targets = self.mixup(*batch, rng=rng) if self.random else self.mixup(*batch)
        return list(np.asarray(x, dtype=np.float32)), list(np.asarray(targets, dtype=np.float32))


class MixPairsBatch(MixBatch):
    """MixBatch of DeepMind's mix scheme: (images, mix_images, labels, mix_labels) -> (images, targets)."""

    def __call__(self, images, mix_images, labels, mix_labels, batch_info):
        return self.mix(batch_info, np.stack(images), np.stack(mix_images), np.asarray(labels), np.asarray(mix_labels))


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
                   start_step=0, class_names=None, listing=None):
    """Batched mindspore.dataset pipeline over ``data_path/split`` (columns: see the module docstring).

    Args:
        data_path: dataset root holding ``split/<class>/<image>``, or a directory of MindRecord files
            written by src.data.to_mindrecord (``<split>.mindrecord*``: read with the same transforms).
        split: split folder name, e.g. 'train' or 'val'.
        is_training: training pipeline (shuffled, drops the last partial batch, optional mixup)
            or evaluation pipeline (file order, never drops or repeats an image, ``valid`` column).
        batch_size: images per batch on this rank.
        transform: ``(PIL RGB image[, rng]) -> float32 CHW array``, e.g. create_train_transform(...).
        num_parallel_workers: workers that load and transform images (1 = in the pipeline thread).
        shuffle: reshuffle every epoch; default ``is_training``.
        num_shards, shard_id: this rank's shard when distributed (both or neither).
        drop_remainder: training only (default True); evaluation never drops.
        seed: seed of the shuffle order (image folders) and of the per-sample / per-batch random draws.
        mixup: batch-level callable ``(x_nchw, int_labels[, rng]) -> (x, soft_targets)`` (see create_mixup);
            training only.
        strict_data: fail on the first unreadable file instead of skipping it.
        start_epoch: epoch the pipeline's first pass counts as (resume), for the shuffle and the draws.
        bad_file_log: text file that workers append unreadable paths to (see read_bad_file_log).
        python_multiprocessing: process workers (default, measured faster) or threads.
        start_step: training only: the first pass begins at this batch of epoch ``start_epoch`` (a run resumed
            in the middle of an epoch), the next passes are whole epochs (image folders only; see _start_at).
        class_names: the model's classes in label order (from its checkpoint): a folder's label is
            its position there (the folders may be a subset); default: the sorted folder names.
        listing: the split as src.data.folder.list_dataset listed it (a SplitListing, labelled with the same
            class_names): its images are not listed again.
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
    source = _open_source(data_path, split, class_names, strict_data, bad_file_log, listing)
    loader = dict(workers=max(1, int(num_parallel_workers)), python_multiprocessing=python_multiprocessing)
    if not is_training:
        dataset = create_loader(source.eval_rows(num_shards, shard_id, batch_size), transform, batch_size, **loader)
        # this rank's images, padding rows left out (rank r scores images r, r + S, ...): a progress bar's total
        dataset.shard_images = len(range(shard_id, len(source), num_shards))
        return dataset
    shuffle = True if shuffle is None else shuffle
    pairs = getattr(mixup, "mixes_pairs", False)
    if isinstance(source, MindRecordSource):
        if start_step:
            raise DatasetError(f"{data_path}: a MindRecord split cannot resume in the middle of an epoch")
        if pairs:
            raise DatasetError(f"{data_path}: MindRecord training data does not support mix_scheme deepmind "
                               f"(image pairs); use the image folder")
        rows = source.train_rows(num_shards, shard_id, shuffle, start_epoch)
    else:
        rows = source.train_rows(num_shards, shard_id, shuffle, seed, start_epoch, pairs)
    dataset = create_loader(rows, transform, batch_size, seed=seed, mixup=mixup, start_epoch=start_epoch,
                            start_step=start_step, drop_remainder=True if drop_remainder is None else drop_remainder,
                            **loader)
    if start_step:
        _start_at(dataset, start_step)
    return dataset


def _start_at(dataset, step):
    """The pipeline's first pass begins at batch ``step``: one pipeline resumes in the middle of an epoch.

    Dataset.set_init_step with MindSpore's fast recovery (its default, set here because MixBatch counts the
    batches as it numbers them): the skip goes down to the sampler, so the batches before are neither read nor
    decoded. Measured on MindSpore 2.10, 24 images in batches of 4, init step 2: the 4 remaining batches read
    16 keys and decode 16 images, each the uninterrupted epoch's; the next pass is a whole epoch, and
    get_dataset_size() stays 6. Without fast recovery the 2 skipped batches are decoded, transformed and
    mixed too (24 decodes), then dropped.
    """
    import mindspore.dataset as mds

    mds.config.set_fast_recovery(True)
    dataset.set_init_step(step)


def _open_source(data_path, split, class_names, strict_data, bad_file_log, listing=None):
    """The split's source: its MindRecord files when converted (classes checked against ``class_names``),
    else its folder (the images of ``listing`` when given, else listed now)."""
    if is_mindrecord_split(data_path, split):
        stored = read_classes(data_path, split)
        if class_names is not None and list(stored) != list(class_names):
            raise DatasetError(f"{os.path.join(data_path, split)}: its classes ({len(stored)}) are not the model's "
                               f"({len(class_names)}) in the same order; convert the image folder again")
        return MindRecordSource(mindrecord_files(data_path, split))
    split_dir = os.path.join(data_path, split)
    samples = listing.samples if listing is not None else scan_image_folder(split_dir, class_names)[0]
    return FolderSource(samples, split_dir, strict_data, bad_file_log)


def create_loader(rows, transform, batch_size, seed=None, mixup=None, start_epoch=0, start_step=0,
                  drop_remainder=False, workers=2, python_multiprocessing=DEFAULT_PYTHON_MULTIPROCESSING):
    """Map a source's ``rows`` (sources.Rows) through ``transform``, batch them and mix each batch.

    ``seed`` None: evaluation (columns image, label, valid; no random draws, never drops); else training
    (image, label), each sample transformed with its own generator and each batch mixed by ``mixup``.
    """
    training = seed is not None
    pairs = getattr(mixup, "mixes_pairs", False)
    columns = ["image", "mix_image", "label", "mix_label"] if pairs else ["image", "label"]
    if not training:
        columns.append("valid")
    if drop_remainder and rows.size < batch_size:
        raise DatasetError(f"{rows.name}: {rows.size} images per shard, fewer than one batch of {batch_size}")
    multiprocessing = python_multiprocessing and workers > 1
    dataset = rows.dataset.map(LoadAndTransform(rows.read, transform, seed, with_valid=not training),
                               input_columns=rows.columns, output_columns=columns, num_parallel_workers=workers,
                               python_multiprocessing=multiprocessing)
    if mixup is None:
        return dataset.batch(batch_size, drop_remainder=drop_remainder)
    # pairs: the batch step augments every image, so it runs in the workers; Mixup alone is cheap
    return dataset.batch(batch_size, drop_remainder=drop_remainder, num_parallel_workers=workers if pairs else 1,
                         python_multiprocessing=multiprocessing and pairs, input_columns=columns,
                         output_columns=["image", "label"],
                         per_batch_map=(MixPairsBatch if pairs else MixBatch)(mixup, seed, start_epoch,
                                                                              start_step))


def create_file_dataset(paths, batch_size, transform, num_parallel_workers=2, strict_data=False, bad_file_log=None,
                        python_multiprocessing=DEFAULT_PYTHON_MULTIPROCESSING):
    """The evaluation pipeline over a list of image files (predict.py): columns image, index, valid.

    `index` is the row's position in `paths`; `valid` is 0 for an unreadable file (skipped and
    listed in bad_file_log, or an error with strict_data, as in evaluation).
    """
    if not paths:
        raise DatasetError("no images to read")
    source = FolderSource([(path, i) for i, path in enumerate(paths)], paths[0], strict_data, bad_file_log)
    dataset = create_loader(source.eval_rows(), transform, batch_size, workers=max(1, int(num_parallel_workers)),
                            python_multiprocessing=python_multiprocessing)
    return dataset.rename(["label"], ["index"])
