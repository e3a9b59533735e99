"""Training and evaluation steps.

- `create_train_step` -> `TrainStep`, the cell for `mindspore.train.Model(train_step).train`;
- `FunctionalTrainer`, the same step as a `value_and_grad` + `jit` loop;
- `GradientUpdate` (shared by both): loss-scale unscaling and overflow skipping
  (`LossScaler`), averaged gradient accumulation, data-parallel all-reduce, optimizer, `EMA`;
- `prepare_amp`, mixed precision with the sensitive parts in float32;
- `evaluate`, exact top-1 / top-5 / loss counts, also over sharded data.
"""
from .amp import KEEP_FP32_CELLS, prepare_amp
from .ema import EMA, copy_ema_to, ema_weights_applied
from .evaluate import evaluate
from .functional import FunctionalTrainer
from .loss_scale import LossScaler
from .train_step import TrainStep, create_train_step
from .update import GradientUpdate

__all__ = ["create_train_step", "TrainStep", "FunctionalTrainer", "GradientUpdate", "LossScaler",
           "EMA", "copy_ema_to", "ema_weights_applied", "prepare_amp", "KEEP_FP32_CELLS",
           "evaluate"]
