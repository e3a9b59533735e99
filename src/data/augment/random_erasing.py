"""Random erasing (Zhong et al., 2017, arXiv 1708.04896) on normalized CHW arrays.

Same semantics as timm's RandomErasing: with probability ``probability`` an
image gets between ``min_count`` and ``max_count`` rectangles whose total
target area is a uniform fraction in [min_area, max_area] of the image
(split evenly between the rectangles) and whose aspect ratio is log-uniform in
[min_aspect, max_aspect]. A rectangle that does not fit is redrawn, up to ten
times, then skipped. Runs after normalization, so 'const' writes the dataset
mean (0) and the random modes write standard normal values.
"""
import math

import numpy as np

from .random_state import resolve_rng

_MODES = ("const", "rand", "pixel")
_ATTEMPTS = 10


class RandomErasing:
    """Erase random rectangles of a CHW image or of each image in an NCHW batch.

    Args:
        probability: chance that an image is erased at all.
        min_area, max_area: range of the erased fraction of the image.
        min_aspect: smallest height / width ratio; max_aspect defaults to 1 / min_aspect.
        mode: 'const' fills zeros, 'rand' one normal value per channel,
            'pixel' a normal value per pixel and channel.
        min_count, max_count: number of rectangles per image, uniform in
            [min_count, max_count]; max_count defaults to min_count.
        num_splits: for a batch, leave the first batch_size // num_splits
            images untouched (the clean split of augmentation splits); 0 or 1 erases all.
        rng: default np.random.RandomState; one passed to the call wins, None: NumPy's global state
            (see random_state.py).

    Returns a float32 array; the input is not modified.
    """

    def __init__(self, probability=0.5, min_area=0.02, max_area=1 / 3, min_aspect=0.3, max_aspect=None,
                 mode="const", min_count=1, max_count=None, num_splits=0, rng=None):
        mode = (mode or "const").lower()
        if mode not in _MODES:
            raise ValueError(f"unknown random erasing mode {mode!r}, use one of {_MODES}")
        self.probability = probability
        self.min_area = min_area
        self.max_area = max_area
        self.log_aspect_range = (math.log(min_aspect), math.log(max_aspect or 1 / min_aspect))
        self.mode = mode
        self.min_count = min_count
        self.max_count = max_count or min_count
        self.num_splits = num_splits
        self.rng = rng

    def __call__(self, img, rng=None):
        rng = resolve_rng(rng, self.rng)
        img = np.array(img, dtype=np.float32)  # a private, writable copy
        if img.ndim == 3:
            self._erase(img, rng)
        elif img.ndim == 4:
            first = len(img) // self.num_splits if self.num_splits > 1 else 0
            for image in img[first:]:
                self._erase(image, rng)
        else:
            raise ValueError(f"RandomErasing expects a CHW or NCHW array, got shape {img.shape}")
        return img

    def _erase(self, img, rng):
        """Erase rectangles of one CHW image in place."""
        if rng.random() > self.probability:
            return
        channels, height, width = img.shape
        count = self.min_count
        if self.max_count != self.min_count:
            count = rng.randint(self.min_count, self.max_count + 1)
        for _ in range(count):
            for _ in range(_ATTEMPTS):
                area = rng.uniform(self.min_area, self.max_area) * height * width / count
                aspect = math.exp(rng.uniform(*self.log_aspect_range))
                h = int(round(math.sqrt(area * aspect)))
                w = int(round(math.sqrt(area / aspect)))
                if h < height and w < width:
                    top = rng.randint(0, height - h + 1)
                    left = rng.randint(0, width - w + 1)
                    img[:, top:top + h, left:left + w] = self._patch(rng, channels, h, w)
                    break

    def _patch(self, rng, channels, h, w):
        if self.mode == "pixel":
            return rng.normal(size=(channels, h, w))
        if self.mode == "rand":
            return rng.normal(size=(channels, 1, 1))
        return 0.0

    def __repr__(self):
        return (f"RandomErasing(p={self.probability}, mode={self.mode}, "
                f"count=({self.min_count}, {self.max_count}))")
