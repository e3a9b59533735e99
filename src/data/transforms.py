"""Image loading and the per-image train / eval transforms (PIL + NumPy, no MindSpore, no torch).

Every resize here is done by PIL (``Image.resize``, antialiased bicubic by
default) - the same library and code path timm uses - except DeepMind's training resize
('tf_bicubic', src/data/tf_image.py) when a recipe asks for it - so one PIL image goes
through exactly the same arithmetic in training, in eval.py, in evaluation
during training and in preprocess.py. Both factories return a callable
``(PIL.Image) -> np.ndarray`` float32 CHW, normalized by ``mean`` / ``std``.

Random steps (crop, flip, and the augment package) take an ``rng`` (np.random.RandomState)
when called; ``Compose`` passes its own call's ``rng`` to them. The pipeline gives every sample
its own generator, seeded from (seed, epoch, index) (see augment/random_state.py, dataset.py).
"""
import math

import numpy as np
from PIL import Image, UnidentifiedImageError

from .augment.random_state import call_step, resolve_rng, takes_rng
from .folder import DatasetError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_INTERPOLATIONS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "lanczos": Image.Resampling.LANCZOS,
    "box": Image.Resampling.BOX,
    "hamming": Image.Resampling.HAMMING,
}
# timm's 'random' interpolation picks one of these per image
_RANDOM_INTERPOLATIONS = (Image.Resampling.BILINEAR, Image.Resampling.BICUBIC)
EVAL_CROP_MODES = ("pixels", "squash", "shorter")


class UnreadableImageError(DatasetError):
    """An image file that cannot be decoded; ``path`` names it.

    Constructible from the message alone: MindSpore re-raises a worker's exception
    in the main process as ``type(exc)(formatted_traceback)``.
    """

    def __init__(self, message, path=None):
        super().__init__(message)
        self.path = path


def pil_interpolation(name):
    """PIL resampling filter for a timm-style name ('bicubic', 'bilinear', ...)."""
    try:
        return _INTERPOLATIONS[name]
    except KeyError:
        raise ValueError(f"unknown interpolation '{name}', expected one of {sorted(_INTERPOLATIONS)}") from None


# ----------------------------------------------------------------------------- loading

def _high_bit_depth_to_l(img):
    """16/32-bit integer or float grayscale -> 8-bit 'L'.

    'I;16*' (16-bit PNG/TIFF) and 'I' (32-bit int; older Pillow opened 16-bit PNGs
    this way) are taken as 0..65535 and mapped to 0..255 with rounding; 'F' (float)
    is clipped to 0..255 and rounded, as Pillow's own F -> L conversion does.
    """
    arr = np.asarray(img)
    if img.mode == "F":
        out = np.clip(np.rint(arr), 0, 255)
    else:
        arr = np.clip(arr.astype(np.int64), 0, 65535)
        out = (arr * 255 + 32767) // 65535
    return Image.fromarray(out.astype(np.uint8))  # 2-D uint8: mode L


def to_rgb(img):
    """Convert any PIL mode to 8-bit RGB.

    Alpha (RGBA, LA, PA, palette transparency) is dropped, not composited: the RGB
    values under the alpha channel are kept, as timm's and torchvision's loaders do
    with ``convert('RGB')``, so images load the same way the reference weights saw them.
    Grayscale is replicated to 3 channels; CMYK uses Pillow's conversion (Adobe's
    inverted-CMYK JPEGs are handled by the JPEG decoder).
    """
    if img.mode == "RGB":
        return img
    if img.mode.startswith("I") or img.mode == "F":
        img = _high_bit_depth_to_l(img)
    elif img.mode == "P":
        img = img.convert("RGBA")  # P with transparency straight to RGB makes Pillow warn
    return img.convert("RGB")


