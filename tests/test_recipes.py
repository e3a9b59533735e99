"""The two training recipes in src/configs: what their values and comments say, against DeepMind's code.

- Model zoo recipe (src/configs/dm_nfnet_f*.yaml, the default): its RandAugment strength must be
  DeepMind's level for the variant, and every number its comments state must be what a run uses.
- DeepMind's recipe (src/configs/deepmind/dm_nfnet_f*.yaml): its values against transcriptions of
  deepmind-research nfnets/experiment_nfnets.py get_config, nfnets/base.py nfnet_params and
  nfnets/optim.py WarmupCosineDecay.
"""
import glob
import math
import os
import re

import numpy as np
import pytest
import yaml

from src.config import ConfigError, load_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO_CONFIGS = sorted(glob.glob(os.path.join(ROOT, "src", "configs", "dm_nfnet_f*.yaml")))
DEEPMIND_CONFIGS = sorted(glob.glob(os.path.join(ROOT, "src", "configs", "deepmind", "dm_nfnet_f*.yaml")))
ALL_CONFIGS = sorted(glob.glob(os.path.join(ROOT, "src", "configs", "**", "*.yaml"), recursive=True))

# nfnets/experiment_nfnets.py get_config: RandAugment levels (e.g. 405 = 4 layers, magnitude 5)
DEEPMIND_RA_LEVELS = {'F0': '405', 'F1': '410', 'F2': '410', 'F3': '415', 'F4': '415', 'F5': '415', 'F6': '415'}
# nfnets/base.py nfnet_params (depth, train_imsize, test_imsize, drop_rate)
NFNET_PARAMS = {
    'F0': ([1, 2, 6, 3], 192, 256, 0.2), 'F1': ([2, 4, 12, 6], 224, 320, 0.3),
    'F2': ([3, 6, 18, 9], 256, 352, 0.4), 'F3': ([4, 8, 24, 12], 320, 416, 0.4),
    'F4': ([5, 10, 30, 15], 384, 512, 0.5), 'F5': ([6, 12, 36, 18], 416, 544, 0.5),
    'F6': ([7, 14, 42, 21], 448, 576, 0.5),
}
IMAGES_PER_EPOCH = 1281167  # experiment_nfnets.py
DEVICES = 8  # both recipes are written for 8 devices


def _variant(path):
    return "F" + re.search(r"dm_nfnet_f(\d)", os.path.basename(path)).group(1)


def _deepmind_level(variant):
    level = DEEPMIND_RA_LEVELS[variant]
    return int(level[0]), int(level[1:])  # (num_layers, magnitude)


def _effective_rand_augment(auto_augment):
    """(num_layers, magnitude the ops really use) for either syntax."""
    from src.data.augment import parse_rand_augment
    from src.data.augment.deepmind_rand_augment import parse_level

    if auto_augment.startswith("randaugment_"):
        return parse_level(auto_augment)
    settings = parse_rand_augment(auto_augment)
    return settings.num_layers, settings.effective_magnitude


def _comments(path):
    """key -> the comment after its value."""
    comments = {}
    with open(path) as f:
        for line in f:
            match = re.match(r"([a-z_0-9]+): .*?\s+# (.*)$", line.rstrip("\n"))
            if match:
                comments[match.group(1)] = match.group(2)
    return comments


# ----------------------------------------------------------------------------- item 1: RandAugment strength

@pytest.mark.parametrize("path", ZOO_CONFIGS + DEEPMIND_CONFIGS, ids=lambda p: os.path.relpath(p, ROOT))
def test_effective_rand_augment_of_every_f_config_is_deepminds_level(path):
    cfg = load_config(path)
    assert _effective_rand_augment(cfg.auto_augment) == _deepmind_level(_variant(path))


def test_timm_string_above_its_clamp_is_a_config_error_not_a_weaker_run():
    with pytest.raises(ConfigError, match=r"magnitude 15.*clamps magnitudes to 10; add -mmax15"):
        load_config(overrides={"auto_augment": "rand-m15-n4-mstd0.5-inc1"})
    assert _effective_rand_augment("rand-m15-n4-mstd0.5-inc1-mmax15") == (4, 15)
    assert _effective_rand_augment("rand-m10-n4-mstd0.5-inc1") == (4, 10)


