"""Where the rows come from: an image folder, or its MindRecord conversion (src/data/to_mindrecord.py).

A source orders, shuffles and shards the rows of a split (MindCV's create_dataset) and reads
one row into samples; the loader (dataset.py) maps, batches and mixes them (create_loader).
Both sources give the loader the same thing:

    source.train_rows(...) / source.eval_rows(...) -> Rows(dataset, columns, read, size, name)

``dataset`` is a mindspore.dataset yielding this rank's rows (``columns``), ``size`` rows a
pass; ``read(*row)`` returns a list of Sample(image, label, valid, words): one, or two for an
image pair (DeepMind's mix scheme). ``image`` is a decoded RGB PIL image, ``valid`` False for
an evaluation padding row or an unreadable file, and ``words`` (epoch, index[, stream])
identify the sample's random draws: the loader seeds the sample's generator from
(seed, *words). ``index`` is the image's position in the folder's order (class, then path),
which a MindRecord row stores, so both sources draw the same augmentation for an image.

Sharding. Training: every rank draws the same per-epoch permutation (from ``seed`` and the
epoch) and takes every ``num_shards``-th entry starting at ``shard_id``; the permutation is
wrapped around so all ranks run the same number of steps (MindDataset's own shuffle and
shards for MindRecord: also ceil(N / S) rows each). Evaluation: rank r takes images r, r + S,
r + 2S, ... in file order, and every shard is padded with ``valid = 0`` rows to whole batches
of ceil(N / S) rows or more: all batches have one shape, so the evaluation graph is compiled
once (a last partial batch recompiled it: 7 s of a 20 s nano evaluation on 2 cores, measured).

Unreadable files in a folder are found when loaded (no up-front pass over 1.28M files). With
``strict_data`` the pipeline fails on the first one with an UnreadableImageError naming it.
Otherwise the file is reported once per worker (a log warning, and a line appended to
``bad_file_log`` when given: ``read_bad_file_log``); a training sample is replaced by the next
readable one in file order, an evaluation row is kept with ``valid = 0`` (a blank stand-in image). The MindRecord
converter leaves such files out.
"""
import io
import logging
import math
import os
import re
from typing import NamedTuple

import numpy as np
import mindspore.dataset as ds
from PIL import Image

from .folder import DatasetError, escape_name, unescape_name
from .transforms import UnreadableImageError, load_image

_logger = logging.getLogger(__name__)

# Consecutive unreadable files tolerated while looking for a substitute sample.
MAX_CONSECUTIVE_BAD = 32
MINDRECORD_COLUMNS = ["image", "label", "index"]


class Sample(NamedTuple):
    image: object  # PIL RGB image
    label: int
    valid: bool
    words: tuple  # seeds the sample's random draws, with the run's seed


class Rows(NamedTuple):
    dataset: object  # mindspore.dataset.Dataset of this rank's rows
    columns: list
    read: object  # read(*row) -> [Sample, ...]
    size: int  # rows per pass
    name: str  # for messages


def read_bad_file_log(path):
    """Sorted unique paths written to a ``bad_file_log`` by any worker (empty when none / no file)."""
    if not path or not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return sorted({unescape_name(line.split("\t", 1)[0]) for line in f if line.strip()})


def padded_rows(total, num_shards, batch_size):
    """Rows per evaluation shard: ceil(total / num_shards), rounded up to whole batches."""
    return math.ceil(math.ceil(total / num_shards) / batch_size) * batch_size


class EpochShardSampler(ds.Sampler):
    """Per-epoch shuffled (or ordered) shard of ``range(num_items)``, yielded as ``epoch * num_items + index``.

    Each ``__iter__`` call is one epoch, counted from ``start_epoch``. The order is a
    permutation seeded by (seed, epoch), identical on every rank; it is wrapped
    around to a multiple of ``num_shards`` so every shard has ceil(N / num_shards) items.

    With ``pairs`` each item is a pair (a, b) of indices from two independent permutations,
    yielded as ``(epoch * num_items + a) * num_items + b``.
    """

    def __init__(self, num_items, num_shards=1, shard_id=0, shuffle=True, seed=0, start_epoch=0, pairs=False):
        self.num_items = num_items
        self.pairs = pairs
        self.num_shards = num_shards
        self.shard_id = shard_id
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = start_epoch
        super().__init__()

    def __len__(self):
        return math.ceil(self.num_items / self.num_shards)

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
        first = self.epoch_indices(epoch)
        if not self.pairs:
            return iter([offset + int(i) for i in first])
        second = self.epoch_indices(epoch, stream=1)
        return iter([(offset + int(a)) * self.num_items + int(b) for a, b in zip(first, second)])