def load_image(path):
    """Open ``path`` and return a fully decoded 8-bit RGB PIL image.

    Raises UnreadableImageError (a DatasetError naming the file) for missing,
    empty, truncated, corrupt or non-image files.
    """
    try:
        with Image.open(path) as img:
            img.load()  # decode now: a truncated file fails here, not later in a transform
            return to_rgb(img)
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UnreadableImageError(f"unreadable image {path}: {reason}", path) from exc


# ----------------------------------------------------------------------------- shared steps

class ToNormalizedCHW:
    """uint8 HWC image -> float32 CHW, ``(x / 255 - mean) / std``.

    The operations and their float32 order match torchvision's ToTensor + Normalize,
    so the result equals timm's eval tensor bit for bit.
    """

    def __init__(self, mean=IMAGENET_MEAN, std=IMAGENET_STD):
        self.mean = np.asarray(mean, dtype=np.float32).reshape(3, 1, 1)
        self.std = np.asarray(std, dtype=np.float32).reshape(3, 1, 1)

    def __call__(self, img):
        hwc = np.asarray(img, dtype=np.uint8)
        # one output array, converted and transposed in one copy, then in place: 6x faster than
        # a chain of temporaries (0.70 -> 0.11 ms at 192x192), same float32 operations and order
        chw = np.empty((hwc.shape[2], hwc.shape[0], hwc.shape[1]), np.float32)
        np.copyto(chw, hwc.transpose(2, 0, 1))
        chw /= np.float32(255)
        chw -= self.mean
        chw /= self.std
        return chw


def center_crop(img, size):
    """Center crop ``size`` (int or (h, w)) with torchvision's offsets: round((W - w) / 2) (half to even)."""
    height, width = (size, size) if isinstance(size, int) else size
    if height > img.height or width > img.width:
        raise ValueError(f"center crop {height}x{width} is larger than the image {img.height}x{img.width}")
    top = int(round((img.height - height) / 2.0))
    left = int(round((img.width - width) / 2.0))
    return img.crop((left, top, left + width, top + height))


# ----------------------------------------------------------------------------- train

class RandomResizedCrop:
    """Random area / aspect crop resized to ``size`` x ``size`` (timm's RandomResizedCropAndInterpolation).

    Ten attempts draw an area fraction uniformly in ``scale`` and a log-uniform
    aspect ratio in ``ratio``; the first crop that fits is used. Otherwise the
    center crop with the aspect ratio clamped to ``ratio`` (the whole image when it fits).
    """

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), interpolation="bicubic", rng=None):
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            raise ValueError(f"scale {scale} and ratio {ratio} must be (min, max)")
        self.size = size
        self.scale = scale
        self.ratio = ratio
        self.interpolation = interpolation
        self.resample = None if interpolation == "random" else pil_interpolation(interpolation)
        self.rng = rng

    def get_params(self, width, height, rng=None):
        """Crop box (top, left, crop_height, crop_width) for an image of ``width`` x ``height``."""
        rng = resolve_rng(rng, self.rng)
        area = width * height
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(10):
            target_area = rng.uniform(*self.scale) * area
            aspect = math.exp(rng.uniform(*log_ratio))
            w = int(round(math.sqrt(target_area * aspect)))
            h = int(round(math.sqrt(target_area / aspect)))
            if 0 < w <= width and 0 < h <= height:
                return rng.randint(0, height - h + 1), rng.randint(0, width - w + 1), h, w
        in_ratio = width / height
        if in_ratio < self.ratio[0]:
            w, h = width, int(round(width / self.ratio[0]))
        elif in_ratio > self.ratio[1]:
            w, h = int(round(height * self.ratio[1])), height
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def __call__(self, img, rng=None):
        rng = resolve_rng(rng, self.rng)
        top, left, h, w = self.get_params(img.width, img.height, rng)
        resample = self.resample
        if resample is None:
            resample = _RANDOM_INTERPOLATIONS[rng.randint(len(_RANDOM_INTERPOLATIONS))]
        return img.crop((left, top, left + w, top + h)).resize((self.size, self.size), resample)


