"""Eval/train transforms and image loading (src/data/transforms.py)."""
import math

import numpy as np
import pytest
from PIL import Image

from src.data.transforms import (IMAGENET_MEAN, IMAGENET_STD, RandomResizedCrop, UnreadableImageError,
                                 center_crop, create_eval_transform, create_train_transform, eval_resize_size,
                                 load_image)


def _random_image(width, height, seed=0):
    rs = np.random.RandomState(seed)
    return Image.fromarray(rs.randint(0, 256, (height, width, 3), dtype=np.uint8))


# ----------------------------------------------------------------------------- eval

@pytest.mark.parametrize("crop_mode, crop_pct", [("pixels", 32), ("pixels", 7), ("squash", 0.875),
                                                 ("shorter", 0.9), ("shorter", 1.0)])
@pytest.mark.parametrize("width, height", [(64, 64), (65, 63), (120, 41), (33, 97)])
@pytest.mark.parametrize("size", [32, 31])
def test_eval_transform_output_is_float32_chw_of_test_size(crop_mode, crop_pct, width, height, size):
    out = create_eval_transform(size, crop_pct, crop_mode)(_random_image(width, height))
    assert out.shape == (3, size, size)
    assert out.dtype == np.float32
    assert out.flags["C_CONTIGUOUS"]


def test_eval_resize_size_of_each_crop_mode():
    assert eval_resize_size(256, 32, "pixels") == 288  # DeepMind: test + 32
    assert eval_resize_size(256, 0.9, "squash") == 284  # timm's dm_nfnet_f0 (crop_pct 0.9)
    assert eval_resize_size(224, 0.875, "shorter") == 256
    for bad in [(256, 0.9, "pixels"), (256, -1, "pixels"), (256, 32, "squash"), (256, 0, "shorter"),
                (256, 0.9, "center")]:
        with pytest.raises(ValueError):
            eval_resize_size(*bad)


def test_eval_transform_pixels_mode_squashes_to_size_plus_margin_then_center_crops():
    img = _random_image(100, 60)
    out = create_eval_transform(40, 8, "pixels")(img)
    resized = np.asarray(img.resize((48, 48), Image.Resampling.BICUBIC), dtype=np.float32)[4:44, 4:44]
    expected = ((resized / 255 - np.float32(IMAGENET_MEAN)) / np.float32(IMAGENET_STD)).transpose(2, 0, 1)
    assert np.abs(out - expected).max() < 1e-6


@pytest.mark.parametrize("crop_mode, timm_mode", [("squash", "squash"), ("shorter", "center")])
def test_eval_transform_equals_timm_eval_transform(crop_mode, timm_mode):
    """Measured: max |diff| = 0.0 (identical PIL resize, crop offsets and float32 normalization)."""
    timm_data = pytest.importorskip("timm.data")
    worst = 0.0
    for seed, (width, height) in enumerate([(64, 64), (65, 63), (300, 200), (199, 301), (257, 257)]):
        img = _random_image(width, height, seed)
        for size, crop_pct in [(32, 0.9), (31, 0.875), (56, 0.95), (48, 1.0)]:
            ref = timm_data.create_transform(input_size=size, is_training=False, crop_pct=crop_pct,
                                             crop_mode=timm_mode, interpolation="bicubic")(img).numpy()
            out = create_eval_transform(size, crop_pct, crop_mode)(img)
            assert out.shape == ref.shape
            worst = max(worst, float(np.abs(out - ref).max()))
    assert worst <= 1e-6


def test_center_crop_offsets_match_torchvision_rounding():
    tvf = pytest.importorskip("torchvision.transforms.functional")
    for width, height, size in [(37, 37, 32), (39, 38, 32), (41, 36, 35), (64, 64, 63)]:
        img = _random_image(width, height)
        assert np.array_equal(np.asarray(center_crop(img, size)), np.asarray(tvf.center_crop(img, [size, size])))


# ----------------------------------------------------------------------------- train

