"""src/data/tf_image.py and DeepMind's crop against real TensorFlow.

Peer: TensorFlow 2.15.1 (CPU, Python 3.11) in its own venv; it is not a test dependency because it
needs protobuf < 5 and this project's venv (MindSpore, ONNX) has protobuf 7. The TF_* values below
are its outputs:
- resize: ``tf.image.resize(image, size, tf.image.ResizeMethod.BICUBIC).numpy()`` of the images made
  here (SHA-256 of the float32 bytes, or the values); ours equals it bit for bit (0 of 660,840
  values differ over 7 shapes, up- and downscaling).
- crop: ``tf.image.sample_distorted_bounding_box`` with DeepMind's arguments (_decode_and_random_crop:
  box [0, 0, 1, 1], min_object_covered 0.1, aspect 3/4-4/3, area 0.08-1, 10 attempts,
  use_image_if_no_bounding_boxes), 20,000 draws per shape. Its random stream is TensorFlow's own,
  so the statistics are compared, not the draws.
"""
import hashlib

import numpy as np
import pytest
from PIL import Image

from src.data.tf_image import resize_bicubic, sample_distorted_bounding_box
from src.data.transforms import DeepMindRandomCrop, create_train_transform, deepmind_center_crop_box

# (seed, input (H, W), output (H, W)) -> SHA-256 of TensorFlow's float32 output for RandomState(seed)'s uint8 image
TF_RESIZE_DIGESTS = {
    (0, (375, 500), (224, 224)): "f6891a78ea4c992b996921e1bab08f69ed14cf8b827017ecedd136059521f82f",
    (1, (80, 61), (192, 192)): "b664c3ea461a65ca642e35da757eaea306a3d5517e8fb264735ee02f2e356807",
    (2, (13, 7), (5, 9)): "a1e74e4cf4d4c21f6e1cd95bd79e51b51863a1242fca6d49e02fe799348e8ffd",
}
TF_UPSCALED = np.array([  # a 3x4 checkerboard-like image -> 7x9 (values rounded to 4 decimals)
    [-53.2419, 13.4808, 181.9468, 276.8198, 127.5, -21.8198, 73.0532, 241.5192, 308.2419],
    [6.7255, 51.7236, 165.4027, 229.1377, 127.5, 25.8624, 89.5973, 203.2764, 248.2745],
    [164.0503, 153.8721, 128.6941, 112.2328, 127.5, 142.7672, 126.3059, 101.1279, 90.9497],
    [279.0678, 223.115, 81.8416, 2.2824, 127.5, 252.7176, 173.1584, 31.885, -24.0678],
    [176.2548, 136.284, 31.9108, -11.7397, 127.5, 266.7398, 223.0892, 118.716, 78.7452],
    [28.7312, 20.0107, -9.1057, 5.6049, 127.5, 249.3952, 264.1057, 234.9892, 226.2688],
    [-26.8578, -24.5418, -27.2829, 8.8116, 127.5, 246.1884, 282.2828, 279.5418, 281.8578]], np.float32)
# TensorFlow's crop statistics over 20,000 draws: mean area fraction, P(width / height < 0.8)
TF_CROP_STATS = {(375, 500): (0.3894, 0.0842), (500, 333): (0.3403, 0.0880), (64, 48): (0.3775, 0.0824)}


@pytest.mark.parametrize("case", sorted(TF_RESIZE_DIGESTS))
def test_resize_bicubic_equals_tensorflow_bit_for_bit(case):
    seed, (h, w), (out_h, out_w) = case
    image = np.random.RandomState(seed).randint(0, 256, (h, w, 3)).astype(np.uint8)
    ours = resize_bicubic(image, out_h, out_w)
    assert ours.dtype == np.float32 and ours.shape == (out_h, out_w, 3)
    assert hashlib.sha256(ours.tobytes()).hexdigest() == TF_RESIZE_DIGESTS[case]


def test_resize_bicubic_overshoots_unclamped_and_keeps_a_same_size_image():
    board = np.array([[0, 255, 0, 255], [255, 0, 255, 0], [0, 0, 255, 255]], np.uint8)[..., None]
    ours = resize_bicubic(board, 7, 9)[..., 0]
    np.testing.assert_allclose(ours, TF_UPSCALED, rtol=0, atol=1e-4)  # TF_UPSCALED is rounded
    assert ours.min() < -50 and ours.max() > 300  # not antialiased, not clamped: DeepMind mixes these floats
    image = np.random.RandomState(4).randint(0, 256, (9, 11, 3)).astype(np.uint8)
    np.testing.assert_array_equal(resize_bicubic(image, 9, 11), image.astype(np.float32))