def deepmind_center_crop_box(height, width, size):
    """nfnets/dataset.py _decode_and_center_crop: (top, left, side, side), the centred square of side
    int(min(H, W) / (size + 32) * size) (float32 as TensorFlow), offsets rounded up."""
    scale = min(np.float32(height) / np.float32(size + 32), np.float32(width) / np.float32(size + 32))
    side = int(scale * np.float32(size))
    return (height - side + 1) // 2, (width - side + 1) // 2, side, side


class DeepMindRandomCrop:
    """DeepMind's training crop (nfnets/dataset.py _decode_and_random_crop), not resized.

    The box of TensorFlow's sample_distorted_bounding_box (src/data/tf_image.py) with DeepMind's
    arguments: min_object_covered 0.1, aspect ratios ``ratio`` (3/4-4/3), areas ``scale`` (0.08-1),
    10 attempts. When the box is the whole image (no attempt fitted), DeepMind's center crop
    (deepmind_center_crop_box) instead. Mean area on 375x500 images: 0.39 (timm's: 0.43).
    """

    def __init__(self, size, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), rng=None):
        if scale[0] > scale[1] or ratio[0] > ratio[1]:
            raise ValueError(f"scale {scale} and ratio {ratio} must be (min, max)")
        self.size = size
        self.scale = tuple(scale)
        self.ratio = tuple(ratio)
        self.rng = rng

    def get_params(self, width, height, rng=None):
        """Crop box (top, left, crop_height, crop_width) for an image of ``width`` x ``height``."""
        from .tf_image import sample_distorted_bounding_box

        box = sample_distorted_bounding_box(height, width, resolve_rng(rng, self.rng), min_object_covered=0.1,
                                            aspect_ratio_range=self.ratio, area_range=self.scale, max_attempts=10)
        if box[2:] == (height, width):
            return deepmind_center_crop_box(height, width, self.size)
        return box

    def __call__(self, img, rng=None):
        top, left, h, w = self.get_params(img.width, img.height, rng)
        return img.crop((left, top, left + w, top + h))


class Resize:
    """Resize to ``size`` x ``size`` with PIL (``interpolation``, antialiased) or with TensorFlow's bicubic
    ('tf_bicubic': src/data/tf_image.py resize_bicubic, unclamped float32 HWC, as DeepMind's pipeline)."""

    def __init__(self, size, interpolation="bicubic"):
        self.size = size
        self.interpolation = interpolation
        self.resample = None if interpolation == "tf_bicubic" else pil_interpolation(interpolation)

    def __call__(self, img):
        if self.resample is None:
            from .tf_image import resize_bicubic

            return resize_bicubic(np.asarray(img), self.size, self.size)
        return img.resize((self.size, self.size), self.resample)


class RandomHorizontalFlip:
    def __init__(self, prob=0.5, rng=None):
        self.prob = prob
        self.rng = rng

    def __call__(self, img, rng=None):
        if resolve_rng(rng, self.rng).random() < self.prob:
            return img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return img


class Compose:
    """Apply callables in order (picklable, so it can run in worker processes); the steps that draw
    random numbers (those taking an ``rng`` keyword) get the call's ``rng``."""

    def __init__(self, steps):
        self.steps = list(steps)
        self.random_steps = [takes_rng(step) for step in self.steps]

    def __call__(self, x, rng=None):
        for step, takes in zip(self.steps, self.random_steps):
            x = call_step(step, x, rng, takes)
        return x

    def __repr__(self):
        return "Compose(" + ", ".join(type(s).__name__ for s in self.steps) + ")"