def test_zoo_level_15_reaches_the_ops_unclamped():
    from src.data.augment import rand_augment_transform

    transform = rand_augment_transform("rand-m15-n4-mstd0.5-inc1-mmax15")
    rotate = next(op for op in transform.ops if op.name == "Rotate")
    assert rotate.magnitude_max == 15
    from PIL import Image

    image = Image.new("RGB", (32, 32), (200, 40, 90))
    image.putpixel((16, 10), (0, 0, 0))
    turned = rotate.apply(image, 15, sign=1, resample=Image.Resampling.NEAREST)
    at_10 = rotate.apply(image, 10, sign=1, resample=Image.Resampling.NEAREST)
    assert np.asarray(turned).tolist() != np.asarray(at_10).tolist()  # 45 degrees, not the clamped 30
    rng = np.random.RandomState(0)
    for _ in range(50):  # every op at level 15 with noise yields an image (Posterize to 0 bits included)
        out = rand_augment_transform("rand-m15-n4-mstd0.5-inc1-mmax15", rng=rng)(np.asarray(image))
        assert out.shape == (32, 32, 3)


# ----------------------------------------------------------------------------- item 2: comments

_PEAK = re.compile(r"peak lr = ([\d.]+) x (\d+) / (\d+) = ([\d.]+)")
_GLOBAL = re.compile(r"global batch = (\d+) devices? x (\d+)(?: x (\d+) accumulation steps)? = (\d+)")


@pytest.mark.parametrize("path", ALL_CONFIGS, ids=lambda p: os.path.relpath(p, ROOT))
def test_lr_and_batch_comments_compute_what_a_run_uses(path):
    from src import builders

    cfg = load_config(path)
    notes = _comments(path)
    devices, batch, accumulation, global_batch = _GLOBAL.search(notes["batch_size"]).groups()
    devices, accumulation = int(devices), int(accumulation or 1)
    assert (int(batch), accumulation) == (cfg.batch_size, cfg.accumulation_step)
    assert int(global_batch) == devices * cfg.batch_size * cfg.accumulation_step
    base, batch_in_lr, reference, peak = _PEAK.search(notes["base_lr"]).groups()
    assert (float(base), int(batch_in_lr), int(reference)) == (cfg.base_lr, int(global_batch), cfg.lr_reference_batch)
    schedule, peak_lr, run_global_batch = builders.build_lr_schedule(cfg, steps_per_epoch=10, group_size=devices)
    assert run_global_batch == int(global_batch)
    assert float(peak) == pytest.approx(peak_lr, abs=5e-3)  # the comment rounds
    assert schedule.max() == pytest.approx(peak_lr, rel=1e-6)
    if "devices x batch" in open(path).readline():  # header: "... N Ascend devices x batch B."
        header = re.search(r"(\d+) Ascend devices x batch (\d+)", open(path).readline()).groups()
        assert (int(header[0]), int(header[1])) == (devices, cfg.batch_size)


def test_zoo_f0_peak_lr_is_0_4_and_deepmind_f0_is_1_6():
    from src import builders

    _, zoo_peak, zoo_batch = builders.build_lr_schedule(load_config(ZOO_CONFIGS[0]), 10, DEVICES)
    _, dm_peak, dm_batch = builders.build_lr_schedule(load_config(DEEPMIND_CONFIGS[0]), 10, DEVICES)
    assert (zoo_batch, zoo_peak) == (1024, pytest.approx(0.4))
    assert (dm_batch, dm_peak) == (4096, pytest.approx(1.6))


@pytest.mark.parametrize("path", ALL_CONFIGS, ids=lambda p: os.path.relpath(p, ROOT))
def test_augmentation_comments_name_the_semantics_and_the_source(path):
    cfg = load_config(path)
    notes = _comments(path)
    if cfg.auto_augment.startswith("randaugment_"):
        assert "DeepMind semantics" in notes["auto_augment"]
    else:
        assert "timm semantics" in notes["auto_augment"]
        assert "DeepMind" not in notes["auto_augment"]
    layers, magnitude = _effective_rand_augment(cfg.auto_augment)
    assert f"{layers} ops" in notes["auto_augment"] and f"magnitude {magnitude}" in notes["auto_augment"]
    if path in ZOO_CONFIGS:
        for key in ("mix_up", "cutmix", "mixup_prob", "switch_prob", "mixup_mode"):
            assert "model zoo" in notes[key], key
    if cfg.eval_crop_mode == "pixels" and cfg.crop_pct:
        size = cfg.test_input_size
        assert f"squash-resize to {size}+{cfg.crop_pct}={size + cfg.crop_pct}, center crop {size}" in notes["crop_pct"]


