"""amp_dtype reaches mindspore.amp: DeepMind's recipe (experiment_nfnets.py bfloat16=True) trains in bfloat16.

mindspore.amp changes process-wide state (see test_amp.py), so the check runs in a process of its own.
The device is Ascend for prepare_amp's sake; the cells are only inspected, never run.
"""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = """
import mindspore
from src.config import load_config
from src.builders import build_network, build_optimizer, build_lr_schedule
from src.trainers.loss import create_loss
from src.trainers import create_train_step
from src.models.layers import ScaledStdConv2d, SqueezeExcite

cfg = load_config("src/configs/deepmind/dm_nfnet_f0.yaml", overrides=dict(arch="dm_nfnet_nano",
                  num_classes=10, ema=False))
network = build_network(cfg)
schedule, _, _ = build_lr_schedule(cfg, 2, 1)
step = create_train_step(network, create_loss(label_smoothing=0.1, soft_targets=True),
                         build_optimizer(cfg, network, schedule), amp_level=cfg.amp_level, amp_dtype=cfg.amp_dtype,
                         loss_scale=cfg.loss_scale, dynamic_loss_scale=cfg.is_dynamic_loss_scale,
                         device_target="Ascend")
flags = {}
for _, cell in step.network.cells_and_names():
    for flag in ("fp16", "bf16", "fp32"):
        if cell.get_flags().get(flag):
            flags.setdefault(type(cell).__name__, set()).add(flag)
print("STD_CONV", sorted(flags[ScaledStdConv2d.__name__]), "SE", sorted(flags[SqueezeExcite.__name__]))
print("SCALE", float(step.update.scaler.loss_scale.asnumpy()))
"""


@pytest.mark.timeout(300)
def test_deepmind_config_builds_a_bfloat16_network_with_float32_squeeze_excite():
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "STD_CONV ['bf16'] SE ['fp32']" in result.stdout, result.stdout[-2000:]
    assert "SCALE 1.0" in result.stdout  # bfloat16: no loss scaling, as DeepMind
