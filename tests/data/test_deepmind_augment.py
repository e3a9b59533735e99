"""DeepMind's NFNet augmentations against NumPy transcriptions of deepmind-research/nfnets.

References (google-deepmind/deepmind-research, nfnets/):
    autoaugment.py: blend, cutout, solarize, solarize_add, color, contrast, brightness, posterize,
        rotate, translate_x/y, shear_x/y, autocontrast, sharpness, equalize, invert, wrap/unwrap,
        level_to_arg, distort_image_with_randaugment (with tensorflow_addons' transform, NEAREST);
    dataset.py: cutmix_padding, my_mixup_cutmix, my_mixup, my_cutmix, _augment_image (level parsing,
        clip + uint8 cast before RandAugment), _normalize_image, load (augment_before_mix);
    experiment.py: Experiment._loss_fn (mixed one-hot targets, then label smoothing).
The transcriptions below follow the TensorFlow code line by line, with TensorFlow's semantics where
they differ from a surface reading of the Python (Solarize's threshold cast to uint8, the uint8 shift
clamp of Posterize, float32 rotation offsets); TensorFlow's random draws are given as arguments so
that both sides see the same values.

Real TensorFlow as the peer: TensorFlow 2.15.1 + tensorflow-addons 0.23.0 (Python 3.11, their own
venv: TensorFlow 2.15 needs protobuf < 5, this project's MindSpore/ONNX venv has protobuf 7, so
TensorFlow is not a test dependency) ran deepmind-research nfnets/autoaugment.py unmodified
(``inspect.getargspec`` aliased to ``getfullargspec`` for Python 3.11). The TF_* constants below are
its outputs: the op values, rotation matrices, and SHA-256 digests of whole RandAugment runs whose
``tf.random_uniform`` calls were answered from our NumPy draws (replay; Cutout's centre included).
Every op at levels 0-15 (Cutout only in those runs) on five images up to 224x224: 0 values differ.
"""
import hashlib
import math

import numpy as np
import pytest

from src.data.augment import deepmind_rand_augment as ra
from src.data.augment.deepmind_mix import DeepMindMixupCutMix, MixDraws, cutmix_mask

# ----------------------------------------------------------------------------- transcription: autoaugment.py

_MAX_LEVEL = 10.


def tf_blend(image1, image2, factor):
    if factor == 0.0:
        return image1
    if factor == 1.0:
        return image2
    image1 = image1.astype(np.float32)
    image2 = image2.astype(np.float32)
    difference = image2 - image1
    scaled = np.float32(factor) * difference
    temp = image1 + scaled
    if factor > 0.0 and factor < 1.0:
        return temp.astype(np.uint8)
    return np.clip(temp, 0.0, 255.0).astype(np.uint8)


def tf_rgb_to_grayscale(image):
    """tf.image.rgb_to_grayscale: convert_image_dtype to float (x * 1/255), tensordot, back (x * 255.5, cast)."""
    flt = image.astype(np.float32) * np.float32(1.0 / 255)
    w = np.array([0.2989, 0.5870, 0.1140], np.float32)
    gray = flt[..., 0] * w[0] + flt[..., 1] * w[1] + flt[..., 2] * w[2]
    return (gray[..., None] * np.float32(255 + 0.5)).astype(np.uint8)


def tf_cutout(image, pad_size, cutout_center_height, cutout_center_width, replace=0):
    image_height, image_width = image.shape[:2]
    lower_pad = max(0, cutout_center_height - pad_size)
    upper_pad = max(0, image_height - cutout_center_height - pad_size)
    left_pad = max(0, cutout_center_width - pad_size)
    right_pad = max(0, image_width - cutout_center_width - pad_size)
    cutout_shape = [image_height - (lower_pad + upper_pad), image_width - (left_pad + right_pad)]
    mask = np.pad(np.zeros(cutout_shape, dtype=image.dtype), [[lower_pad, upper_pad], [left_pad, right_pad]],
                  constant_values=1)
    mask = np.tile(mask[..., None], [1, 1, 3])
    return np.where(mask == 0, np.ones_like(image) * replace, image)


def tf_solarize(image, threshold=128):
    """tf.where(image < threshold, ...): the Python threshold becomes a uint8 tensor (256 -> 0, 384 -> 128)."""
    threshold = np.array(threshold).astype(np.uint8)
    return np.where(image < threshold, image, 255 - image)


def tf_solarize_add(image, addition=0, threshold=128):
    added_image = image.astype(np.int64) + addition
    added_image = np.clip(added_image, 0, 255).astype(np.uint8)
    return np.where(image < threshold, added_image, image)


def tf_color(image, factor):
    degenerate = np.tile(tf_rgb_to_grayscale(image), [1, 1, 3])
    return tf_blend(degenerate, image, factor)


def tf_contrast(image, factor):
    degenerate = tf_rgb_to_grayscale(image).astype(np.int32)
    hist = np.histogram(degenerate, bins=256, range=(0, 255))[0]  # histogram_fixed_width
    mean = np.float32(np.sum(hist.astype(np.float32))) / np.float32(256.0)
    degenerate = np.ones_like(degenerate, dtype=np.float32) * mean
    degenerate = np.clip(degenerate, 0.0, 255.0)
    degenerate = np.tile(degenerate.astype(np.uint8), [1, 1, 3])
    return tf_blend(degenerate, image, factor)


def tf_brightness(image, factor):
    return tf_blend(np.zeros_like(image), image, factor)


