"""Building blocks shared by the NFNet models, and the pass that gives them a backend's fast forms."""
from .activations import GammaAct, NONLINEARITY_GAMMA
from .config import FastForms, active_forms
from .drop_path import DropPath, Dropout
from .fast_forms import apply_fast_forms, apply_plain_forms
from .pooling import AvgPool2x2Same
from .squeeze_excite import SqueezeExcite
from .std_conv import ScaledStdConv2d

__all__ = ["AvgPool2x2Same", "GammaAct", "NONLINEARITY_GAMMA", "DropPath", "Dropout", "SqueezeExcite",
           "ScaledStdConv2d", "FastForms", "active_forms", "apply_fast_forms", "apply_plain_forms"]