def create_rand_augment(auto_augment, input_size=224, mean=IMAGENET_MEAN, interpolation="bicubic"):
    """RandAugment from its config string: timm's 'rand-m5-n4-mstd0.5-inc1' (per-op probability,
    magnitude noise, PIL) or DeepMind's 'randaugment_405' (nfnets/autoaugment.py semantics)."""
    if auto_augment.startswith("randaugment_"):
        from .augment import DeepMindRandAugment  # lazy: the augment package is optional for eval

        return DeepMindRandAugment.from_level(auto_augment)
    if not auto_augment.startswith("rand-"):
        raise ValueError(f"auto_augment '{auto_augment}': only RandAugment strings ('rand-...', "
                         f"'randaugment_NNN') are supported")
    from .augment import rand_augment_transform

    hparams = {
        "translate_const": int(input_size * 0.45),
        "img_mean": tuple(min(255, round(255 * m)) for m in mean),
        "interpolation": interpolation,
    }
    return rand_augment_transform(auto_augment, hparams)


def create_train_transform(input_size, interpolation="bicubic", scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3),
                           hflip=0.5, auto_augment=None, mean=IMAGENET_MEAN, std=IMAGENET_STD,
                           re_prob=0.0, re_mode="pixel", re_count=1, normalize=True, crop="timm", resize="pil"):
    """Training transform: ``(PIL RGB image) -> float32 CHW array`` of ``input_size`` x ``input_size``.

    Args:
        input_size: output side in pixels (F0 trains at 192).
        interpolation: resize filter of the random resized crop and of RandAugment's
            geometric ops ('bicubic', 'bilinear', ..., or 'random' = bilinear/bicubic per image).
        scale: range of the crop area as a fraction of the image area.
        ratio: range of the crop aspect ratio (width / height), sampled log-uniformly.
        hflip: probability of a horizontal flip.
        auto_augment: RandAugment string (see create_rand_augment), or None / ''.
        mean, std: per-channel normalization of the 0..1 image.
        re_prob, re_mode, re_count: random erasing on the normalized array (off when re_prob is 0).
        normalize: False stops after the crop and flip and returns the HWC uint8 array (DeepMind's
            mix scheme augments and normalizes after mixing); auto_augment and re_prob must then be off.
        crop: 'timm' (RandomResizedCrop) or 'deepmind' (DeepMindRandomCrop: TensorFlow's
            sample_distorted_bounding_box); then flip, then resize, in DeepMind's order.
        resize: with crop 'deepmind': 'pil' (``interpolation``, to uint8) or 'tf_bicubic' (DeepMind's:
            TensorFlow's bicubic to unclamped float32, so mixing sees floats; with normalize, DeepMind's
            augment_normalize follows: clip to uint8, DeepMind's RandAugment, normalize by MEAN_RGB/STDDEV_RGB).
    """
    if crop == "deepmind":
        steps = [DeepMindRandomCrop(input_size, scale=tuple(scale), ratio=tuple(ratio))]
    elif crop == "timm" and resize == "pil":
        steps = [RandomResizedCrop(input_size, scale=tuple(scale), ratio=tuple(ratio), interpolation=interpolation)]
    else:
        raise ValueError(f"crop {crop!r} with resize {resize!r}: use crop 'timm' (with resize 'pil') or 'deepmind'")
    if hflip > 0:
        steps.append(RandomHorizontalFlip(hflip))
    if crop == "deepmind":
        steps.append(Resize(input_size, "tf_bicubic" if resize == "tf_bicubic" else interpolation))
    if resize == "tf_bicubic" and normalize:
        if (auto_augment and not auto_augment.startswith("randaugment_")) or re_prob > 0:
            raise ValueError("resize 'tf_bicubic' follows DeepMind's pipeline: auto_augment must be DeepMind's "
                             "'randaugment_NNN' or off, and re_prob 0")
        from .augment import AugmentNormalize

        steps.append(AugmentNormalize(create_rand_augment(auto_augment) if auto_augment else None))
        return Compose(steps)
    if not normalize:
        if auto_augment or re_prob > 0:
            raise ValueError("normalize=False returns the cropped image: auto_augment and re_prob must be off")
        steps.append(np.asarray)
        return Compose(steps)
    if auto_augment:
        steps.append(create_rand_augment(auto_augment, input_size, mean, interpolation))
    steps.append(ToNormalizedCHW(mean, std))
    if re_prob > 0:
        from .augment import RandomErasing

        steps.append(RandomErasing(re_prob, mode=re_mode, max_count=re_count))
    return Compose(steps)