# ----------------------------------------------------------------------------- item 3: DeepMind's recipe

def deepmind_get_config():
    """The values of nfnets/experiment_nfnets.py get_config that a config here can express."""
    train_batch_size = 4096
    num_epochs = 360
    steps_per_epoch = IMAGES_PER_EPOCH / train_batch_size
    return dict(
        train_batch_size=train_batch_size, num_epochs=num_epochs, lr=0.1, label_smoothing=0.1,
        use_ema=True, ema_decay=0.99999, eval_preproc='resize_crop_32', bfloat16=True,
        training_steps=(IMAGES_PER_EPOCH * num_epochs) // train_batch_size,
        lr_schedule=dict(start_val=0, min_val=0.0, warmup_steps=5 * steps_per_epoch),
        optimizer=dict(momentum=0.9, nesterov=True, weight_decay=2e-5, clipping=0.01, eps=1e-3),
        stochdepth_rate=0.25, augment_before_mix=False, mixup_alpha=0.2)  # dataset.py: mixup_alpha = 0.2


@pytest.mark.parametrize("path", DEEPMIND_CONFIGS, ids=os.path.basename)
def test_deepmind_config_holds_deepminds_experiment_and_variant_values(path):
    cfg = load_config(path)
    ref = deepmind_get_config()
    depth, train_size, test_size, drop_rate = NFNET_PARAMS[_variant(path)]
    from src.models import MODEL_CFGS  # the network the config's arch builds

    assert (list(MODEL_CFGS[cfg.arch].depths), cfg.input_size, cfg.test_input_size, cfg.drop_rate) == \
        (depth, train_size, test_size, drop_rate)
    assert DEVICES * cfg.batch_size * cfg.accumulation_step == ref["train_batch_size"]
    assert (cfg.base_lr, cfg.lr_reference_batch, cfg.epochs) == (ref["lr"], 256, ref["num_epochs"])
    assert (cfg.lr_scheduler, cfg.warmup_length, cfg.warmup_lr, cfg.min_lr) == \
        ("warmup_cosine", 5, ref["lr_schedule"]["start_val"], ref["lr_schedule"]["min_val"])
    opt = ref["optimizer"]
    assert (cfg.optimizer, cfg.momentum, cfg.use_nesterov, cfg.weight_decay, cfg.clipping, cfg.eps) == \
        ("sgd_agc", opt["momentum"], opt["nesterov"], opt["weight_decay"], opt["clipping"], opt["eps"])
    assert cfg.agc_exclude == ["head.fc.weight"] and cfg.no_decay == ["gain", "bias"]  # experiment_nfnets _make_opt
    assert cfg.label_smoothing == ref["label_smoothing"]
    assert (cfg.ema, cfg.ema_decay, cfg.ema_warmup, cfg.use_ema) == (ref["use_ema"], ref["ema_decay"], True, True)
    assert (cfg.drop_path_rate, cfg.drop_path_mode) == (ref["stochdepth_rate"], "deepmind")
    assert (cfg.amp_level, cfg.amp_dtype, cfg.is_dynamic_loss_scale, cfg.loss_scale) == ("O2", "bfloat16", False, 1.0)
    assert (cfg.mix_scheme, cfg.mix_up, cfg.cutmix) == ("deepmind", ref["mixup_alpha"], 1.0)
    assert cfg.auto_augment == f"randaugment_{DEEPMIND_RA_LEVELS[_variant(path)]}"
    assert (cfg.re_prob, cfg.hflip, list(cfg.scale), cfg.interpolation) == (0.0, 0.5, [0.08, 1.0], "bicubic")
    crop = float(ref["eval_preproc"].split("_")[-1])  # dataset.py: > 1 means pixels added before the crop
    assert (cfg.eval_crop_mode, cfg.crop_pct) == ("pixels", crop)


