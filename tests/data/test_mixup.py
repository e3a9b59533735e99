"""Mixup / CutMix compared with timm 1.0.31's Mixup on the same NumPy draws."""
import numpy as np
import pytest

from src.data.augment import Mixup, cutmix_bbox_and_lam, mixup_target, rand_bbox

torch = pytest.importorskip("torch")
timm_mixup = pytest.importorskip("timm.data.mixup")

NUM_CLASSES = 10
# Measured: mixed images bit-identical to timm's; targets differ by at most 6e-8
# (one float32 ulp) because we mix them in float64 and timm in float32.
TOLERANCE = 1e-6

CONFIGS = {
    "mixup": dict(mixup_alpha=0.8, cutmix_alpha=0.0),
    "cutmix": dict(mixup_alpha=0.0, cutmix_alpha=1.0),
    "switch": dict(mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5),
    "minmax": dict(mixup_alpha=0.8, cutmix_minmax=(0.2, 0.8)),
    "prob0.6_no_correction": dict(mixup_alpha=0.2, cutmix_alpha=1.0, prob=0.6, correct_lam=False),
}


def _batch(batch_size=8, height=12, width=16):
    rng = np.random.RandomState(0)
    x = rng.standard_normal((batch_size, 3, height, width)).astype(np.float32)
    y = rng.randint(0, NUM_CLASSES, size=batch_size)
    return x, y


def _run_both(config, mode, seed, x, y):
    kwargs = dict(config, mode=mode, label_smoothing=0.1, num_classes=NUM_CLASSES)
    np.random.seed(seed)
    x_ref, y_ref = timm_mixup.Mixup(**kwargs)(torch.from_numpy(x.copy()), torch.from_numpy(y.astype(np.int64)))
    np.random.seed(seed)
    x_ours, y_ours = Mixup(**kwargs)(x, y)
    return x_ours, y_ours, x_ref.numpy(), y_ref.numpy()


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("mode", ["batch", "pair", "elem"])
def test_images_and_targets_equal_timms_on_the_same_draws(config, mode):
    x, y = _batch()
    for seed in range(6):
        x_ours, y_ours, x_ref, y_ref = _run_both(CONFIGS[config], mode, seed, x, y)
        assert x_ours.dtype == np.float32 and y_ours.dtype == np.float32
        assert y_ours.shape == (len(x), NUM_CLASSES)
        assert np.abs(x_ours - x_ref).max() <= TOLERANCE, (config, mode, seed)
        assert np.abs(y_ours - y_ref).max() <= TOLERANCE, (config, mode, seed)
        np.testing.assert_allclose(y_ours.sum(axis=1), 1.0, atol=TOLERANCE)


def test_mixing_happens_in_the_compared_runs():
    """Guards the comparison above against both sides silently doing nothing."""
    x, y = _batch()
    x_ours, y_ours, _, _ = _run_both(CONFIGS["switch"], "elem", 0, x, y)
    assert not np.array_equal(x_ours, x)
    assert (y_ours > 0.5).sum() < len(y)  # some rows are no longer near one-hot


@pytest.mark.parametrize("shape", [(3, 12, 16), (2, 3, 31, 20)])
@pytest.mark.parametrize("lam", [0.05, 0.37, 0.8, np.float32(0.61)])
@pytest.mark.parametrize("margin", [0.0, 0.3])
def test_rand_bbox_equals_timms_for_the_same_seed(shape, lam, margin):
    for seed in range(5):
        np.random.seed(seed)
        expected = timm_mixup.rand_bbox(shape, lam, margin=margin)
        np.random.seed(seed)
        assert rand_bbox(shape, lam, margin=margin) == expected
        np.random.seed(seed)
        expected = timm_mixup.rand_bbox(shape, lam, margin=margin, count=4)
        ours = rand_bbox(shape, lam, margin=margin, rng=np.random.RandomState(seed), count=4)
        for ours_part, expected_part in zip(ours, expected):
            np.testing.assert_array_equal(ours_part, expected_part)