class _Keys:
    """What GeneratorDataset itself yields: the sampler's key, as a one-column row."""

    def __init__(self, length):
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, key):
        return (np.int64(key),)


def _keys(length, sampler=None, **sampling):
    return ds.GeneratorDataset(_Keys(length), ["key"], sampler=sampler, **sampling)


class FolderSource:
    """The images of a folder split, ``samples`` = [(path, label), ...] in file order (scan_image_folder)."""

    def __init__(self, samples, name, strict_data=False, bad_file_log=None):
        self.samples = list(samples)
        self.name = name
        self.strict_data = strict_data
        self.bad_file_log = bad_file_log
        self._reported = set()  # per process: report each bad file once

    def __len__(self):
        return len(self.samples)

    def _report(self, err):
        if err.path in self._reported:
            return
        self._reported.add(err.path)
        _logger.warning("skipping %s", err)
        if self.bad_file_log:
            with open(self.bad_file_log, "a", encoding="utf-8") as f:  # short O_APPEND lines: atomic
                reason = str(err).replace(str(err.path), escape_name(err.path)).splitlines()[0]
                f.write(f"{escape_name(err.path)}\t{reason}\n")

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

    def load_own(self, index):
        """``(image, label, readable)`` of sample ``index`` itself: an unreadable file gives a blank stand-in
        (reported as load does), so that an evaluation row never depends on other files (40 unreadable
        files before a good one are 40 skipped rows, not MAX_CONSECUTIVE_BAD failing)."""
        path, label = self.samples[index]
        try:
            return load_image(path), label, True
        except UnreadableImageError as err:
            if self.strict_data:
                raise
            self._report(err)
            return Image.new("RGB", (8, 8)), label, False

    def _sample(self, epoch, index, *stream):
        image, label, _ = self.load(index)
        return Sample(image, label, True, (epoch, index) + stream)

    def read_train(self, key):
        """Key ``epoch * N + index`` (EpochShardSampler) -> [its sample]."""
        return [self._sample(*divmod(int(key), len(self.samples)))]

    def read_pair(self, key):
        """Key ``(epoch * N + a) * N + b`` -> [sample a, sample b]; b draws from (epoch, b, 1)."""
        n = len(self.samples)
        rest, b = divmod(int(key), n)
        epoch, a = divmod(rest, n)
        return [self._sample(epoch, a), self._sample(epoch, b, 1)]

    def train_rows(self, num_shards=1, shard_id=0, shuffle=True, seed=0, start_epoch=0, pairs=False):
        sampler = EpochShardSampler(len(self.samples), num_shards, shard_id, shuffle, seed, start_epoch, pairs=pairs)
        return Rows(_keys(len(self.samples), sampler), ["key"], self.read_pair if pairs else self.read_train,
                    len(sampler), self.name)

    def eval_rows(self, num_shards=1, shard_id=0, batch_size=1):
        """Row i is image ``shard_id + i * num_shards``; rows past the end carry a stand-in image, valid 0."""
        size = padded_rows(len(self.samples), num_shards, batch_size)
        read = _EvalRead(self, num_shards, shard_id)
        return Rows(_keys(size, shuffle=False), ["key"], read, size, self.name)


class _EvalRead:
    """``read`` of a folder's evaluation rows (picklable for worker processes)."""

    def __init__(self, source, num_shards, shard_id):
        self.source, self.num_shards, self.shard_id = source, num_shards, shard_id

    def __call__(self, row):
        index = self.shard_id + int(row) * self.num_shards
        image, label, readable = self.source.load_own(index % len(self.source))
        return [Sample(image, label, index < len(self.source) and readable, (index,))]