def deepmind_warmup_cosine_decay(itr, max_val, num_steps, warmup_steps, start_val=0.0, min_val=0.0):
    """nfnets/optim.py WarmupCosineDecay.__call__."""
    warmup_val = (max_val - start_val) * (itr / warmup_steps) + start_val
    cos_itr = (itr - warmup_steps) / (num_steps - warmup_steps)
    cos_val = 0.5 * (max_val - min_val) * (1 + math.cos(math.pi * cos_itr)) + min_val
    return cos_val if warmup_steps < itr else warmup_val


def test_deepmind_f0_schedule_on_imagenet_matches_warmup_cosine_decay():
    from src import builders

    cfg = load_config(DEEPMIND_CONFIGS[0])
    ref = deepmind_get_config()
    # steps as a run here counts them: each of 8 shards holds ceil(N / 8) images, full batches only
    micro_steps = math.ceil(IMAGES_PER_EPOCH / DEVICES) // cfg.batch_size
    steps_per_epoch = micro_steps // cfg.accumulation_step
    schedule, peak, _ = builders.build_lr_schedule(cfg, steps_per_epoch, DEVICES)
    num_steps, warmup = ref["training_steps"], ref["lr_schedule"]["warmup_steps"]
    expected = np.array([deepmind_warmup_cosine_decay(t, 1.6, num_steps, warmup) for t in range(len(schedule))])
    # measured: 312 x 360 = 112,320 steps here against DeepMind's 112,602 (the last partial batch of
    # each epoch is dropped, and 5 x 312 = 1,560 warm-up steps against 1,563.9): max |difference| 4.0e-3
    # (0.25% of the 1.6 peak), where the two warm-ups end
    assert (len(schedule), num_steps) == (112320, 112602)
    assert peak == pytest.approx(1.6)
    assert np.abs(schedule - expected).max() < 5e-3


def test_deepmind_scheme_rejects_what_deepminds_code_cannot_do():
    with pytest.raises(ConfigError, match="cutmix must be 0 or 1"):
        load_config(DEEPMIND_CONFIGS[0], overrides={"cutmix": 0.5})
    with pytest.raises(ConfigError, match="batch_size must be even"):
        load_config(DEEPMIND_CONFIGS[0], overrides={"batch_size": 33})
    with pytest.raises(ConfigError, match="amp_dtype"):
        load_config(DEEPMIND_CONFIGS[0], overrides={"amp_dtype": "float8"})
    assert load_config(DEEPMIND_CONFIGS[0], overrides={"batch_size": 33, "cutmix": 0}).batch_size == 33


def test_deepmind_float_resize_needs_deepminds_crop_mix_and_rand_augment():
    cfg = load_config(DEEPMIND_CONFIGS[0])
    assert (cfg.train_crop, cfg.train_resize) == ("deepmind", "tf_bicubic")  # dataset.py's crop and resize
    for overrides, culprit in (({"train_crop": "timm"}, "train_crop deepmind, got timm"),
                               ({"mix_scheme": "timm"}, "mix_scheme deepmind, got timm"),
                               ({"re_prob": 0.25}, "re_prob 0, got 0.25"), ({"auto_augment": "rand-m9-n2"}, "rand-m9-n2")):
        with pytest.raises(ConfigError, match=f"train_resize tf_bicubic .*{culprit}"):
            load_config(DEEPMIND_CONFIGS[0], overrides=overrides)
    pil = load_config(DEEPMIND_CONFIGS[0], overrides={"train_resize": "pil", "train_crop": "timm"})
    assert (pil.train_crop, pil.train_resize) == ("timm", "pil")


@pytest.mark.parametrize("path", DEEPMIND_CONFIGS, ids=os.path.basename)
def test_deepmind_yaml_spells_out_every_key_and_differs_from_the_zoo_only_in_recipe_keys(path):
    from src.config import SCHEMA

    with open(path) as f:
        raw = yaml.safe_load(f)
    assert set(raw) == set(SCHEMA)
    zoo = load_config(path.replace(os.sep + "deepmind", "")).to_dict()
    differs = {k for k, v in load_config(path).to_dict().items() if zoo[k] != v}
    assert differs == {"auto_augment", "mix_up", "mix_scheme", "train_crop", "train_resize", "accumulation_step",
                       "warmup_lr", "min_lr", "ws_form", "gelu_form",
                       "amp_dtype", "is_dynamic_loss_scale", "loss_scale", "output_dir"}