def test_train_transform_output_is_float32_chw_of_input_size():
    transform = create_train_transform(48)
    for width, height in [(64, 64), (100, 37), (20, 90)]:
        out = transform(_random_image(width, height))
        assert out.shape == (3, 48, 48)
        assert out.dtype == np.float32
        assert np.isfinite(out).all()


def test_train_transform_is_reproducible_from_numpy_seed():
    transform = create_train_transform(32)
    img = _random_image(80, 60)
    np.random.seed(3)
    first = transform(img)
    np.random.seed(3)
    assert np.array_equal(first, transform(img))


@pytest.mark.parametrize("width, height", [(300, 300), (400, 300)])
def test_random_resized_crop_area_and_aspect_statistics_match_timm(width, height):
    """Measured (3000 draws, seed 0): mean area 0.479 vs timm 0.481 (square), 0.431 vs 0.438 (4:3)."""
    import random

    timm_transforms = pytest.importorskip("timm.data.transforms")
    rrc = RandomResizedCrop(64, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3))
    np.random.seed(0)
    random.seed(0)
    ours = [rrc.get_params(width, height) for _ in range(3000)]
    img = Image.new("RGB", (width, height))
    ref = [timm_transforms.RandomResizedCropAndInterpolation.get_params(img, rrc.scale, rrc.ratio)
           for _ in range(3000)]
    stats = {}
    for name, boxes in (("ours", ours), ("timm", ref)):
        for top, left, h, w in boxes:
            assert 0 <= top <= height - h and 0 <= left <= width - w
        areas = np.array([h * w / (width * height) for _, _, h, w in boxes])
        log_aspects = np.log([w / h for _, _, h, w in boxes])
        # whole-pixel rounding moves area and aspect by < 1% at these sizes
        assert areas.min() >= 0.08 * 0.99 and areas.max() <= 1.0
        assert log_aspects.min() >= math.log(3 / 4) - 0.01 and log_aspects.max() <= math.log(4 / 3) + 0.01
        stats[name] = areas.mean(), log_aspects.mean(), log_aspects.std()
    # standard errors of the means are ~0.005 (area) and ~0.003 (log aspect)
    assert abs(stats["ours"][0] - stats["timm"][0]) < 0.025
    assert abs(stats["ours"][1] - stats["timm"][1]) < 0.015
    assert abs(stats["ours"][2] - stats["timm"][2]) < 0.01
    if width == height:
        assert abs(stats["ours"][1]) < 0.015  # aspect symmetric around 1 on a square image


