"""Mixup (Zhang et al., 2017) and CutMix (Yun et al., 2019) on NCHW float32 batches.

Same semantics and the same sequence of NumPy draws as timm's Mixup
(timm/data/mixup.py, 1.0.31), so a seeded NumPy state gives timm's result.
Image i is mixed with image B-1-i (the batch reversed); the soft target of
image i is lam * onehot(y_i) + (1 - lam) * onehot(y_{B-1-i}), with label
smoothing applied to both one-hot vectors first.

Modes: 'batch' draws one lambda (and one CutMix box) for the whole batch,
'elem' one per image, 'pair' one per pair (i, B-1-i), both images of a pair
swapping the same box. For CutMix, lambda is recomputed from the box area
after clipping to the image ("lambda correction").
"""
import numpy as np

from .random_state import resolve_rng

_MODES = ("batch", "pair", "elem")


def mixup_target(target, num_classes, lam=1.0, smoothing=0.0):
    """Label-smoothed one-hot targets mixed with the reversed batch's.

    ``lam`` is a scalar or one value per image (shape (B,) or (B, 1)).
    Returns float32 targets of shape (B, num_classes); each row sums to 1.
    """
    target = np.asarray(target).reshape(-1).astype(np.int64)
    if target.size and (target.min() < 0 or target.max() >= num_classes):
        raise ValueError(f"labels must be in [0, {num_classes}), got {target.min()}..{target.max()}")
    off_value = smoothing / num_classes
    on_value = 1.0 - smoothing + off_value
    one_hot = np.full((len(target), num_classes), off_value, dtype=np.float64)
    one_hot[np.arange(len(target)), target] = on_value
    lam = np.asarray(lam, dtype=np.float64)
    if lam.ndim == 1:
        lam = lam[:, None]
    return (one_hot * lam + one_hot[::-1] * (1.0 - lam)).astype(np.float32)


