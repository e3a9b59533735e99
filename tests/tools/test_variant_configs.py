"""The F1-F6 YAMLs are generated from each recipe's F0 YAML and the variant table, and current."""
import os
import shutil

import pytest
import yaml

from src.config import load_config
from tools import variant_configs
from src.variants import VARIANTS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_shipped_variant_yamls_are_current():
    assert variant_configs.stale_files(ROOT) == {}
    assert variant_configs.main(["--root", ROOT, "--check"]) == 0


@pytest.fixture
def copy_of_configs(tmp_path):
    shutil.copytree(os.path.join(ROOT, "src", "configs"), tmp_path / "src" / "configs")
    return tmp_path


def test_an_f0_edit_reaches_every_variant_and_the_rows_stay(copy_of_configs, capsys):
    root = copy_of_configs
    for folder in variant_configs.RECIPES:
        f0 = root / folder / "dm_nfnet_f0.yaml"
        f0.write_text(f0.read_text().replace("epochs: 360 ", "epochs: 90  "))
    assert variant_configs.main(["--root", str(root), "--check"]) == 1
    assert "dm_nfnet_f1.yaml: not current" in capsys.readouterr().err
    assert variant_configs.main(["--root", str(root)]) == 0
    assert variant_configs.stale_files(str(root)) == {}
    for folder in variant_configs.RECIPES:
        for name in variant_configs.F_VARIANTS:
            path = root / folder / f"{name}.yaml"
            cfg = load_config(path)
            row = VARIANTS[name]
            assert (cfg.arch, cfg.epochs, cfg.input_size, cfg.test_input_size, cfg.drop_rate) == \
                (name, 90, row.train_size, row.test_size, row.drop_rate)
            magnitude = f"randaugment_4{row.ra_magnitude:02d}" if "deepmind" in folder else f"-m{row.ra_magnitude}-"
            assert magnitude in cfg.auto_augment
            assert set(yaml.safe_load(path.read_text())) == set(load_config().to_dict())  # every key spelled out


def test_a_missing_f0_yaml_is_one_line_and_exit_2(tmp_path, capsys):
    assert variant_configs.main(["--root", str(tmp_path), "--check"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "dm_nfnet_f0.yaml" in err and err.count("\n") == 1
