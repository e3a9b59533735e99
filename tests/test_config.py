"""The config loader: every shipped YAML loads, CLI overrides take effect, mistakes are one-line errors."""
import glob
import os
import subprocess
import sys

import pytest
import yaml

from src.config import (SCHEMA, Config, ConfigError, load_config,
                        parse_cli, save_config)
from src.errors import run_cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG_DIR = os.path.join(ROOT, "src", "configs")
CONFIG_FILES = sorted(glob.glob(os.path.join(CONFIG_DIR, "*.yaml")))
F0_YAML = os.path.join(CONFIG_DIR, "dm_nfnet_f0.yaml")
DEMO_YAML = os.path.join(CONFIG_DIR, "dm_nfnet_nano_digits.yaml")

# The fields of the seed's dm_nfnet_f0.yaml that every shipped config must spell out (its `depths` is
# retired: the stage depths follow arch, see test_a_retired_key_*).
SEED_FIELDS = (
    "arch data_url num_classes mix_up cutmix auto_augment interpolation re_prob re_mode re_count "
    "mixup_prob switch_prob mixup_mode accumulation_step base_lr clipping lr_scheduler min_lr "
    "use_nesterov optimizer warmup_length warmup_lr amp_level batch_size epochs eps "
    "eval_while_train is_dynamic_loss_scale label_smoothing loss_scale momentum weight_decay "
    "num_parallel_workers device_target input_size test_input_size crop_pct drop_rate "
    "drop_path_rate"
).split()

# The paper's variant table: depths, train size, test size, dropout, RandAugment magnitude.
VARIANTS = {
    "dm_nfnet_f0": ([1, 2, 6, 3], 192, 256, 0.2, 5),
    "dm_nfnet_f1": ([2, 4, 12, 6], 224, 320, 0.3, 10),
    "dm_nfnet_f2": ([3, 6, 18, 9], 256, 352, 0.4, 10),
    "dm_nfnet_f3": ([4, 8, 24, 12], 320, 416, 0.4, 15),
    "dm_nfnet_f4": ([5, 10, 30, 15], 384, 512, 0.5, 15),
    "dm_nfnet_f5": ([6, 12, 36, 18], 416, 544, 0.5, 15),
    "dm_nfnet_f6": ([7, 14, 42, 21], 448, 576, 0.5, 15),
}


