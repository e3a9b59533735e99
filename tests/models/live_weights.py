"""Random values for every parameter, so every residual branch, gain and SE gate contributes.

With the default init, skipinit_gain = 0 multiplies every residual branch by zero, gains are 1 and
biases 0: a test on such a network barely exercises the branches (a bug inside them changes
nothing). `random_value` is the one scheme for both frameworks: `randomize_` applies it to a
MindSpore network, timm_reference.randomize_ to timm's.
"""
import numpy as np


def random_value(name, shape, rng):
    """A float32 value for parameter `name` of `shape` (checkpoint names, the same in timm)."""
    shape = tuple(shape)
    if name.endswith("skipinit_gain"):
        value = rng.uniform(0.5, 1.0, shape)
    elif name.endswith(".gain"):
        value = rng.uniform(0.5, 1.5, shape)
    elif name.endswith("bias"):
        value = rng.standard_normal(shape) * 0.1
    else:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        # a non-zero mean exercises the centering of weight standardization
        value = (rng.standard_normal(shape) + 0.1) / fan_in ** 0.5
    return np.asarray(value, np.float32)


def randomize_(net, seed=0):
    """Give every Parameter of a MindSpore network a random value (in place); returns `net`."""
    import mindspore

    rng = np.random.default_rng(seed)
    for name, param in net.parameters_and_names():
        param.set_data(mindspore.Tensor(random_value(name, param.shape, rng)))
    return net


def live_nano(seed=0, num_classes=10, **kwargs):
    """dm_nfnet_nano with every parameter random (see the module docstring)."""
    from src.models import create_model

    return randomize_(create_model("dm_nfnet_nano", num_classes=num_classes, **kwargs), seed)