@pytest.mark.parametrize("minmax", [None, (0.2, 0.8)])
@pytest.mark.parametrize("correct_lam", [True, False])
def test_cutmix_box_area_and_corrected_lambda_equal_timms(minmax, correct_lam):
    shape = (3, 24, 20)
    for seed in range(10):
        lam = 0.1 + 0.08 * seed
        np.random.seed(seed)
        expected_box, expected_lam = timm_mixup.cutmix_bbox_and_lam(shape, lam, minmax, correct_lam)
        np.random.seed(seed)
        (y_low, y_high, x_low, x_high), ours_lam = cutmix_bbox_and_lam(shape, lam, minmax, correct_lam)
        assert (y_low, y_high, x_low, x_high) == expected_box
        assert ours_lam == expected_lam
        area = (y_high - y_low) * (x_high - x_low)
        if correct_lam or minmax is not None:
            assert ours_lam == 1 - area / (24 * 20)
        else:
            assert ours_lam == lam


def test_cutmix_box_clipped_at_the_border_corrects_lambda():
    class CornerCenter:
        """Puts the box center on the top-left pixel, so three quarters are clipped away."""

        def randint(self, low, high, size=None):
            return low

    box, lam = cutmix_bbox_and_lam((3, 20, 20), 0.36, rng=CornerCenter())
    assert box == (0, 8, 0, 8)  # a 16x16 box (side sqrt(1 - 0.36) * 20) centered at (0, 0)
    assert lam == pytest.approx(1 - 64 / 400)


@pytest.mark.parametrize("lam", [1.0, 0.3, np.array([0.2, 1.0, 0.7, 0.5], dtype=np.float32)])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_mixup_target_equals_timms_and_rows_sum_to_one(lam, smoothing):
    target = np.array([3, 0, 9, 3])
    ours = mixup_target(target, NUM_CLASSES, lam, smoothing)
    ref_lam = torch.from_numpy(lam).unsqueeze(1) if isinstance(lam, np.ndarray) else lam
    expected = timm_mixup.mixup_target(torch.from_numpy(target), NUM_CLASSES, ref_lam, smoothing).numpy()
    assert np.abs(ours - expected).max() <= TOLERANCE
    np.testing.assert_allclose(ours.sum(axis=1), 1.0, atol=TOLERANCE)


def test_label_smoothing_is_folded_into_unmixed_targets():
    targets = mixup_target(np.array([2, 3]), 4, lam=1.0, smoothing=0.1)
    np.testing.assert_allclose(targets, [[0.025, 0.025, 0.925, 0.025], [0.025, 0.025, 0.025, 0.925]], atol=1e-7)


def test_label_outside_num_classes_raises_value_error():
    with pytest.raises(ValueError, match=r"\[0, 4\)"):
        mixup_target(np.array([2, 4]), 4)


@pytest.mark.parametrize("mode", ["pair", "elem"])
def test_odd_batch_in_pair_or_elem_mode_raises_value_error(mode):
    x, y = _batch(batch_size=5)
    with pytest.raises(ValueError, match="even batch size"):
        Mixup(mode=mode, num_classes=NUM_CLASSES)(x, y)


def test_unknown_mode_or_no_active_mix_raises_value_error():
    with pytest.raises(ValueError, match="'pairs'"):
        Mixup(mode="pairs")
    with pytest.raises(ValueError, match="mixup_alpha"):
        Mixup(mixup_alpha=0.0, cutmix_alpha=0.0)


def test_prob_zero_keeps_images_and_gives_smoothed_one_hot_targets():
    x, y = _batch()
    for mode in ("batch", "pair", "elem"):
        mixed, targets = Mixup(prob=0.0, mode=mode, num_classes=NUM_CLASSES)(x, y)
        np.testing.assert_array_equal(mixed, x)
        np.testing.assert_allclose(targets, mixup_target(y, NUM_CLASSES, 1.0, 0.1))


def test_input_batch_is_not_modified():
    x, y = _batch()
    original = x.copy()
    Mixup(mixup_alpha=1.0, cutmix_alpha=1.0, mode="elem", num_classes=NUM_CLASSES)(x, y)
    np.testing.assert_array_equal(x, original)