def write_yaml(tmp_path, values, name="run.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(values) if isinstance(values, dict) else values)
    return str(path)


def error_of(fn, *args, **kwargs):
    with pytest.raises(ConfigError) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


# --------------------------------------------------------------------------- shipped configs

def test_configs_dir_holds_every_variant_and_the_demo():
    names = {os.path.basename(p) for p in CONFIG_FILES}
    assert names == {f"{v}.yaml" for v in VARIANTS} | {"dm_nfnet_nano_digits.yaml"}


@pytest.mark.parametrize("path", CONFIG_FILES, ids=os.path.basename)
def test_every_shipped_yaml_loads_and_spells_out_every_key(path):
    with open(path) as f:
        raw = yaml.safe_load(f)
    assert set(SEED_FIELDS) <= set(raw)
    assert set(raw) == set(SCHEMA)  # one YAML shows every default of a run
    cfg = load_config(path)
    assert cfg.to_dict() == {k: raw[k] for k in SCHEMA}


@pytest.mark.parametrize("arch", sorted(VARIANTS))
def test_variant_yaml_matches_the_paper_table(arch):
    from src.models import MODEL_CFGS

    depths, train, test, drop, magnitude = VARIANTS[arch]
    cfg = load_config(os.path.join(CONFIG_DIR, f"{arch}.yaml"))
    assert (cfg.arch, list(MODEL_CFGS[cfg.arch].depths), cfg.input_size, cfg.test_input_size, cfg.drop_rate) == \
        (arch, depths, train, test, drop)
    mmax = f"-mmax{magnitude}" if magnitude > 10 else ""  # timm clamps m to 10 without mmax
    assert cfg.auto_augment == f"rand-m{magnitude}-n4-mstd0.5-inc1{mmax}"
    assert (cfg.eval_crop_mode, cfg.crop_pct, cfg.drop_path_rate) == ("pixels", 32, 0.25)


def test_f0_yaml_holds_the_model_zoo_recipe():
    cfg = load_config(F0_YAML)
    expected = dict(
        batch_size=128, base_lr=0.1, warmup_length=5, warmup_lr=7e-7, min_lr=6e-7,
        lr_scheduler="warmup_cosine", mix_up=0.8, cutmix=1.0, switch_prob=0.5, mixup_mode="batch",
        amp_level="O2", is_dynamic_loss_scale=True, label_smoothing=0.1, weight_decay=2e-5,
        clipping=0.01, eps=1e-3, momentum=0.9, use_nesterov=True, epochs=360, re_prob=0.0,
        optimizer="sgd_agc", device_target="Ascend", interpolation="bicubic", num_classes=1000)
    assert {k: getattr(cfg, k) for k in expected} == expected


def test_demo_yaml_is_a_small_cpu_run():
    cfg = load_config(DEMO_YAML)
    assert (cfg.arch, cfg.num_classes, cfg.data_path, cfg.device_target, cfg.amp_level) == \
        ("dm_nfnet_nano", 10, "data/digits", "CPU", "O0")
    assert (cfg.input_size, cfg.test_input_size, cfg.crop_pct) == (64, 64, 0)
    assert cfg.eval_while_train and cfg.num_parallel_workers == 2


def test_variant_table_is_what_the_schema_allows_and_the_registry_builds():
    from src import models
    from src.variants import VARIANTS as TABLE

    assert set(SCHEMA["arch"].choices) == set(TABLE) <= set(models.list_models())
    for name, variant in TABLE.items():
        cfg = models.MODEL_CFGS[name]
        assert (cfg.depths, cfg.channels) == (variant.depths, variant.widths), name


# --------------------------------------------------------------------------- command line

def test_cli_overrides_of_every_type_take_effect():
    _, cfg = parse_cli(["--config", F0_YAML, "--base_lr", "0.2", "--batch_size", "64",
                        "--eval_while_train", "false", "--arch=dm_nfnet_f1",
                        "--output_dir", "runs/x", "--weight_decay", "1e-4", "--resume", "null"])
    assert (cfg.base_lr, cfg.batch_size, cfg.eval_while_train) == (0.2, 64, False)
    assert (cfg.arch, cfg.output_dir) == ("dm_nfnet_f1", "runs/x")
    assert cfg.weight_decay == 1e-4 and cfg.resume is None
    assert load_config(F0_YAML).base_lr == 0.1  # the file itself said 0.1


def test_cli_bool_flag_alone_means_true_and_lists_may_omit_brackets():
    _, cfg = parse_cli(["--config", DEMO_YAML, "--strict_data", "--lr_milestones", "5,10",
                        "--lr_scheduler", "multistep"])
    assert cfg.strict_data is True and cfg.lr_milestones == [5, 10]


def test_enumeration_values_are_matched_case_insensitively():
    _, cfg = parse_cli(["--device_target", "cpu", "--amp_level", "o0", "--file_format", "onnx"])
    assert (cfg.device_target, cfg.amp_level, cfg.file_format) == ("CPU", "O0", "ONNX")


def test_script_flags_are_returned_apart_from_the_config():
    def add_args(parser):
        parser.add_argument("--checkpoint", default=None)

    args, cfg = parse_cli(["--checkpoint", "a.ckpt", "--seed", "3"], add_script_args=add_args)
    assert (args.checkpoint, args.config, cfg.seed) == ("a.ckpt", None, 3)
    assert not hasattr(args, "seed")


def test_unknown_cli_flag_is_named_with_a_suggestion():
    message = error_of(parse_cli, ["--config", F0_YAML, "--base_lrr", "0.1"])
    assert "--base_lrr" in message and "--base_lr?" in message
    assert "--base_lr" in error_of(parse_cli, ["--lr", "0.1"])


def test_cli_flags_are_not_abbreviated():
    assert "--base" in error_of(parse_cli, ["--base", "0.1"])


@pytest.mark.parametrize("argv, key", [
    (["--base_lr", "fast"], "--base_lr"),
    (["--epochs", "1.5"], "--epochs"),
    (["--eval_while_train", "1"], "--eval_while_train"),
    (["--lr_milestones", "[10,x,30]"], "--lr_milestones[1]"),
])
def test_cli_value_of_wrong_type_is_named(argv, key):
    assert key in error_of(parse_cli, argv)


# --------------------------------------------------------------------------- YAML mistakes

def test_unknown_yaml_key_names_file_key_and_nearest_key(tmp_path):
    path = write_yaml(tmp_path, {"base_lrr": 0.1, "set": "ImageNet"})
    message = error_of(load_config, path)
    assert path in message and "'base_lrr'" in message and "'base_lr'?" in message
    assert "'set'" in message


@pytest.mark.parametrize("values, key", [
    ({"base_lr": "fast"}, "base_lr"),
    ({"epochs": 1.5}, "epochs"),
    ({"batch_size": True}, "batch_size"),  # bools are not ints
    ({"eval_while_train": 1}, "eval_while_train"),
    ({"lr_milestones": [10, "20", 30]}, "lr_milestones[1]"),
    ({"lr_milestones": 4}, "lr_milestones"),
    ({"arch": None}, "arch"),
    ({"drop_rate": {"a": 1}}, "drop_rate"),
])
def test_yaml_value_of_wrong_type_is_named(tmp_path, values, key):
    path = write_yaml(tmp_path, values)
    message = error_of(load_config, path)
    assert f"{path}: {key}:" in message


def test_ints_are_accepted_for_floats_and_exponents_without_dot(tmp_path):
    cfg = load_config(write_yaml(tmp_path, "base_lr: 1\nweight_decay: 2e-5\n"))
    assert cfg.base_lr == 1.0 and isinstance(cfg.base_lr, float)
    assert cfg.weight_decay == 2e-5


@pytest.mark.parametrize("key, value, allowed", [
    ("base_lr", -0.1, "> 0"),
    ("base_lr", 0, "> 0"),
    ("batch_size", 0, "in [1, 65536]"),
    ("drop_rate", 1.0, "[0, 1)"),
    ("drop_path_rate", -0.1, "[0, 1)"),
    ("mixup_prob", 1.5, "[0, 1]"),
    ("ema_decay", 1, "[0, 1)"),
    ("input_size", 32, "in [64, 4096]"),
    ("arch", "nfnet_f0", "dm_nfnet_nano"),
    ("amp_level", "O4", "O0, O1, O2, O3"),
    ("optimizer", "adam", "sgd_agc, momentum, adamw"),
    ("lr_scheduler", "cosine_lr", "warmup_cosine, multistep, exponential, constant"),
    ("mixup_mode", "row", "batch, pair, elem"),
    ("device_target", "TPU", "CPU, GPU, Ascend"),
    ("auto_augment", "augmix-m5", "rand-m9-n2-mstd0.5-inc1"),
])
def test_out_of_range_value_names_key_value_and_allowed(tmp_path, key, value, allowed):
    message = error_of(load_config, write_yaml(tmp_path, {key: value}))
    assert f": {key}:" in message and str(value) in message and allowed in message
    cli_message = error_of(parse_cli, [f"--{key}", str(value)])
    assert f"--{key}" in cli_message and allowed in cli_message


@pytest.mark.parametrize("values, words", [
    ({"crop_pct": 0.875}, ["crop_pct", "pixels"]),
    ({"eval_crop_mode": "squash"}, ["crop_pct", "(0, 1]"]),
    ({"lr_scheduler": "multistep"}, ["lr_milestones"]),
    ({"lr_scheduler": "multistep", "lr_milestones": [20, 10]}, ["lr_milestones", "increase"]),
    ({"warmup_length": 10, "epochs": 5}, ["warmup_length", "epochs"]),
    ({"momentum": 0}, ["use_nesterov", "momentum"]),
    ({"enable_modelarts": True}, ["data_url", "enable_modelarts"]),
])
def test_inconsistent_keys_are_named(tmp_path, values, words):
    message = error_of(load_config, write_yaml(tmp_path, values))
    assert all(w in message for w in words), message


def test_a_retired_key_that_agrees_is_ignored_with_a_note(tmp_path, capsys):
    """`depths` configured nothing (the stage depths follow arch): an older run's config.yaml still loads."""
    path = write_yaml(tmp_path, {"arch": "dm_nfnet_f1", "depths": [2, 4, 12, 6]})
    assert load_config(path).to_dict() == load_config(overrides={"arch": "dm_nfnet_f1"}).to_dict()
    assert capsys.readouterr().err == (f"note: {path}: depths is no longer a setting, the stage depths follow arch "
                                       "(src/variants.py); ignored (delete it)\n")


def test_a_retired_key_that_disagrees_is_one_line_naming_it(tmp_path):
    path = write_yaml(tmp_path, {"arch": "dm_nfnet_f1", "depths": [1, 2, 6, 3]})
    assert error_of(load_config, path) == (f"{path}: depths: [1, 2, 6, 3] does not match arch dm_nfnet_f1 "
                                           "([2, 4, 12, 6]); depths is no longer a setting, the stage depths "
                                           "follow arch (src/variants.py): delete it")
    assert error_of(parse_cli, ["--depths", "1,2,6,3"]) == \
        "command line: --depths is no longer a setting, the stage depths follow arch (src/variants.py)"


def test_timm_crop_fraction_is_accepted_with_its_modes():
    cfg = load_config(overrides={"eval_crop_mode": "shorter", "crop_pct": 0.875})
    assert cfg.crop_pct == 0.875 and load_config().crop_pct == 32


def test_missing_unparsable_and_non_mapping_files_name_the_file(tmp_path):
    missing = str(tmp_path / "nope.yaml")
    assert missing in error_of(load_config, missing)
    for text in ("base_lr: [0.1\n", "- 1\n- 2\n", ""):
        path = write_yaml(tmp_path, text)
        assert path in error_of(load_config, path)
    assert missing in error_of(parse_cli, ["--config", missing])


def test_data_url_is_the_seed_alias_of_data_path(tmp_path):
    path = write_yaml(tmp_path, {"data_url": "/seed/imagenet"})
    assert load_config(path).data_path == "/seed/imagenet"
    _, cfg = parse_cli(["--config", path, "--data_path", "/local"])
    assert (cfg.data_path, cfg.data_url) == ("/local", "/local")
    modelarts = load_config(overrides={"enable_modelarts": True, "data_url": "obs://b/d",
                                       "train_url": "obs://b/out", "data_path": "/cache/data"})
    assert (modelarts.data_path, modelarts.data_url) == ("/cache/data", "obs://b/d")


# --------------------------------------------------------------------------- Config, saving, entry points

def test_config_is_read_only_and_replace_revalidates():
    cfg = load_config(DEMO_YAML)
    with pytest.raises(AttributeError):
        cfg.base_lr = 1.0
    cfg.no_decay.append("x")  # attribute lists are copies
    assert cfg.no_decay == load_config(DEMO_YAML).no_decay
    assert cfg.replace(base_lr=0.25).base_lr == 0.25 and cfg.base_lr == 0.4
    assert "base_lr" in error_of(cfg.replace, base_lr=-1)
    with pytest.raises(AttributeError, match="base_lr"):
        cfg.base_lrr  # noqa: B018


def test_save_config_round_trips(tmp_path):
    _, cfg = parse_cli(["--config", F0_YAML, "--base_lr", "0.25", "--auto_augment", "none",
                        "--lr_milestones", "[100,200]", "--file_name", "yes"])
    path = tmp_path / "run" / "config.yaml"
    save_config(cfg, str(path))
    assert load_config(str(path)) == cfg
    assert load_config(str(path)).file_name == "yes"  # text stays text
    assert os.listdir(path.parent) == ["config.yaml"]  # no temporary file left behind


def test_run_cli_prints_one_error_line_and_exits_2(capsys):
    def main():
        parse_cli(["--batch_size", "0"])

    with pytest.raises(SystemExit) as info:
        run_cli(main)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "--batch_size" in err


def test_entry_point_process_exits_2_without_traceback_or_mindspore(tmp_path):
    script = tmp_path / "entry.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {ROOT!r})\n"
        "from src.config import parse_cli\n"
        "from src.errors import run_cli\n"
        "def main():\n"
        "    args, cfg = parse_cli()\n"
        "    assert 'mindspore' not in sys.modules\n"
        "    print(cfg.base_lr)\n"
        "run_cli(main)\n")
    ok = subprocess.run([sys.executable, str(script), "--config", DEMO_YAML, "--base_lr", "0.3"],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.strip() == "0.3", ok.stderr
    bad = subprocess.run([sys.executable, str(script), "--config", DEMO_YAML, "--optimizer", "adam"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("error: command line: --optimizer")
    assert "Traceback" not in bad.stderr


def test_importing_config_does_not_import_mindspore():
    code = "import sys, src.config; sys.exit('mindspore' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=60).returncode == 0


def test_help_lists_config_keys_and_exits_0(capsys):
    with pytest.raises(SystemExit) as info:
        parse_cli(["--help"], description="Train NFNet.")
    assert info.value.code == 0
    assert "--base_lr" in capsys.readouterr().out


def test_schema_defaults_are_valid():
    cfg = load_config()
    assert isinstance(cfg, Config) and set(cfg.to_dict()) == set(SCHEMA)


def test_max_nonfinite_steps_defaults_to_the_documented_number_in_the_schema_and_every_config():
    """README/docs: "`max_nonfinite_steps` (default 5)", "`max_nonfinite_steps` 5" (recipe table)."""
    import re

    stated = []
    for path in [os.path.join(ROOT, "README.md"), *glob.glob(os.path.join(ROOT, "docs", "*.md"))]:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        stated += [int(n) for n in re.findall(r"`max_nonfinite_steps`(?: \(default|[ |`]*) ?(\d+)", text)]
    assert len(stated) >= 2, "the README and docs no longer state the default of max_nonfinite_steps"
    assert set(stated) == {load_config().max_nonfinite_steps} == {5}
    for path in glob.glob(os.path.join(ROOT, "src", "configs", "**", "*.yaml"), recursive=True):
        assert load_config(path).max_nonfinite_steps == 5, path


def test_a_timm_flag_suggests_its_name_here():
    with pytest.raises(ConfigError, match=r"unknown option --model \(did you mean --arch, timm's --model\?\)"):
        parse_cli(["--model", "dm_nfnet_f1"])
    with pytest.raises(ConfigError, match=r"did you mean --input_size, timm's --img_size\?"):
        parse_cli(["--img-size", "224"])


@pytest.mark.parametrize("argv", [["--inference", "True"], ["--inference=True"], ["--inference"]])
def test_the_model_zoos_inference_flag_is_accepted_with_a_note(argv, capsys):
    _, cfg = parse_cli(argv + ["--epochs", "30"])
    assert cfg.epochs == 30
    assert "note: --inference (the model zoo's flag) is not needed" in capsys.readouterr().err
