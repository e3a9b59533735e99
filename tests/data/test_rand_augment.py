"""RandAugment: config parsing and every op compared pixel by pixel with timm 1.0.31."""
import os

import numpy as np
import pytest
from PIL import Image

from src.data.augment import INCREASING_OPS, STANDARD_OPS, AugmentOp, rand_augment_transform

timm_aa = pytest.importorskip("timm.data.auto_augment")

BILINEAR, BICUBIC = Image.Resampling.BILINEAR, Image.Resampling.BICUBIC
HPARAMS = {"img_mean": (124, 116, 104), "translate_const": 100}
ALL_OPS = sorted(set(STANDARD_OPS) | set(INCREASING_OPS))


def _test_image(height=40, width=48):
    """Gradients plus noise, values kept inside [30, 220] so AutoContrast has work to do."""
    rows, cols = np.mgrid[0:height, 0:width]
    noise = np.random.RandomState(0).randint(0, 40, size=(height, width, 3))
    rgb = np.stack([rows * 4, cols * 3, (rows + cols) * 2], axis=-1) + noise
    return Image.fromarray(np.clip(rgb + 30, 30, 220).astype(np.uint8))


def _timm_names(config_str):
    return [op.name for op in timm_aa.rand_augment_transform(config_str, {}).ops]


# ---- parser -------------------------------------------------------------------------------


def test_parser_reads_m5_n4_mstd05_and_the_increasing_op_set():
    transform = rand_augment_transform("rand-m5-n4-mstd0.5-inc1")
    assert transform.num_layers == 4
    assert {op.magnitude for op in transform.ops} == {5}
    assert {op.magnitude_std for op in transform.ops} == {0.5}
    assert {op.prob for op in transform.ops} == {0.5}
    names = [op.name for op in transform.ops]
    assert names == list(INCREASING_OPS) == _timm_names("rand-m5-n4-mstd0.5-inc1")
    assert "PosterizeIncreasing" in names and "Posterize" not in names


@pytest.mark.parametrize("config_str", ["rand-m5-n4-mstd0.5-inc0", "rand-m5-n4-mstd0.5", "rand-m9-mstd0.5"])
def test_inc0_or_no_inc_gives_timms_standard_op_set(config_str):
    names = [op.name for op in rand_augment_transform(config_str).ops]
    assert names == list(STANDARD_OPS) == _timm_names(config_str)
    assert not [name for name in names if name.endswith("Increasing")]


@pytest.mark.parametrize("config_str", ["rand-m9-n3-mstd101-mmax15-p0.3", "rand-n1-mstd1", "rand-inc1-m7"])
def test_parsed_options_equal_timms(config_str):
    ours = rand_augment_transform(config_str)
    theirs = timm_aa.rand_augment_transform(config_str, {})
    assert ours.num_layers == theirs.num_layers
    for op, ref in zip(ours.ops, theirs.ops):
        assert (op.name, op.prob, op.magnitude) == (ref.name, ref.prob, ref.magnitude)
        assert (op.magnitude_std, op.magnitude_max) == (ref.magnitude_std, ref.magnitude_max)


def test_mstd_above_100_means_uniform_sampling():
    assert rand_augment_transform("rand-m9-mstd101").ops[0].magnitude_std == float("inf")


@pytest.mark.parametrize("config_str, culprit", [("rand-m5-x3", "'x'"), ("rand-m5-foo", "'foo'"),
                                                 ("rand-m5-tweights", "'tweights'"), ("rand-mfive", "'mfive'"),
                                                 ("augmix-m5", "'augmix-m5'")])
def test_unknown_key_raises_value_error_naming_it(config_str, culprit):
    with pytest.raises(ValueError, match=culprit):
        rand_augment_transform(config_str)


def test_parser_does_not_modify_the_callers_hparams():
    hparams = dict(HPARAMS)
    rand_augment_transform("rand-m5-mstd0.5-mmax12", hparams)
    assert hparams == HPARAMS


# ---- each op against timm -----------------------------------------------------------------

# (magnitude, sign, interpolation); 6.5 checks timm's int() truncation of fractional levels.
OP_CASES = [(3, 1, BILINEAR), (6.5, -1, BICUBIC), (10, -1, BILINEAR), (10, 1, BICUBIC)]
# At these (op, magnitude) pairs timm's op leaves the image unchanged (threshold 256, factor 1).
IDENTITY_CASES = {("Solarize", 10)}


# Posterize to 0 bits: black. timm calls ImageOps.posterize(img, 0), which Pillow 13 rejects.
BLACK_CASES = {("PosterizeIncreasing", 10)}


