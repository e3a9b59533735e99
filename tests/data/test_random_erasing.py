"""RandomErasing on normalized CHW float32 arrays: area range, fill modes, identity at p=0."""
import numpy as np
import pytest

from src.data.augment import RandomErasing

HEIGHT, WIDTH = 48, 64


def _ones(channels=3):
    return np.ones((channels, HEIGHT, WIDTH), dtype=np.float32)


def _erased_box(erased_mask):
    """(top, height, left, width) of the bounding box of the erased pixels."""
    rows = np.flatnonzero(erased_mask.any(axis=1))
    cols = np.flatnonzero(erased_mask.any(axis=0))
    return rows[0], rows[-1] + 1 - rows[0], cols[0], cols[-1] + 1 - cols[0]


def test_probability_zero_is_identity():
    img = np.random.RandomState(0).standard_normal((3, HEIGHT, WIDTH)).astype(np.float32)
    for mode in ("const", "rand", "pixel"):
        out = RandomErasing(probability=0.0, mode=mode)(img)
        np.testing.assert_array_equal(out, img)


def test_const_mode_writes_zeros_in_one_rectangle_on_every_channel():
    out = RandomErasing(probability=1.0, mode="const", rng=np.random.RandomState(1))(_ones())
    erased = out == 0
    assert erased.any()
    assert (erased == erased[0]).all()  # same pixels on every channel
    top, h, left, w = _erased_box(erased[0])
    assert erased[0].sum() == h * w  # the erased pixels fill their bounding box
    assert (out[:, erased[0]] == 0).all() and (out[:, ~erased[0]] == 1).all()


def test_erased_area_fraction_within_min_and_max_area():
    """Over 300 images: each fraction in [min_area, max_area] up to rounding of the sides to pixels."""
    min_area, max_area = 0.05, 0.25
    erasing = RandomErasing(probability=1.0, min_area=min_area, max_area=max_area, rng=np.random.RandomState(2))
    fractions = []
    for _ in range(300):
        erased = erasing(_ones())[0] == 0
        _, h, _, w = _erased_box(erased)
        slack = 0.5 * (h + w + 1) + 0.25  # |h - sqrt(a r)| <= 0.5 and |w - sqrt(a / r)| <= 0.5
        assert min_area * HEIGHT * WIDTH - slack <= h * w <= max_area * HEIGHT * WIDTH + slack
        fractions.append(erased.mean())
    assert min(fractions) < min_area + 0.02 and max(fractions) > max_area - 0.02  # the range is used


def test_erasing_happens_with_the_given_probability():
    erasing = RandomErasing(probability=0.3, rng=np.random.RandomState(3))
    erased = [bool((erasing(_ones()) == 0).any()) for _ in range(400)]
    assert 0.24 < np.mean(erased) < 0.36  # 0.3 +- 3 binomial standard deviations


def test_rand_mode_fills_one_normal_value_per_channel():
    out = RandomErasing(probability=1.0, mode="rand", rng=np.random.RandomState(4))(_ones())
    erased = out[0] != 1
    for channel in out:
        assert np.unique(channel[erased]).size == 1
    assert np.unique(out[:, erased][:, 0]).size == 3


def test_pixel_mode_fills_standard_normal_noise_per_pixel():
    out = RandomErasing(probability=1.0, min_area=0.3, max_area=0.3, mode="pixel",
                        rng=np.random.RandomState(5))(_ones())
    values = out[out != 1]
    assert values.size > 0.25 * out.size
    assert abs(values.mean()) < 0.05 and abs(values.std() - 1) < 0.05


def test_several_rectangles_share_the_max_area():
    erasing = RandomErasing(probability=1.0, min_area=0.01, max_area=0.02, min_count=1, max_count=3,
                            rng=np.random.RandomState(6))
    totals = [int((erasing(_ones())[0] == 0).sum()) for _ in range(60)]
    assert max(totals) <= 0.02 * HEIGHT * WIDTH + 3 * 8  # total area split between the rectangles
    assert len(set(totals)) > 10


def test_batch_with_num_splits_leaves_the_clean_split_untouched():
    batch = np.ones((4, 3, HEIGHT, WIDTH), dtype=np.float32)
    out = RandomErasing(probability=1.0, num_splits=2, rng=np.random.RandomState(7))(batch)
    assert (out[:2] == 1).all()
    assert all((image == 0).any() for image in out[2:])
    assert (batch == 1).all()  # the input is not modified


def test_unknown_mode_raises_value_error_naming_it():
    with pytest.raises(ValueError, match="'noise'"):
        RandomErasing(mode="noise")


class _ScriptedDraws:
    """Same draws for timm (Python's random, inclusive randint) and for us (NumPy, exclusive randint)."""

    def __init__(self, inclusive):
        self.inclusive = inclusive
        self.fractions = [0.7, 0.2]  # for the area, then for the log aspect ratio

    def random(self):
        return 0.1

    def uniform(self, low, high):
        return low + self.fractions.pop(0) * (high - low)

    def randint(self, low, high):
        return high if self.inclusive else high - 1  # the bottom-right-most position


def test_box_size_and_position_equal_timms_on_the_same_draws(monkeypatch):
    torch = pytest.importorskip("torch")
    timm_erasing = pytest.importorskip("timm.data.random_erasing")
    monkeypatch.setattr(timm_erasing, "random", _ScriptedDraws(inclusive=True))
    expected = timm_erasing.RandomErasing(probability=0.5, device="cpu")(torch.ones(3, HEIGHT, WIDTH)).numpy()
    ours = RandomErasing(probability=0.5, rng=_ScriptedDraws(inclusive=False))(_ones())
    np.testing.assert_array_equal(ours, expected)
    assert ours[:, -1, -1].tolist() == [0, 0, 0]