def rand_bbox(img_shape, lam, margin=0.0, count=None, rng=None):
    """A CutMix box covering about 1 - lam of the image, clipped to it.

    The box has the image's aspect ratio and side sqrt(1 - lam) of the image's;
    its center is uniform over the image, optionally kept ``margin`` (a
    fraction of the box size) away from the borders. Returns
    (y_low, y_high, x_low, x_high), arrays of length ``count`` if given.
    """
    rng = resolve_rng(rng)
    img_h, img_w = img_shape[-2:]
    ratio = np.sqrt(1 - lam)
    cut_h, cut_w = int(img_h * ratio), int(img_w * ratio)
    margin_y, margin_x = int(margin * cut_h), int(margin * cut_w)
    center_y = rng.randint(margin_y, img_h - margin_y, size=count)
    center_x = rng.randint(margin_x, img_w - margin_x, size=count)
    y_low = np.clip(center_y - cut_h // 2, 0, img_h)
    y_high = np.clip(center_y + (cut_h + 1) // 2, 0, img_h)
    x_low = np.clip(center_x - cut_w // 2, 0, img_w)
    x_high = np.clip(center_x + (cut_w + 1) // 2, 0, img_w)
    return y_low, y_high, x_low, x_high


def rand_bbox_minmax(img_shape, minmax, count=None, rng=None):
    """A CutMix box whose height and width are uniform fractions in [min, max) of the image's."""
    rng = resolve_rng(rng)
    img_h, img_w = img_shape[-2:]
    cut_h = rng.randint(int(img_h * minmax[0]), int(img_h * minmax[1]), size=count)
    cut_w = rng.randint(int(img_w * minmax[0]), int(img_w * minmax[1]), size=count)
    y_low = rng.randint(0, img_h - cut_h + 1, size=count)
    x_low = rng.randint(0, img_w - cut_w + 1, size=count)
    return y_low, y_low + cut_h, x_low, x_low + cut_w


def cutmix_bbox_and_lam(img_shape, lam, ratio_minmax=None, correct_lam=True, count=None, rng=None):
    """Draw a CutMix box; return it and lambda = 1 - box area / image area when correcting.

    Min-max boxes ignore ``lam`` when drawn, so their lambda is always recomputed.
    """
    if ratio_minmax is not None:
        box = rand_bbox_minmax(img_shape, ratio_minmax, count=count, rng=rng)
    else:
        box = rand_bbox(img_shape, lam, count=count, rng=rng)
    if correct_lam or ratio_minmax is not None:
        y_low, y_high, x_low, x_high = box
        lam = 1.0 - (y_high - y_low) * (x_high - x_low) / float(img_shape[-2] * img_shape[-1])
    return box, lam


class Mixup:
    """Mix a batch and its labels with Mixup or CutMix.

    Args:
        mixup_alpha: Beta(alpha, alpha) parameter of Mixup's lambda; 0 disables Mixup.
        cutmix_alpha: Beta parameter of CutMix's lambda; 0 disables CutMix.
        cutmix_minmax: (min, max) box side fractions; enables CutMix with
            min-max boxes instead of lambda-sized ones (forces cutmix_alpha 1).
        prob: probability of mixing a batch ('batch') or an image/pair.
        switch_prob: probability of CutMix instead of Mixup when both are enabled.
        mode: 'batch', 'pair' or 'elem'; pair and elem need an even batch.
        correct_lam: recompute CutMix lambda from the clipped box area.
        label_smoothing: smoothing folded into the soft targets.
        num_classes: width of the soft targets.
        rng: default np.random.RandomState; one passed to the call wins, None: NumPy's global state
            (see random_state.py).

    ``mixup_enabled`` may be set to False by a training loop to stop mixing.
    """

    def __init__(self, mixup_alpha=1.0, cutmix_alpha=0.0, cutmix_minmax=None, prob=1.0, switch_prob=0.5,
                 mode="batch", correct_lam=True, label_smoothing=0.1, num_classes=1000, rng=None):
        if mode not in _MODES:
            raise ValueError(f"unknown mixup mode {mode!r}, use one of {_MODES}")
        if cutmix_minmax is not None:
            if len(cutmix_minmax) != 2:
                raise ValueError(f"cutmix_minmax must be (min, max), got {cutmix_minmax!r}")
            cutmix_alpha = 1.0
        if mixup_alpha <= 0 and cutmix_alpha <= 0:
            raise ValueError("Mixup needs mixup_alpha > 0, cutmix_alpha > 0 or cutmix_minmax")
        self.mixup_alpha = mixup_alpha
        self.cutmix_alpha = cutmix_alpha
        self.cutmix_minmax = cutmix_minmax
        self.mix_prob = prob
        self.switch_prob = switch_prob
        self.mode = mode
        self.correct_lam = correct_lam
        self.label_smoothing = label_smoothing
        self.num_classes = num_classes
        self.rng = rng
        self.mixup_enabled = True

    def __call__(self, x, target, rng=None):
        """Return (mixed float32 copy of the NCHW batch ``x``, float32 soft targets)."""
        rng = resolve_rng(rng, self.rng)
        x = np.array(x, dtype=np.float32)
        if x.ndim != 4:
            raise ValueError(f"Mixup expects an NCHW batch, got shape {x.shape}")
        if len(target) != len(x):
            raise ValueError(f"Mixup got {len(x)} images but {len(target)} labels")
        if self.mode != "batch" and len(x) % 2:
            raise ValueError(f"Mixup mode {self.mode!r} needs an even batch size, got {len(x)}")
        if self.mode == "elem":
            lam = self._mix_elem(x, rng)
        elif self.mode == "pair":
            lam = self._mix_pair(x, rng)
        else:
            lam = self._mix_batch(x, rng)
        return x, mixup_target(target, self.num_classes, lam, self.label_smoothing)

    def _draw_lam(self, rng, size=None):
        """Lambda(s) and CutMix flag(s) before the ``prob`` gate, in timm's draw order."""
        both = self.mixup_alpha > 0 and self.cutmix_alpha > 0
        if size is None:
            use_cutmix = rng.random() < self.switch_prob if both else self.mixup_alpha <= 0
            alpha = self.cutmix_alpha if use_cutmix else self.mixup_alpha
            return float(rng.beta(alpha, alpha)), bool(use_cutmix)
        if both:
            use_cutmix = rng.random(size) < self.switch_prob
            lam_cutmix = rng.beta(self.cutmix_alpha, self.cutmix_alpha, size=size)
            lam_mixup = rng.beta(self.mixup_alpha, self.mixup_alpha, size=size)
            return np.where(use_cutmix, lam_cutmix, lam_mixup), use_cutmix
        use_cutmix = np.full(size, self.mixup_alpha <= 0)
        alpha = self.cutmix_alpha if self.mixup_alpha <= 0 else self.mixup_alpha
        return rng.beta(alpha, alpha, size=size), use_cutmix

    def _params_per_batch(self, rng):
        if not self.mixup_enabled or rng.random() >= self.mix_prob:
            return 1.0, False
        return self._draw_lam(rng)

    def _params_per_elem(self, count, rng):
        """float32 lambdas (1 where not mixed) and CutMix flags for ``count`` images or pairs."""
        if not self.mixup_enabled:
            return np.ones(count, dtype=np.float32), np.zeros(count, dtype=bool)
        lam_mix, use_cutmix = self._draw_lam(rng, count)
        mixed = rng.random(count) < self.mix_prob
        return np.where(mixed, lam_mix.astype(np.float32), np.float32(1.0)), use_cutmix

    def _cutmix_box(self, img_shape, lam, rng):
        return cutmix_bbox_and_lam(img_shape, lam, self.cutmix_minmax, self.correct_lam, rng=rng)

    def _mix_batch(self, x, rng):
        lam, use_cutmix = self._params_per_batch(rng)
        if lam == 1.0:
            return 1.0
        reversed_x = x[::-1].copy()
        if use_cutmix:
            (y_low, y_high, x_low, x_high), lam = self._cutmix_box(x.shape, lam, rng)
            x[:, :, y_low:y_high, x_low:x_high] = reversed_x[:, :, y_low:y_high, x_low:x_high]
        else:
            x *= np.float32(lam)
            x += reversed_x * np.float32(1.0 - lam)
        return float(lam)

    def _mix_elem(self, x, rng):
        lam_batch, use_cutmix = self._params_per_elem(len(x), rng)
        original = x.copy()
        for i, lam in enumerate(lam_batch):
            self._mix_one(x, original, i, len(x) - 1 - i, lam, use_cutmix[i], lam_batch, rng, both=False)
        return lam_batch

    def _mix_pair(self, x, rng):
        lam_batch, use_cutmix = self._params_per_elem(len(x) // 2, rng)
        original = x.copy()
        for i, lam in enumerate(lam_batch):
            self._mix_one(x, original, i, len(x) - 1 - i, lam, use_cutmix[i], lam_batch, rng, both=True)
        return np.concatenate([lam_batch, lam_batch[::-1]])

    def _mix_one(self, x, original, i, j, lam, use_cutmix, lam_batch, rng, both):
        """Mix image i (and image j too when ``both``) with its partner; store the corrected lambda."""
        if lam == 1.0:
            return
        if use_cutmix:
            (y_low, y_high, x_low, x_high), lam_batch[i] = self._cutmix_box(x[i].shape, lam, rng)
            box = (slice(None), slice(y_low, y_high), slice(x_low, x_high))
            x[i][box] = original[j][box]
            if both:
                x[j][box] = original[i][box]
        else:
            x[i] = original[i] * lam + original[j] * (1 - lam)
            if both:
                x[j] = original[j] * lam + original[i] * (1 - lam)