def tf_posterize(image, bits):
    """tf.bitwise shifts clamp the shift to [0, bits of the type - 1]: 8 -> 7 on uint8."""
    shift = np.clip(8 - bits, 0, 7)
    return np.left_shift(np.right_shift(image, shift), shift)


def tfa_transform_nearest(images, transform):
    """tensorflow_addons transform (ImageProjectiveTransformV3, NEAREST, constant fill 0), per pixel."""
    a0, a1, a2, b0, b1, b2, c0, c1 = [np.float32(t) for t in transform]
    height, width, channels = images.shape
    out = np.zeros_like(images)
    for y in range(height):
        for x in range(width):
            x, y = np.float32(x), np.float32(y)  # the kernel computes in float
            projection = c0 * x + c1 * y + np.float32(1)
            in_x = (a0 * x + a1 * y + a2) / projection
            in_y = (b0 * x + b1 * y + b2) / projection
            ix = int(math.copysign(math.floor(abs(float(in_x)) + 0.5), in_x))  # std::round, exact in double
            iy = int(math.copysign(math.floor(abs(float(in_y)) + 0.5), in_y))
            if 0 <= iy < height and 0 <= ix < width:
                out[int(y), int(x)] = images[iy, ix]
    return out


def tf_wrap(image):
    return np.concatenate([image, np.ones(image.shape[:2] + (1,), image.dtype)], 2)


def tf_unwrap(image, replace):
    flattened = image.reshape(-1, image.shape[2])
    alpha_channel = flattened[:, 3]
    replace = np.concatenate([replace, np.ones([1], image.dtype)], 0)
    flattened = np.where((alpha_channel == 0)[:, None], np.ones_like(flattened) * replace, flattened)
    return flattened.reshape(image.shape)[:, :, :3]


def tfa_angles_to_projective_transforms(angles, image_height, image_width):
    """Everything in float32 (the angle and the sides are float32 tensors); TensorFlow's cos/sin of a
    one-element tensor equal float64's rounded to float32 at every DeepMind level (TF_ROTATE_MATRICES)."""
    angles, one, two = np.float32(angles), np.float32(1), np.float32(2)
    image_height, image_width = np.float32(image_height), np.float32(image_width)
    cos_angles, sin_angles = np.float32(math.cos(angles)), np.float32(math.sin(angles))
    x_offset = ((image_width - one) - (cos_angles * (image_width - one) - sin_angles * (image_height - one))) / two
    y_offset = ((image_height - one) - (sin_angles * (image_width - one) + cos_angles * (image_height - one))) / two
    return [cos_angles, -sin_angles, x_offset, sin_angles, cos_angles, y_offset, 0, 0]


def tf_rotate(image, degrees, replace):
    radians = np.float32(degrees * (math.pi / 180.0))
    transform = tfa_angles_to_projective_transforms(radians, np.float32(image.shape[0]), np.float32(image.shape[1]))
    return tf_unwrap(tfa_transform_nearest(tf_wrap(image), transform), replace)


def tf_translate_x(image, pixels, replace):
    dx, dy = -pixels, 0  # contrib_image.translate(wrap(image), [-pixels, 0])
    return tf_unwrap(tfa_transform_nearest(tf_wrap(image), [1, 0, -dx, 0, 1, -dy, 0, 0]), replace)


def tf_translate_y(image, pixels, replace):
    dx, dy = 0, -pixels
    return tf_unwrap(tfa_transform_nearest(tf_wrap(image), [1, 0, -dx, 0, 1, -dy, 0, 0]), replace)


def tf_shear_x(image, level, replace):
    return tf_unwrap(tfa_transform_nearest(tf_wrap(image), [1., level, 0., 0., 1., 0., 0., 0.]), replace)


def tf_shear_y(image, level, replace):
    return tf_unwrap(tfa_transform_nearest(tf_wrap(image), [1., 0., 0., level, 1., 0., 0., 0.]), replace)


def tf_autocontrast(image):
    def scale_channel(image):
        lo = np.float32(image.min())
        hi = np.float32(image.max())
        if not hi > lo:
            return image
        scale = np.float32(255.0) / (hi - lo)
        offset = -lo * scale
        im = image.astype(np.float32) * scale + offset
        return np.clip(im, 0.0, 255.0).astype(np.uint8)

    return np.stack([scale_channel(image[:, :, c]) for c in range(3)], 2)


def tf_sharpness(image, factor):
    orig_image = image
    x = image.astype(np.float32)
    kernel = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]], np.float32) / np.float32(13.)
    h, w = image.shape[:2]
    degenerate = np.zeros((h - 2, w - 2, 3), np.float32)  # depthwise_conv2d, VALID
    for i in range(h - 2):
        for j in range(w - 2):
            for c in range(3):
                acc = np.float32(0)
                for di in range(3):
                    for dj in range(3):
                        acc += x[i + di, j + dj, c] * kernel[di, dj]
                degenerate[i, j, c] = acc
    degenerate = np.clip(degenerate, 0.0, 255.0).astype(np.uint8)
    mask = np.ones_like(degenerate)
    padded_mask = np.pad(mask, [[1, 1], [1, 1], [0, 0]])
    padded_degenerate = np.pad(degenerate, [[1, 1], [1, 1], [0, 0]])
    result = np.where(padded_mask == 1, padded_degenerate, orig_image)
    return tf_blend(result, orig_image, factor)