def _timm_op(name, magnitude, sign, resample, img, monkeypatch):
    monkeypatch.setattr(timm_aa, "_randomly_negate", lambda v: -v if sign < 0 else v)
    op = timm_aa.AugmentOp(name, prob=1.0, magnitude=magnitude, hparams=dict(HPARAMS, interpolation=resample))
    try:
        return np.asarray(op(img), dtype=np.int16)
    except ValueError:
        if (name, magnitude) not in BLACK_CASES:
            raise
        return np.zeros((img.size[1], img.size[0], 3), dtype=np.int16)


@pytest.mark.parametrize("magnitude, sign, resample", OP_CASES)
@pytest.mark.parametrize("name", ALL_OPS)
def test_op_changes_image_exactly_as_timm(name, magnitude, sign, resample, monkeypatch):
    img = _test_image()
    expected = _timm_op(name, magnitude, sign, resample, img, monkeypatch)
    ours = AugmentOp(name, prob=1.0, magnitude=magnitude, hparams=HPARAMS).apply(img, magnitude, sign, resample)
    ours = np.asarray(ours, dtype=np.int16)
    assert ours.shape == expected.shape == (40, 48, 3)
    assert np.abs(ours - expected).max() == 0
    changed = not np.array_equal(ours, np.asarray(img))
    assert changed != ((name, magnitude) in IDENTITY_CASES)


class _ScriptedDraws:
    """Stands in for timm's `random` module and for our NumPy RandomState with the same draws.

    uniforms: values returned in turn by random(); normal_offset: gauss/normal
    returns mean + offset; choice: index picked by choice() / randint().
    """

    def __init__(self, uniforms, normal_offset=0.0, choice=0):
        self.uniforms = list(uniforms)
        self.normal_offset = normal_offset
        self.choice_index = choice

    def random(self):
        return self.uniforms.pop(0)

    def gauss(self, mean, std):
        return mean + self.normal_offset

    normal = gauss

    def uniform(self, low, high):
        return low + 0.4 * (high - low)

    def choice(self, seq):
        return seq[self.choice_index]

    def randint(self, high):
        return self.choice_index


@pytest.mark.parametrize("magnitude_std", [0.5, float("inf")])
@pytest.mark.parametrize("name", ["Rotate", "ShearY", "ColorIncreasing", "PosterizeIncreasing"])
@pytest.mark.parametrize("uniforms", [(0.3, 0.8), (0.3, 0.2), (0.6,)])
def test_random_call_path_matches_timm_on_the_same_draws(name, uniforms, magnitude_std, monkeypatch):
    """Probability gate, magnitude noise (Gaussian or uniform), sign and interpolation draws, in timm's order."""
    img = _test_image()
    hparams = dict(HPARAMS, magnitude_std=magnitude_std)  # no 'interpolation': random bilinear/bicubic
    monkeypatch.setattr(timm_aa, "random", _ScriptedDraws(uniforms, normal_offset=0.7, choice=1))
    expected = np.asarray(timm_aa.AugmentOp(name, prob=0.5, magnitude=5, hparams=hparams)(img))
    ours = AugmentOp(name, prob=0.5, magnitude=5, hparams=hparams,
                     rng=_ScriptedDraws(uniforms, normal_offset=0.7, choice=1))(img)
    assert np.array_equal(np.asarray(ours), expected)
    assert np.array_equal(expected, np.asarray(img)) == (uniforms[0] > 0.5)


def test_rand_augment_on_array_returns_array_and_is_reproducible_with_a_seeded_rng():
    img = np.asarray(_test_image())
    outputs = [rand_augment_transform("rand-m9-n4-mstd0.5-inc1-p1.0", HPARAMS, rng=np.random.RandomState(3))(img)
               for _ in range(2)]
    assert outputs[0].shape == img.shape and outputs[0].dtype == np.uint8
    assert np.array_equal(outputs[0], outputs[1])
    assert not np.array_equal(outputs[0], img)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_workers_draw_different_numbers_from_numpys_global_state():
    """random_state.py re-seeds NumPy in forked children, as Python's random does for itself."""
    np.random.seed(0)
    draws = []
    for _ in range(2):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: report one draw and leave without running pytest's cleanup
            os.write(write_end, repr(np.random.random()).encode())
            os._exit(0)
        os.waitpid(pid, 0)
        draws.append(float(os.read(read_end, 64)))
        os.close(read_end)
        os.close(write_end)
    assert draws[0] != draws[1]
    assert np.random.random() == np.random.RandomState(0).random()  # the parent's stream is untouched
