"""DeepMind's recipe through the real pipeline (src/builders.py build_train_dataset, src/data/dataset.py):
image pairs from two shuffles, per-example Mixup/CutMix, RandAugment after mixing, soft targets."""
import os
import types

import numpy as np
import pytest
from PIL import Image

from src.config import load_config
from src.data.sources import EpochShardSampler

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEEPMIND_F0 = os.path.join(ROOT, "src", "configs", "deepmind", "dm_nfnet_f0.yaml")
SINGLE_PROCESS = types.SimpleNamespace(distributed=False, group_size=1, rank=0)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("pairs")
    rng = np.random.RandomState(0)
    for cls in range(2):
        os.makedirs(root / "train" / f"c{cls}")
        for i in range(8):
            pixels = rng.randint(0, 256, size=(30, 36, 3)).astype(np.uint8)
            Image.fromarray(pixels).save(root / "train" / f"c{cls}" / f"{i}.png")
    return str(root)


def _config(folder, **overrides):
    values = dict(data_path=folder, num_classes=2, input_size=64, test_input_size=64, batch_size=4,
                  num_parallel_workers=2, device_target="CPU", eval_while_train=False)
    values.update(overrides)
    return load_config(DEEPMIND_F0, overrides=values)


def _epoch(dataset):
    rows = list(dataset.create_tuple_iterator(num_epochs=1, output_numpy=True))
    return np.concatenate([r[0] for r in rows]), np.concatenate([r[1] for r in rows]), len(rows)


def test_pair_sampler_draws_two_independent_permutations_per_epoch():
    n = 50
    sampler = EpochShardSampler(n, pairs=True, seed=3)
    for epoch in range(2):
        keys = np.array(list(iter(sampler)))
        rest, b = np.divmod(keys, n)
        epochs, a = np.divmod(rest, n)
        assert set(epochs) == {epoch}
        assert sorted(a) == sorted(b) == list(range(n))
        assert (a != b).mean() > 0.9
        np.testing.assert_array_equal(a, EpochShardSampler(n, seed=3).epoch_indices(epoch))
    unshuffled = np.array(list(iter(EpochShardSampler(6, shuffle=False, pairs=True))))
    assert np.divmod(unshuffled, 6)[1].tolist() == [3, 4, 5, 0, 1, 2]  # never an image with itself


@pytest.mark.timeout(300)
def test_deepmind_recipe_yields_mixed_soft_targets_reproducibly_with_any_worker_count(folder):
    from src import builders
    from src.data.augment import DeepMindMixupCutMix, DeepMindRandAugment

    cfg = _config(folder)
    dataset, mix = builders.build_train_dataset(cfg, SINGLE_PROCESS)
    assert isinstance(mix, DeepMindMixupCutMix) and isinstance(mix.augment, DeepMindRandAugment)
    assert (mix.augment.num_layers, mix.augment.magnitude, mix.mixup_alpha) == (4, 5, 0.2)
    images, targets, steps = _epoch(dataset)
    assert steps == 4  # 16 pairs of batch 4: as many steps as images / batch
    assert images.shape == (16, 3, 64, 64) and images.dtype == np.float32
    assert targets.shape == (16, 2) and targets.dtype == np.float32
    np.testing.assert_allclose(targets.sum(axis=1), 1.0, atol=1e-6)
    assert targets.min() >= 0.05 - 1e-6  # label smoothing 0.1 over 2 classes
    # DeepMind's normalization of 0..255 values: (x - 0.485*255) / (0.229*255) for red
    assert images[:, 0].min() >= (0 - 0.485 * 255) / (0.229 * 255) - 1e-5
    assert images[:, 0].max() <= (255 - 0.485 * 255) / (0.229 * 255) + 1e-5
    again, again_targets, _ = _epoch(builders.build_train_dataset(cfg.replace(num_parallel_workers=1),
                                                                  SINGLE_PROCESS)[0])
    np.testing.assert_array_equal(images, again)
    np.testing.assert_array_equal(targets, again_targets)


@pytest.mark.timeout(300)
def test_deepmind_recipe_without_mixing_augments_each_image_and_keeps_int_labels(folder):
    from src import builders

    dataset, mix = builders.build_train_dataset(_config(folder, mix_up=0.0, cutmix=0.0), SINGLE_PROCESS)
    images, labels, steps = _epoch(dataset)
    assert mix is None and steps == 4
    assert images.shape == (16, 3, 64, 64) and labels.dtype == np.int32
    assert sorted(labels.tolist()) == [0] * 8 + [1] * 8