def test_random_resized_crop_falls_back_to_center_crop_with_clamped_aspect():
    rrc = RandomResizedCrop(16)
    np.random.seed(0)
    assert rrc.get_params(1000, 10) == (0, (1000 - 13) // 2, 10, 13)  # width clamped to round(10 * 4/3)
    assert rrc.get_params(10, 1000) == ((1000 - 13) // 2, 0, 13, 10)  # height clamped to round(10 / (3/4))


def test_train_transform_with_randaugment_and_random_erasing():
    """Random erasing is the last step: same draws without it give the same image outside the erased boxes."""
    erasing = create_train_transform(40, auto_augment="rand-m9-n2-mstd0.5-inc1", re_prob=1.0, re_mode="const",
                                     re_count=2)
    clean = create_train_transform(40, auto_augment="rand-m9-n2-mstd0.5-inc1")
    for seed in range(4):
        image = _random_image(64, 64, seed)
        np.random.seed(seed)
        out = erasing(image)
        np.random.seed(seed)
        expected = clean(image)
        assert out.shape == (3, 40, 40) and out.dtype == np.float32
        erased = (out == 0).all(axis=0) & (expected != 0).any(axis=0)  # const mode writes 0 on every channel
        kept = (out == expected).all(axis=0)
        assert (erased | kept).all()  # every pixel is either erased or untouched
        assert 0.02 * 40 * 40 <= erased.sum() <= 1 / 3 * 40 * 40 + 2 * 8  # RandomErasing's default area range


def test_train_transform_rejects_non_randaugment_policy():
    with pytest.raises(ValueError, match="original"):
        create_train_transform(32, auto_augment="original")


# ----------------------------------------------------------------------------- loading

def _save(tmp_path, name, img, **kw):
    path = str(tmp_path / name)
    img.save(path, **kw)
    return path


def test_load_image_converts_grayscale_to_rgb(tmp_path):
    gray = np.arange(64, dtype=np.uint8).reshape(8, 8) * 4
    img = load_image(_save(tmp_path, "g.png", Image.fromarray(gray)))
    assert img.mode == "RGB"
    assert np.array_equal(np.asarray(img), np.repeat(gray[..., None], 3, axis=2))


def test_load_image_drops_alpha_keeping_rgb_values(tmp_path):
    rgba = np.random.RandomState(0).randint(0, 256, (8, 8, 4), dtype=np.uint8)
    rgba[..., 3] = 0  # fully transparent: the stored colours are kept, not blacked out
    img = load_image(_save(tmp_path, "a.png", Image.fromarray(rgba)))
    assert img.mode == "RGB"
    assert np.array_equal(np.asarray(img), rgba[..., :3])


def test_load_image_converts_palette_with_transparency(tmp_path):
    pal = Image.new("P", (4, 4), 1)
    pal.putpalette([0, 0, 0, 10, 20, 30] + [0] * 762)
    pal.info["transparency"] = 1
    img = load_image(_save(tmp_path, "p.png", pal, transparency=1))
    assert img.mode == "RGB" and tuple(np.asarray(img)[0, 0]) == (10, 20, 30)


@pytest.mark.parametrize("fmt", ["JPEG", "TIFF"])
def test_load_image_converts_cmyk_to_rgb(tmp_path, fmt):
    path = _save(tmp_path, "c." + fmt.lower(), Image.new("CMYK", (8, 8), (0, 255, 255, 0)), format=fmt)
    img = load_image(path)
    assert img.mode == "RGB"
    r, g, b = np.asarray(img)[4, 4].astype(int)
    assert r > 240 and g < 15 and b < 15  # pure red (JPEG: within compression error)


@pytest.mark.parametrize("ext", ["png", "tif"])
def test_load_image_maps_16_bit_grayscale_to_8_bit(tmp_path, ext):
    values = np.array([[0, 257, 32896, 65535]], dtype=np.uint16)  # -> 0, 1, 128, 255
    path = _save(tmp_path, "16." + ext, Image.fromarray(values))
    assert Image.open(path).mode == "I;16"
    img = load_image(path)
    assert img.mode == "RGB"
    assert np.asarray(img)[0, :, 0].tolist() == [0, 1, 128, 255]


def test_load_image_maps_32_bit_integer_tiff_as_16_bit_range(tmp_path):
    values = np.array([[0, 65535, 70000, -5]], dtype=np.int32)
    path = _save(tmp_path, "32.tif", Image.fromarray(values))
    assert Image.open(path).mode == "I"
    assert np.asarray(load_image(path))[0, :, 1].tolist() == [0, 255, 255, 0]


def _corrupt_files(tmp_path):
    good = _save(tmp_path, "good.jpg", _random_image(64, 64))
    data = open(good, "rb").read()
    files = {"empty.jpg": b"", "truncated.jpg": data[: len(data) // 2], "text.png": b"not an image\n",
             "garbage.jpg": bytes(np.random.RandomState(0).randint(0, 256, 500, dtype=np.uint8))}
    paths = []
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
        paths.append(str(tmp_path / name))
    return paths + [str(tmp_path / "missing.jpg")]


def test_load_image_raises_error_naming_unreadable_files(tmp_path):
    for path in _corrupt_files(tmp_path):
        with pytest.raises(UnreadableImageError) as info:
            load_image(path)
        assert path in str(info.value) and info.value.path == path
        assert "\n" not in str(info.value)
        assert isinstance(info.value, ValueError)  # a DatasetError