# ----------------------------------------------------------------------------- eval

def eval_resize_size(test_input_size, crop_pct, crop_mode="pixels"):
    """Side the image is resized to before the center crop (the shorter side for 'shorter').

    'pixels': ``test_input_size + crop_pct``, crop_pct a whole number of pixels (DeepMind's
    NFNet eval_preproc 'resize_crop_32' squashes to test + 32). 'squash' / 'shorter': timm's
    ``floor(test_input_size / crop_pct)``, crop_pct a fraction in (0, 1] (timm's dm_nfnet_f0:
    floor(256 / 0.9) = 284).
    """
    if crop_mode == "pixels":
        if crop_pct < 0 or int(crop_pct) != crop_pct:
            raise ValueError(f"crop_pct={crop_pct}: crop_mode 'pixels' expects a whole number of pixels >= 0")
        return test_input_size + int(crop_pct)
    if crop_mode in ("squash", "shorter"):
        if not 0 < crop_pct <= 1:
            raise ValueError(f"crop_pct={crop_pct}: crop_mode '{crop_mode}' expects a fraction in (0, 1]")
        return math.floor(test_input_size / crop_pct)
    raise ValueError(f"unknown crop_mode '{crop_mode}', expected one of {EVAL_CROP_MODES}")


class ResizeForEval:
    """Resize both sides to ``size`` (squash) or the shorter side to ``size`` keeping the aspect ratio.

    The longer side of 'shorter' is ``int(size * long / short)``, as torchvision's Resize(int).
    """

    def __init__(self, size, keep_aspect, resample):
        self.size = size
        self.keep_aspect = keep_aspect
        self.resample = resample

    def __call__(self, img):
        width, height = img.size
        if not self.keep_aspect:
            new = (self.size, self.size)
        elif width <= height:
            new = (self.size, int(self.size * height / width))
        else:
            new = (int(self.size * width / height), self.size)
        return img.resize(new, self.resample)


class CenterCrop:
    def __init__(self, size):
        self.size = size

    def __call__(self, img):
        return center_crop(img, self.size)


def create_eval_transform(test_input_size, crop_pct=32, crop_mode="pixels", interpolation="bicubic",
                          mean=IMAGENET_MEAN, std=IMAGENET_STD):
    """THE evaluation transform (eval.py, evaluation during training, preprocess.py).

    Resize with PIL, center crop ``test_input_size`` x ``test_input_size``, scale to
    0..1, normalize; returns ``(PIL RGB image) -> float32 CHW array``.

    Args:
        test_input_size: output side in pixels (F0 evaluates at 256).
        crop_pct: with crop_mode 'pixels' an integer margin: squash-resize to
            ``test_input_size + crop_pct`` (DeepMind's recipe: 32). With 'squash' /
            'shorter' timm's fraction: resize to ``floor(test_input_size / crop_pct)``.
        crop_mode: 'pixels' (squash, margin in pixels), 'squash' (both sides, timm
            crop_mode='squash') or 'shorter' (shorter side, aspect kept, timm crop_mode='center').
        interpolation: PIL resize filter name.
        mean, std: per-channel normalization of the 0..1 image.

    The crop offset is torchvision's round((resized - test) / 2), half to even; DeepMind's
    rounds half up, which differs only for odd margins (not for 32). PIL's bicubic
    antialiases when downscaling, TensorFlow's (DeepMind) does not: this follows timm.
    """
    size = eval_resize_size(test_input_size, crop_pct, crop_mode)
    return Compose([
        ResizeForEval(size, keep_aspect=crop_mode == "shorter", resample=pil_interpolation(interpolation)),
        CenterCrop(test_input_size),
        ToNormalizedCHW(mean, std),
    ])