@pytest.mark.parametrize("shape", sorted(TF_CROP_STATS))
def test_crop_statistics_equal_tensorflows(shape):
    height, width = shape
    rng = np.random.RandomState(0)
    boxes = np.array([sample_distorted_bounding_box(height, width, rng, 0.1, (3 / 4, 4 / 3), (0.08, 1.0), 10)
                      for _ in range(5000)])
    top, left, h, w = boxes.T
    area = h * w / (height * width)
    mean_area, narrow = TF_CROP_STATS[shape]
    assert abs(area.mean() - mean_area) < 0.012  # measured: 0.3886 / 0.3391 / 0.3767 (20,000 draws)
    assert abs((w / h < 0.8).mean() - narrow) < 0.015  # measured: 0.080 / 0.087 / 0.084
    assert area.min() >= 0.1  # min_object_covered: TensorFlow's 20,000 draws had none under 10 %
    assert ((top >= 0) & (left >= 0) & (top + h <= height) & (left + w <= width)).all()
    # offsets uniform in [0, H - h): a crop touches the bottom edge only at full height
    assert ((top + h < height) | (h == height)).all()


def test_crop_falls_back_to_deepmind_center_crop_when_no_attempt_fits():
    # TensorFlow returns the whole image for these (200 draws each); DeepMind then center-crops
    for (h, w), area, ratio in (((40, 60), (1.0, 1.0), (1.0, 1.0)), ((10, 10), (0.5, 0.5), (1.0, 1.0))):
        assert sample_distorted_bounding_box(h, w, np.random.RandomState(0), 0.1, ratio, area, 10) == (0, 0, h, w)
    crop = DeepMindRandomCrop(32, scale=(1.0, 1.0), ratio=(1.0, 1.0))
    # _decode_and_center_crop: scale = min(40, 60) / (32 + 32), side int(0.625 * 32) = 20, offsets rounded up
    assert crop.get_params(60, 40, np.random.RandomState(0)) == (10, 20, 20, 20) == deepmind_center_crop_box(40, 60, 32)
    assert deepmind_center_crop_box(375, 500, 224) == (24, 86, 328, 328)


def test_deepmind_train_transform_crops_flips_then_resizes_to_floats():
    """dataset.py _preprocess_image: _decode_and_random_crop, random_flip_left_right, tf.image.resize(BICUBIC)."""
    image = np.random.RandomState(7).randint(0, 256, (75, 100, 3)).astype(np.uint8)
    transform = create_train_transform(48, crop="deepmind", resize="tf_bicubic", normalize=False)
    for seed in range(6):
        ours = transform(Image.fromarray(image), rng=np.random.RandomState(seed))
        replay = np.random.RandomState(seed)
        top, left, h, w = DeepMindRandomCrop(48).get_params(100, 75, replay)
        crop = image[top:top + h, left:left + w]
        if replay.random() < 0.5:
            crop = crop[:, ::-1]
        np.testing.assert_array_equal(ours, resize_bicubic(crop, 48, 48))
        assert ours.dtype == np.float32 and ours.shape == (48, 48, 3)
    with pytest.raises(ValueError, match="tf_bicubic"):
        create_train_transform(48, crop="deepmind", resize="tf_bicubic", auto_augment="rand-m9-n2")
    with pytest.raises(ValueError, match="crop 'timm'"):
        create_train_transform(48, crop="timm", resize="tf_bicubic")
    # DeepMind's crop with PIL's resize: the same box, resized by PIL to uint8
    pil = create_train_transform(48, crop="deepmind", resize="pil", normalize=False, hflip=0.0)
    top, left, h, w = DeepMindRandomCrop(48).get_params(100, 75, np.random.RandomState(3))
    expected = Image.fromarray(image[top:top + h, left:left + w]).resize((48, 48), Image.Resampling.BICUBIC)
    np.testing.assert_array_equal(pil(Image.fromarray(image), rng=np.random.RandomState(3)), np.asarray(expected))
