"""Data settings carried by checkpoints: read without MindSpore, applied under the command line, timm's table."""
import json

import mindspore as ms
import numpy as np
import pytest

from src.config import load_config
from src.data.data_settings import (RECORD_KEY, apply_settings, checkpoint_entry, read_checkpoint_settings,
                                    read_text_entry, settings_from_config, timm_pretrained_settings)


def _save(path, append_dict, crc_check=False):
    params = [{"name": "a.weight", "data": ms.Tensor(np.arange(300, dtype=np.float32).reshape(3, 100))},
              {"name": "b", "data": ms.Tensor(np.ones(70000, np.float32))}]  # a length needing a 3-byte varint
    ms.save_checkpoint(params, str(path), append_dict=append_dict, crc_check=crc_check)
    return str(path)


@pytest.mark.parametrize("crc_check", [False, True])
def test_the_protobuf_walk_reads_what_mindspore_reads(tmp_path, crc_check):
    cfg = load_config(overrides={"num_classes": 3})
    record = settings_from_config(cfg, ["chat", "čaj", "茶"])  # non-ASCII names round-trip
    path = _save(tmp_path / "run.ckpt", {**checkpoint_entry(record), "epoch_num": 2, "note": "x"}, crc_check)
    assert read_text_entry(path, RECORD_KEY) == ms.load_checkpoint(path)[RECORD_KEY]
    assert read_checkpoint_settings(path) == json.loads(json.dumps(record))
    assert read_text_entry(path, "note") == "x"
    assert read_text_entry(path, "epoch_num") is None  # not text
    assert read_text_entry(path, "missing") is None


def test_checkpoints_without_settings_and_foreign_files_give_none(tmp_path):
    assert read_checkpoint_settings(_save(tmp_path / "plain.ckpt", None)) is None
    junk = tmp_path / "junk.ckpt"
    junk.write_bytes(b"not a checkpoint at all")
    assert read_checkpoint_settings(str(junk)) is None
    assert read_checkpoint_settings(str(tmp_path / "missing.ckpt")) is None


def test_the_record_wins_over_the_config_and_the_command_line_over_the_record():
    cfg = load_config(overrides={"arch": "dm_nfnet_nano", "num_classes": 10})
    record = timm_pretrained_settings("dm_nfnet_f0")
    applied, changed = apply_settings(cfg, record)
    assert (applied.arch, applied.num_classes) == ("dm_nfnet_f0", 1000)
    assert (applied.test_input_size, applied.crop_pct, applied.eval_crop_mode) == (256, 0.9, "squash")
    assert changed["crop_pct"] == (32, 0.9)
    kept, changed = apply_settings(load_config(), record, explicit={"test_input_size", "crop_pct", "eval_crop_mode"})
    assert (kept.test_input_size, kept.crop_pct, kept.eval_crop_mode) == (256, 32, "pixels")
    assert "crop_pct" not in changed
    assert apply_settings(cfg, None) == (cfg, {})


def test_the_timm_table_equals_timms_pretrained_cfgs():
    timm = pytest.importorskip("timm")
    for n in range(7):
        arch = f"dm_nfnet_f{n}"
        theirs = timm.models.get_pretrained_cfg(f"{arch}.dm_in1k").to_dict()
        ours = timm_pretrained_settings(arch)
        assert ours["input_size"] == theirs["input_size"][-1]
        assert ours["test_input_size"] == theirs["test_input_size"][-1]
        assert ours["crop_pct"] == theirs["crop_pct"]
        assert ours["eval_crop_mode"] == theirs["crop_mode"] == "squash"
        assert ours["interpolation"] == theirs["interpolation"]
        assert tuple(ours["mean"]) == tuple(theirs["mean"]) and tuple(ours["std"]) == tuple(theirs["std"])
    assert timm_pretrained_settings("dm_nfnet_nano") is None
