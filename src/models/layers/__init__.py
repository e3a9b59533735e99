"""Building blocks shared by the NFNet models."""
from . import cpu_kernels
from .activations import GammaAct, NONLINEARITY_GAMMA
from .drop_path import DropPath
from .squeeze_excite import SqueezeExcite
from .std_conv import ScaledStdConv2d

__all__ = ["cpu_kernels", "GammaAct", "NONLINEARITY_GAMMA", "DropPath", "SqueezeExcite", "ScaledStdConv2d"]