def tf_equalize(image):
    def scale_channel(im, c):
        im = im[:, :, c].astype(np.int32)
        histo = np.histogram(im, bins=256, range=(0, 255))[0]
        nonzero_histo = histo[np.nonzero(histo)]
        step = (np.sum(nonzero_histo) - nonzero_histo[-1]) // 255

        def build_lut(histo, step):
            lut = (np.cumsum(histo) + (step // 2)) // step
            lut = np.concatenate([[0], lut[:-1]], 0)
            return np.clip(lut, 0, 255)

        result = im if step == 0 else build_lut(histo, step)[im]
        return result.astype(np.uint8)

    return np.stack([scale_channel(image, c) for c in range(3)], 2)


def tf_invert(image):
    return 255 - image


def tf_level_to_arg(name, level, negate):
    """level_to_arg with translate_const 100 and cutout_const 40 (distort_image_with_randaugment);
    ``negate`` is _randomly_negate_tensor's draw."""
    sign = -1.0 if negate else 1.0
    table = {
        "AutoContrast": (), "Equalize": (), "Invert": (),
        "Rotate": (sign * (level / _MAX_LEVEL) * 30.,),
        "Posterize": (int((level / _MAX_LEVEL) * 4),),
        "Solarize": (int((level / _MAX_LEVEL) * 256),),
        "SolarizeAdd": (int((level / _MAX_LEVEL) * 110),),
        "Color": ((level / _MAX_LEVEL) * 1.8 + 0.1,), "Contrast": ((level / _MAX_LEVEL) * 1.8 + 0.1,),
        "Brightness": ((level / _MAX_LEVEL) * 1.8 + 0.1,), "Sharpness": ((level / _MAX_LEVEL) * 1.8 + 0.1,),
        "ShearX": (sign * (level / _MAX_LEVEL) * 0.3,), "ShearY": (sign * (level / _MAX_LEVEL) * 0.3,),
        "Cutout": (int((level / _MAX_LEVEL) * 40),),
        "TranslateX": (sign * (level / _MAX_LEVEL) * float(100),),
        "TranslateY": (sign * (level / _MAX_LEVEL) * float(100),),
    }
    return table[name]


REPLACE = np.array([128] * 3, np.uint8)
TF_OPS = {
    "AutoContrast": lambda im, cc: tf_autocontrast(im), "Equalize": lambda im, cc: tf_equalize(im),
    "Invert": lambda im, cc: tf_invert(im), "Rotate": lambda im, cc, a: tf_rotate(im, a, REPLACE),
    "Posterize": lambda im, cc, a: tf_posterize(im, a), "Solarize": lambda im, cc, a: tf_solarize(im, a),
    "Color": lambda im, cc, a: tf_color(im, a), "Contrast": lambda im, cc, a: tf_contrast(im, a),
    "Brightness": lambda im, cc, a: tf_brightness(im, a), "Sharpness": lambda im, cc, a: tf_sharpness(im, a),
    "ShearX": lambda im, cc, a: tf_shear_x(im, a, REPLACE), "ShearY": lambda im, cc, a: tf_shear_y(im, a, REPLACE),
    "TranslateX": lambda im, cc, a: tf_translate_x(im, a, REPLACE),
    "TranslateY": lambda im, cc, a: tf_translate_y(im, a, REPLACE),
    "Cutout": lambda im, cc, a: tf_cutout(im, a, cc[0], cc[1], REPLACE),
    "SolarizeAdd": lambda im, cc, a: tf_solarize_add(im, a),
}
AVAILABLE_OPS = ['AutoContrast', 'Equalize', 'Invert', 'Rotate', 'Posterize', 'Solarize', 'Color', 'Contrast',
                 'Brightness', 'Sharpness', 'ShearX', 'ShearY', 'TranslateX', 'TranslateY', 'Cutout', 'SolarizeAdd']


def tf_distort_image_with_randaugment(image, num_layers, magnitude, draws):
    """distort_image_with_randaugment; ``draws`` yields (op index, negate, cutout centre) per layer
    (the per-op prob TensorFlow draws is never used: no op takes 'prob')."""
    for _ in range(num_layers):
        op_to_select, negate, center = next(draws)
        name = AVAILABLE_OPS[op_to_select]
        args = tf_level_to_arg(name, float(magnitude), negate)
        image = TF_OPS[name](image, center, *args)
    return image


# ----------------------------------------------------------------------------- transcription: dataset.py

def tf_cutmix_padding(h, w, r_x, r_y, image1_proportion):
    patch_length_ratio = np.sqrt(np.float32(1) - np.float32(image1_proportion))
    r_w = int(patch_length_ratio * np.float32(w))
    r_h = int(patch_length_ratio * np.float32(h))
    bbx1 = np.clip(r_x - r_w // 2, 0, w)
    bby1 = np.clip(r_y - r_h // 2, 0, h)
    bbx2 = np.clip(r_x + r_w // 2, 0, w)
    bby2 = np.clip(r_y + r_h // 2, 0, h)
    pad_left, pad_top = bbx1, bby1
    pad_right, pad_bottom = max(w - bbx2, 0), max(h - bby2, 0)
    r_h, r_w = bby2 - bby1, bbx2 - bbx1
    mask = np.pad(np.ones((r_h, r_w), np.float32), [[pad_top, pad_bottom], [pad_left, pad_right]])
    return mask[..., None]


def tf_my_mixup_cutmix(batch):
    bs = batch["images"].shape[0] // 4
    mixup_ratio = batch["mixup_ratio"][:bs, None, None, None]
    mixup_images = mixup_ratio * batch["images"][:bs] + (1.0 - mixup_ratio) * batch["images"][bs:2 * bs]
    cutmix_mask_ = batch["mask"][2 * bs:3 * bs]
    cutmix_images = cutmix_mask_ * batch["images"][2 * bs:3 * bs] + (1.0 - cutmix_mask_) * batch["images"][-bs:]
    return {"images": np.concatenate([mixup_images, cutmix_images], 0),
            "labels": np.concatenate([batch["labels"][:bs], batch["labels"][2 * bs:3 * bs]], 0),
            "mix_labels": np.concatenate([batch["labels"][bs:2 * bs], batch["labels"][-bs:]], 0),
            "ratio": np.concatenate([mixup_ratio[..., 0, 0, 0], batch["cutmix_ratio"][2 * bs:3 * bs]], 0)}


def tf_my_mixup(batch):
    bs = batch["images"].shape[0] // 2
    ratio = batch["mixup_ratio"][:bs, None, None, None]
    images = ratio * batch["images"][:bs] + (1.0 - ratio) * batch["images"][bs:]
    return {"images": images, "labels": batch["labels"][:bs], "mix_labels": batch["labels"][bs:],
            "ratio": ratio[..., 0, 0, 0]}


def tf_my_cutmix(batch):
    bs = batch["images"].shape[0] // 2
    mask = batch["mask"][:bs]
    images = mask * batch["images"][:bs] + (1.0 - mask) * batch["images"][bs:]
    return {"images": images, "labels": batch["labels"][:bs], "mix_labels": batch["labels"][bs:],
            "ratio": batch["cutmix_ratio"][:bs]}


def tf_augment_normalize(image, num_layers, magnitude, draws):
    """augment_normalize after mixing: clip, cast to uint8, RandAugment, cast back, _normalize_image."""
    image = np.clip(image, 0.0, 255.0).astype(np.uint8)
    image = tf_distort_image_with_randaugment(image, num_layers, magnitude, draws).astype(np.float32)
    image -= np.array([0.485 * 255, 0.456 * 255, 0.406 * 255], np.float32)
    image /= np.array([0.229 * 255, 0.224 * 255, 0.225 * 255], np.float32)
    return image


def tf_targets(labels, mix_labels, ratio, num_classes, label_smoothing):
    """experiment.py Experiment._loss_fn's y."""
    y = np.eye(num_classes, dtype=np.float32)[labels]
    y1 = np.eye(num_classes, dtype=np.float32)[mix_labels]
    y = ratio[:, None] * y + (1. - ratio[:, None]) * y1
    return (1. - label_smoothing) * y + label_smoothing / num_classes


# ----------------------------------------------------------------------------- helpers

def _image(height=24, width=20, seed=0, low=0, high=256):
    return np.random.RandomState(seed).randint(low, high, size=(height, width, 3)).astype(np.uint8)


def _structured_image(height=24, width=20):
    rows, cols = np.mgrid[0:height, 0:width]
    noise = np.random.RandomState(1).randint(0, 30, size=(height, width, 3))
    rgb = np.stack([rows * 7, cols * 9, (rows + cols) * 4], axis=-1) + noise + 20
    return np.clip(rgb, 20, 230).astype(np.uint8)


# ----------------------------------------------------------------------------- RandAugment ops

# Measured with real TensorFlow (see the module docstring).
TF_REPRODUCER = np.array([[[0, 100, 127], [128, 200, 255]]], np.uint8)
TF_SOLARIZE = {128: [0, 100, 127, 127, 55, 0], 256: [255, 155, 128, 127, 55, 0], 384: [0, 100, 127, 127, 55, 0]}
TF_POSTERIZE = {0: [0, 0, 0, 128, 128, 128], 1: [0, 0, 0, 128, 128, 128], 2: [0, 64, 64, 128, 192, 192],
                4: [0, 96, 112, 128, 192, 240]}
# angles_to_projective_transforms(level / 10 * 30 degrees, 192, 256)[:6] (NumPy's float32 cos is 1 ulp off here)
TF_ROTATE_MATRICES = {
    13: ("0x1.8de612p-1", "-0x1.423648p-1", "0x1.620e54p+6", "0x1.423648p-1", "0x1.8de612p-1", "-0x1.d7a570p+5"),
    21: ("0x1.d0e2e4p-2", "-0x1.c83202p-1", "0x1.356a28p+7", "0x1.c83202p-1", "0x1.d0e2e4p-2", "-0x1.ebace8p+5"),
}
# rotate() of RandomState(3)'s 192x256 image at levels 13, 15, 21, each +/- (outputs concatenated)
TF_ROTATE_DIGEST = "19e92445a5b0018e4a859b47b8fc9e1d8f55999f9b7162a93ffa1c15c49b8320"
# distort_image_with_randaugment(_structured_image(), 4, M) for seeds 0..99, draws replayed (concatenated)
TF_RANDAUGMENT_DIGESTS = {
    5: "6319da28e4306e2f8045b922e0a2062226c6cc277f98324b62f9dd6f9015c121",
    10: "78bb6fc0c7f4f0fef73202733e6a66c848da395a11d0cc582d695f6092f67d51",
    15: "36c0770e0160b38684f2365633756998f2a835d94aff041cb231f7138cfdca36",
}


@pytest.mark.parametrize("threshold", [128, 256, 384])
def test_solarize_casts_its_threshold_to_uint8_as_tensorflow_does(threshold):
    ours = ra.solarize(TF_REPRODUCER, threshold)
    assert ours.ravel().tolist() == TF_SOLARIZE[threshold] == tf_solarize(TF_REPRODUCER, threshold).ravel().tolist()
    image = _image(seed=threshold)
    if threshold == 256:  # level 10: Invert
        np.testing.assert_array_equal(ra.apply_op(image, "Solarize", 10), ra.invert(image))
    if threshold == 384:  # level 15: Solarize at level 5
        np.testing.assert_array_equal(ra.apply_op(image, "Solarize", 15), ra.apply_op(image, "Solarize", 5))


@pytest.mark.parametrize("bits", [0, 1, 2, 4])
def test_posterize_keeps_the_top_bit_at_0_bits_as_tensorflow_does(bits):
    ours = ra.posterize(TF_REPRODUCER, bits)
    assert ours.ravel().tolist() == TF_POSTERIZE[bits] == tf_posterize(TF_REPRODUCER, bits).ravel().tolist()
    assert ra.level_to_arg("Posterize", 2) == 0  # levels 0-2 ask for 0 bits


@pytest.mark.parametrize("level", [13, 21])
def test_rotation_matrix_is_tensorflows_float32(level):
    radians = (level / 10.0 * 30.0) * (math.pi / 180.0)
    ours = tfa_angles_to_projective_transforms(radians, 192, 256)[:6]
    assert [float(v).hex() for v in ours] == [float.fromhex(v).hex() for v in TF_ROTATE_MATRICES[level]]


def test_rotate_equals_tensorflow_pixel_for_pixel():
    image = np.random.RandomState(3).randint(0, 256, (192, 256, 3)).astype(np.uint8)
    digest = hashlib.sha256()
    for level in (13, 15, 21):
        for negate in (False, True):
            digest.update(ra.apply_op(image, "Rotate", level, negate=negate).tobytes())
    assert digest.hexdigest() == TF_ROTATE_DIGEST


def _rand_augment_digest(magnitude, image, runs=100):
    digest = hashlib.sha256()
    for seed in range(runs):
        digest.update(ra.DeepMindRandAugment(4, magnitude, rng=np.random.RandomState(seed))(image).tobytes())
    return digest.hexdigest()


@pytest.mark.parametrize("magnitude", [5, 10, 15])
def test_f0_f1_f3_rand_augment_equals_tensorflow_on_replayed_draws(magnitude, monkeypatch):
    """randaugment_405/410/415 (F0, F1-F2, F3-F6): 100 runs, each image identical to DeepMind's code under
    TensorFlow given the same draws; 29 of the runs draw Solarize. With the surface reading of Solarize
    (a threshold above 255 changes nothing) 18 (410) and 29 (415) of the 100 runs differ from TensorFlow,
    and this digest catches it."""
    image = _structured_image()
    assert _rand_augment_digest(magnitude, image) == TF_RANDAUGMENT_DIGESTS[magnitude]
    surface = (lambda im, t: np.where(im.astype(np.int32) < t, im, 255 - im), *ra._OPS["Solarize"][1:])
    monkeypatch.setitem(ra._OPS, "Solarize", surface)
    assert (_rand_augment_digest(magnitude, image) == TF_RANDAUGMENT_DIGESTS[magnitude]) == (magnitude == 5)



SIGNED_OPS = ("Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY")  # _randomly_negate_tensor in level_to_arg


@pytest.mark.parametrize("magnitude", [5, 10, 15])
@pytest.mark.parametrize("name,negate", [(n, False) for n in ra.OPS] + [(n, True) for n in SIGNED_OPS])
def test_each_op_equals_the_transcription_at_deepmind_levels(name, magnitude, negate):
    for image in (_structured_image(), _image(seed=magnitude)):
        center = (5, 17)
        ours = ra.apply_op(image, name, magnitude, negate=negate, cutout_center=center)
        args = tf_level_to_arg(name, float(magnitude), negate)
        theirs = TF_OPS[name](image, center, *args)
        assert ours.dtype == np.uint8 and ours.shape == image.shape
        np.testing.assert_array_equal(ours, theirs)  # measured: identical for every op and level


def test_geometric_ops_are_nonsquare_safe_and_fill_with_gray_128():
    image = _structured_image(12, 30)
    for name in ("Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY"):
        out = ra.apply_op(image, name, 15, negate=True)
        np.testing.assert_array_equal(out, TF_OPS[name](image, None, *tf_level_to_arg(name, 15.0, True)))
    # level 10 translates by 100 pixels: everything leaves a 30-pixel-wide image
    assert (ra.apply_op(image, "TranslateX", 10) == 128).all()


def test_level_args_at_deepmind_levels_and_the_contrast_quirk():
    assert ra.level_to_arg("Rotate", 15) == 45.0  # no clamp at level 10
    assert ra.level_to_arg("Posterize", 5) == 2 and ra.level_to_arg("Posterize", 15) == 6
    assert ra.level_to_arg("Solarize", 5) == 128 and ra.level_to_arg("Solarize", 15) == 384  # 384 -> uint8 128
    assert ra.level_to_arg("Color", 5) == pytest.approx(1.0)  # enhancements are no-ops at level 5
    assert ra.level_to_arg("TranslateX", 15) == 150.0 and ra.level_to_arg("Cutout", 15) == 60
    # contrast blends towards H*W/256 (here 24*20/256 = 1.875 -> 1), not the mean gray level
    image = _structured_image()
    np.testing.assert_array_equal(ra.contrast(image, 0.0), np.full_like(image, 1))


@pytest.mark.parametrize("level,expected", [("randaugment_405", (4, 5)), ("randaugment_410", (4, 10)),
                                            ("randaugment_415", (4, 15)), ("randaugment_9", (2, 9)),
                                            ("cutmix_mixup_randaugment_415", (4, 15))])
def test_level_string_parsed_as_dataset_augment_image(level, expected):
    # dataset.py _augment_image: magnitude = int(name.split('_')[-1]); > 100 carries num_layers
    magnitude = int(level.split("_")[-1])
    num_layers, magnitude = (magnitude // 100, magnitude - magnitude // 100 * 100) if magnitude > 100 else (2, magnitude)
    assert ra.parse_level(level) == expected == (num_layers, magnitude)


@pytest.mark.parametrize("num_layers,magnitude", [(4, 5), (4, 10), (4, 15)])
def test_rand_augment_equals_transcription_on_the_same_draws(num_layers, magnitude):
    image = _structured_image()
    for seed in range(12):
        ours = ra.DeepMindRandAugment(num_layers, magnitude, rng=np.random.RandomState(seed))(image)

        def draws(rng=np.random.RandomState(seed)):  # replays our draw order for the transcription
            while True:
                index = rng.randint(16)
                name = AVAILABLE_OPS[index]
                negate = bool(name in SIGNED_OPS and rng.random() < 0.5)
                center = (rng.randint(image.shape[0]), rng.randint(image.shape[1])) if name == "Cutout" else None
                yield index, negate, center

        theirs = tf_distort_image_with_randaugment(image, num_layers, magnitude, draws())
        np.testing.assert_array_equal(ours, theirs)


def test_rand_augment_picks_all_16_ops_uniformly_and_always_applies_them():
    rng = np.random.RandomState(0)
    picks = [ra.OPS[rng.randint(16)] for _ in range(16000)]
    counts = np.array([picks.count(name) for name in ra.OPS])
    assert counts.min() > 850 and counts.max() < 1150  # 1000 expected each
    image = _structured_image()
    changed = [not np.array_equal(ra.DeepMindRandAugment(1, 15, rng=np.random.RandomState(s))(image), image)
               for s in range(64)]
    assert np.mean(changed) > 0.85  # Solarize@15 (threshold 384 -> 128) leaves values < 128 alone


# ----------------------------------------------------------------------------- Mixup / CutMix


@pytest.mark.parametrize("h,w,r_y,r_x,p", [(16, 20, 3, 17, 0.3), (16, 20, 0, 0, 0.0), (9, 7, 8, 6, 0.9),
                                           (192, 192, 100, 40, 0.5)])
def test_cutmix_mask_equals_cutmix_padding(h, w, r_y, r_x, p):
    ours = cutmix_mask(h, w, r_y, r_x, np.float32(p))
    theirs = tf_cutmix_padding(h, w, r_x, r_y, p)
    np.testing.assert_array_equal(ours, theirs)


def _deepmind_batch(rng, size, h, w, num_classes):
    """A 2B batch as nfnets/dataset.py preprocess leaves it: float images (unclamped bicubic), labels,
    and per image a CutMix mask, its mean and a Mixup ratio."""
    images = rng.uniform(-20, 280, size=(size, h, w, 3)).astype(np.float32)
    labels = rng.randint(0, num_classes, size=size)
    r_y, r_x = rng.randint(0, h, size), rng.randint(0, w, size)
    proportion = rng.random(size).astype(np.float32)
    masks = np.stack([tf_cutmix_padding(h, w, r_x[i], r_y[i], proportion[i]) for i in range(size)])
    return {"images": images, "labels": labels, "mask": masks, "cutmix_ratio": masks.mean(axis=(1, 2, 3)),
            "mixup_ratio": rng.beta(0.2, 0.2, size).astype(np.float32),
            "r_y": r_y, "r_x": r_x, "proportion": proportion}


@pytest.mark.parametrize("mixup_alpha,cutmix", [(0.2, True), (0.2, False), (0.0, True)])
def test_mix_equals_my_mixup_cutmix_and_loss_targets(mixup_alpha, cutmix):
    rng = np.random.RandomState(3)
    batch_size, h, w, num_classes, smoothing = 8, 12, 10, 5, 0.1
    batch = _deepmind_batch(rng, 2 * batch_size, h, w, num_classes)
    if mixup_alpha and cutmix:
        theirs, q = tf_my_mixup_cutmix(batch), batch_size // 2
        first = np.r_[0:q, 2 * q:3 * q]  # DeepMind's example i mixes images first[i] and second[i]
        second = np.r_[q:2 * q, 3 * q:4 * q]
    else:
        theirs = tf_my_mixup(batch) if mixup_alpha else tf_my_cutmix(batch)
        first, second = np.r_[0:batch_size], np.r_[batch_size:2 * batch_size]
    mix = DeepMindMixupCutMix(mixup_alpha, cutmix, num_classes=num_classes, label_smoothing=smoothing)
    draws = MixDraws(batch["mixup_ratio"][first], batch["r_y"][first], batch["r_x"][first],
                     batch["proportion"][first])
    mixed, ratio = mix.mix(batch["images"][first], batch["images"][second], draws)
    np.testing.assert_allclose(mixed, theirs["images"], rtol=0, atol=3e-5)  # measured: identical (0.0)
    np.testing.assert_array_equal(ratio, theirs["ratio"])
    np.testing.assert_array_equal(batch["labels"][first], theirs["labels"])
    np.testing.assert_array_equal(batch["labels"][second], theirs["mix_labels"])
    targets = mix.targets(batch["labels"][first], batch["labels"][second], ratio)
    expected = tf_targets(theirs["labels"], theirs["mix_labels"], theirs["ratio"], num_classes, smoothing)
    np.testing.assert_allclose(targets, expected, rtol=0, atol=1e-7)  # measured: identical (0.0)
    np.testing.assert_allclose(targets.sum(axis=1), 1.0, atol=1e-6)


def test_rand_augment_runs_after_mixing_on_clipped_uint8_images_then_normalizes():
    # augment_before_mix False (experiment_nfnets.py): mix -> clip -> uint8 -> RandAugment -> normalize
    rng = np.random.RandomState(5)
    h, w, num_classes = 16, 14, 4
    images = rng.uniform(-30, 290, size=(4, h, w, 3)).astype(np.float32)
    mix_images = rng.uniform(-30, 290, size=(4, h, w, 3)).astype(np.float32)
    labels, mix_labels = np.array([0, 1, 2, 3]), np.array([3, 2, 1, 0])
    mix = DeepMindMixupCutMix(0.2, True, num_classes=num_classes, label_smoothing=0.1,
                              augment=ra.DeepMindRandAugment(4, 15), rng=np.random.RandomState(9))
    x, targets = mix(images, mix_images, labels, mix_labels)

    replay = np.random.RandomState(9)
    draws = DeepMindMixupCutMix(0.2, True, rng=replay).draw(4, h, w)
    mixed, _ = mix.mix(images, mix_images, draws)
    aug_rng = replay  # the augment continues the batch's generator after the mix draws, as in the pipeline

    def layer_draws():
        while True:
            index = aug_rng.randint(16)
            name = AVAILABLE_OPS[index]
            negate = bool(name in SIGNED_OPS and aug_rng.random() < 0.5)
            yield index, negate, (aug_rng.randint(h), aug_rng.randint(w)) if name == "Cutout" else None

    stream = layer_draws()
    expected = np.stack([tf_augment_normalize(m, 4, 15, stream).transpose(2, 0, 1) for m in mixed])
    np.testing.assert_allclose(x, expected, rtol=0, atol=1e-5)  # measured: identical (0.0)
    assert x.dtype == np.float32 and x.shape == (4, 3, h, w) and targets.shape == (4, num_classes)


def test_mixed_batch_has_deepmind_statistics():
    # Over many draws: Mixup ratios ~ Beta(0.2, 0.2) (mean 0.5, var 1/(4*1.4)) on the first half of the
    # batch; on the second half CutMix ratios, whole pixel counts of the 8x8 box (clipped at the border,
    # so their mean is below the unclipped 0.5: measured 0.23 here)
    mix = DeepMindMixupCutMix(0.2, True, num_classes=2, rng=np.random.RandomState(0))
    ones, zeros = np.full((64, 8, 8, 3), 255, np.uint8), np.zeros((64, 8, 8, 3), np.uint8)
    ratios = []
    for _ in range(40):
        _, targets = mix(ones, zeros, np.zeros(64, int), np.ones(64, int))
        ratios.append((targets[:, 0] - 0.05) / 0.9)
    ratios = np.array(ratios)
    mixup, cut = ratios[:, :32].ravel(), ratios[:, 32:].ravel()
    assert abs(mixup.mean() - 0.5) < 0.03 and abs(mixup.var() - 1 / 5.6) < 0.02
    np.testing.assert_allclose(cut * 64, np.round(cut * 64), atol=1e-4)
    assert 0.15 < cut.mean() < 0.5 and 0 in np.round(cut * 64) and 64 not in np.round(cut * 64)
    with pytest.raises(ValueError, match="even"):
        mix(ones[:3], zeros[:3], np.zeros(3, int), np.ones(3, int))


# ----------------------------------------------------------------------------- evaluation transform


@pytest.mark.parametrize("test_size", [256, 320, 352, 416, 512, 544, 576])
def test_eval_transform_resizes_and_crops_as_decode_and_resize_then_crop(test_size):
    """_decode_and_resize_then_crop with eval_preproc 'resize_crop_32': squash to test + 32, crop at
    ((scale - test) + 1) // 2. Resizing uses PIL's bicubic here (antialiased, like timm), TensorFlow's
    there: that kernel is the one known difference."""
    from PIL import Image

    from src.data.transforms import create_eval_transform

    crop_pct = float("resize_crop_32".split("_")[-1])
    scale_size = int(test_size + crop_pct) if crop_pct > 1.0 else int(float(test_size) / crop_pct)
    offset = ((scale_size - test_size) + 1) // 2
    image = Image.fromarray(_image(300, 370, seed=test_size))
    resized = np.asarray(image.resize((scale_size, scale_size), Image.Resampling.BICUBIC), np.float32)
    crop = resized[offset:offset + test_size, offset:offset + test_size]
    mean, std = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
    expected = ((crop / 255.0 - mean) / std).transpose(2, 0, 1)
    ours = create_eval_transform(test_size, crop_pct=32, crop_mode="pixels", interpolation="bicubic")(image)
    np.testing.assert_allclose(ours, expected, rtol=0, atol=2e-6)  # measured: identical (0.0)


# ----------------------------------------------------------------------------- the F1 / F3 training pipelines


def tf_decode_and_center_crop(image, image_size):
    """dataset.py _decode_and_center_crop on a decoded image (image_size square)."""
    image_height, image_width = image.shape[:2]
    scale = min(np.float32(image_height) / np.float32(image_size + 32), np.float32(image_width) / np.float32(image_size + 32))
    padded_center_crop_height = int(scale * np.float32(image_size))
    padded_center_crop_width = int(scale * np.float32(image_size))
    offset_height = ((image_height - padded_center_crop_height) + 1) // 2
    offset_width = ((image_width - padded_center_crop_width) + 1) // 2
    return image[offset_height:offset_height + padded_center_crop_height,
                 offset_width:offset_width + padded_center_crop_width]


def tf_preprocess_train(image, image_size, rng):
    """dataset.py _preprocess_image (is_training): _decode_and_random_crop, random_flip_left_right, resize.
    sample_distorted_bounding_box's and the flip's draws come from ``rng`` (TensorFlow's own stream cannot be
    replayed: tests/data/test_tf_image.py compares its statistics); tf.image.resize BICUBIC is resize_bicubic,
    bit-exact with TensorFlow (same file)."""
    from src.data.tf_image import resize_bicubic, sample_distorted_bounding_box

    top, left, h, w = sample_distorted_bounding_box(image.shape[0], image.shape[1], rng, min_object_covered=0.1,
                                                    aspect_ratio_range=(3 / 4, 4 / 3), area_range=(0.08, 1.0),
                                                    max_attempts=10)
    crop = image[top:top + h, left:left + w]
    if crop.shape == image.shape:  # "If the random crop failed fall back to center crop."
        crop = tf_decode_and_center_crop(image, image_size)
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    return resize_bicubic(crop, image_size, image_size)


@pytest.mark.parametrize("variant,magnitude", [("dm_nfnet_f1", 10), ("dm_nfnet_f3", 15)])
def test_deepmind_f1_f3_pipeline_equals_tensorflow_on_replayed_draws(variant, magnitude):
    """The recipe's transforms (builders.build_train_transforms of src/configs/deepmind/<variant>.yaml) on
    decoded images against dataset.py's order with TensorFlow's semantics: per image crop, flip, bicubic
    resize to floats; my_mixup_cutmix on the floats; per example clip, uint8, distort_image_with_randaugment
    (Solarize's uint8 wrap included), normalize. The same draws replayed on both sides."""
    import os

    from src import builders
    from src.config import load_config

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cfg = load_config(os.path.join(root, "src", "configs", "deepmind", f"{variant}.yaml"),
                      overrides=dict(input_size=64, num_classes=4, batch_size=8, device_target="CPU"))
    assert (cfg.train_crop, cfg.train_resize, cfg.auto_augment) == ("deepmind", "tf_bicubic", f"randaugment_4{magnitude}")
    transform, mix = builders.build_train_transforms(cfg)
    size, batch = 64, 8
    rng = np.random.RandomState(magnitude)
    shapes = [(75, 100), (100, 67), (64, 64), (120, 90)]
    decoded = [rng.randint(0, 256, shapes[i % 4] + (3,)).astype(np.uint8) for i in range(2 * batch)]
    labels, mix_labels = np.arange(batch) % 4, (np.arange(batch) + 1) % 4
    from PIL import Image

    ours_first = np.stack([transform(Image.fromarray(decoded[i]), rng=np.random.RandomState(i)) for i in range(batch)])
    ours_second = np.stack([transform(Image.fromarray(decoded[batch + i]), rng=np.random.RandomState(batch + i))
                            for i in range(batch)])
    assert ours_first.dtype == np.float32 and (ours_first.min() < 0 or ours_first.max() > 255)  # unclamped floats
    x, targets = mix(ours_first, ours_second, labels, mix_labels, rng=np.random.RandomState(99))

    first = np.stack([tf_preprocess_train(decoded[i], size, np.random.RandomState(i)) for i in range(batch)])
    second = np.stack([tf_preprocess_train(decoded[batch + i], size, np.random.RandomState(batch + i))
                       for i in range(batch)])
    np.testing.assert_array_equal(ours_first, first)
    np.testing.assert_array_equal(ours_second, second)
    replay = np.random.RandomState(99)
    draws = DeepMindMixupCutMix(0.2, True, rng=replay).draw(batch, size, size)
    q = batch // 2  # DeepMind's 2B layout: Mixup of (i, q + i), CutMix of (2q + i, 3q + i)
    masks = [tf_cutmix_padding(size, size, draws.center_x[i], draws.center_y[i], draws.proportion[i])
             for i in range(batch)]
    layout = {"images": np.concatenate([first[:q], second[:q], first[q:], second[q:]]),
              "labels": np.concatenate([labels[:q], mix_labels[:q], labels[q:], mix_labels[q:]]),
              "mixup_ratio": np.concatenate([draws.mixup_ratio[:q]] * 4),
              "mask": np.stack(masks[q:] * 4), "cutmix_ratio": np.array([m.mean() for m in masks[q:]] * 4, np.float32)}
    theirs = tf_my_mixup_cutmix(layout)

    drawn = []

    def layer_draws():
        while True:
            index = replay.randint(16)
            name = AVAILABLE_OPS[index]
            drawn.append(name)
            negate = bool(name in SIGNED_OPS and replay.random() < 0.5)
            yield index, negate, (replay.randint(size), replay.randint(size)) if name == "Cutout" else None

    stream = layer_draws()
    expected = np.stack([tf_augment_normalize(m, 4, magnitude, stream).transpose(2, 0, 1) for m in theirs["images"]])
    np.testing.assert_array_equal(x, expected)  # measured: identical
    assert "Solarize" in drawn  # at level 10 / 15 its threshold wraps (256 -> 0, 384 -> 128)
    np.testing.assert_allclose(targets, tf_targets(theirs["labels"], theirs["mix_labels"], theirs["ratio"], 4, 0.1),
                               rtol=0, atol=1e-7)
