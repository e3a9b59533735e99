"""NFNet models: `create_model(name, ...)` builds any registered variant."""
from . import nfnet  # noqa: F401  (registers the variants)
from .checkpoint import EMA_PREFIX, CheckpointError, load_model_weights
from .factory import create_model
from .nfnet import MODEL_CFGS, NfCfg, NormFreeNet
from .registry import is_model, list_models

__all__ = ["create_model", "list_models", "is_model", "load_model_weights", "CheckpointError",
           "EMA_PREFIX", "MODEL_CFGS", "NfCfg", "NormFreeNet"]