def _mindspore_error_line(err):
    """The '[ERROR] ...' line of a MindSpore dataset error (its first line when there is none)."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    found = [line[len("[ERROR]"):].strip() for line in lines if line.startswith("[ERROR]")]
    return (found or lines or [type(err).__name__])[0]


class MindRecordSource:
    """The rows of a converted split: ``files`` = its MindRecord files (folder.mindrecord_files)."""

    def __init__(self, files):
        self.files = list(files)
        self.name = self.files[0]
        self.total = self._count(self.files)

    @classmethod
    def _count(cls, files):
        """Rows of ``files``, reading their headers and .db indexes: a corrupt one is a DatasetError naming it
        (the sizes were checked before, folder.mindrecord_set)."""
        try:
            return ds.MindDataset(files, columns_list=MINDRECORD_COLUMNS, shuffle=False).get_dataset_size()
        except RuntimeError as err:
            if len(files) > 1:  # find the shard
                for path in files:
                    cls._count([path])
            culprit = files[0] + ".db" if f"{files[0]}.db" in str(err) else files[0]
            raise DatasetError(f"MindRecord file {culprit} cannot be read ({_mindspore_error_line(err)}): corrupt; "
                               f"convert the images again (python -m src.data.to_mindrecord ... --overwrite)") from None

    def __len__(self):
        return self.total

    def decode(self, image, index):
        try:
            return load_image(io.BytesIO(np.asarray(image).tobytes()))
        except UnreadableImageError as err:
            reason = re.sub(r"<_io\.BytesIO object at 0x[0-9a-f]+>", "the stored bytes", str(err.__cause__ or err))
            raise DatasetError(f"unreadable image in MindRecord row {int(index)} of {self.name} ({reason}): a "
                               f"corrupt shard; convert the images again (python -m src.data.to_mindrecord ... "
                               f"--overwrite)") from err

    def read_train(self, image, label, index, key):
        """(image bytes, label, index, key) -> [its sample]; the key's epoch seeds the draws with the index."""
        return [Sample(self.decode(image, index), int(label), True, (int(key) // self.shard_size, int(index)))]

    def read_eval(self, image, label, index):
        """Rows of index -1 are padding (valid 0)."""
        return [Sample(self.decode(image, index), int(label), int(index) >= 0, (int(index),))]

    def train_rows(self, num_shards=1, shard_id=0, shuffle=True, start_epoch=0):
        """MindDataset's shuffle (seeded by mindspore.dataset's seed) and shards, zipped with the epoch's key.

        The keys (``epoch * rows + i``) tell ``read_train`` the epoch, which a MindDataset row does not carry.
        """
        sharding = dict(num_shards=num_shards, shard_id=shard_id) if num_shards > 1 else {}
        records = ds.MindDataset(self.files, columns_list=MINDRECORD_COLUMNS, shuffle=shuffle, **sharding)
        self.shard_size = records.get_dataset_size()
        keys = _keys(self.shard_size, EpochShardSampler(self.shard_size, shuffle=False, start_epoch=start_epoch))
        return Rows(ds.zip((records, keys)), MINDRECORD_COLUMNS + ["key"], self.read_train, self.shard_size,
                    self.name)

    def eval_rows(self, num_shards=1, shard_id=0, batch_size=1):
        """File order; every shard padded with (first image, label 0, index -1) rows (MindDataset's num_padded)."""
        size = padded_rows(self.total, num_shards, batch_size)
        sharding = dict(num_shards=num_shards, shard_id=shard_id) if num_shards > 1 else {}
        padding = num_shards * size - self.total
        if padding:
            first = next(ds.MindDataset(self.files, columns_list=MINDRECORD_COLUMNS, shuffle=False)
                         .create_dict_iterator(num_epochs=1, output_numpy=True))
            sharding.update(num_shards=num_shards, shard_id=shard_id, num_padded=padding,
                            padded_sample={"image": first["image"].tobytes(), "label": 0, "index": -1})
        dataset = ds.MindDataset(self.files, columns_list=MINDRECORD_COLUMNS, shuffle=False, **sharding)
        return Rows(dataset, list(MINDRECORD_COLUMNS), self.read_eval, size, self.name)
